# The two commands: `make serve` and `make test`. Each bootstraps .venv from nothing, serve with
# the runtime dependencies only.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Two stamps: what serving needs (the service, its runtime dependencies and the SDK: `make serve`),
# and the dev tools on top of it (`make test`, `lint`, the benchmarks: pytest, Playwright, ruff...).
RUNTIME := $(VENV)/.runtime
STAMP := $(VENV)/.installed
# Every version `make` installs, dev tools included, pinned; `make lock` writes it.
LOCK := requirements.lock
UV_VERSION := 0.13.9

.PHONY: serve test lint lock openapi clean bench bench-quick scaling chaos chaos-long abuse report screenshots

# pip first, at the lock's version: the later installs need its --build-constraint, which pins
# the build backends (setuptools, hatchling) of the editable installs too. pip's own output is the
# progress shown (a minute of silence reads as a hang). setuptools ends every editable install of
# a folder mapped to another package name (lua/ as echomq_http.lua) with an "Editable
# installation" notice in a warning's clothes; it says nothing about this project, so it is
# filtered out by its text.
PIP_INSTALL := PYTHONWARNINGS='ignore:Editable installation' $(PY) -m pip install -c $(LOCK) --build-constraint $(LOCK)

$(RUNTIME): pyproject.toml clients/python/pyproject.toml $(LOCK)
	@echo "make: installing the service and what it needs to run into $(VENV), at the versions of $(LOCK)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -c $(LOCK) pip
	$(PIP_INSTALL) -e . -e ./clients/python
	touch $@

$(STAMP): $(RUNTIME)
	@echo "make: adding the dev tools (tests, lint, benchmarks) to $(VENV), at the versions of $(LOCK)"
	$(PIP_INSTALL) -e '.[dev]'
	touch $@

# Regenerates the lock after a change of dependencies (pins already there stay; LOCK_ARGS=--upgrade
# moves them all to the newest). uv resolves once for every platform and Python >= 3.11, against
# PyPI (it reads no pip.conf: UV_DEFAULT_INDEX names a mirror); the lock is a plain requirements
# file, so installing from it needs pip only. `pip` on stdin: the bootstrap takes pip from the lock;
# the client package from its folder (the server needs it; it is not on PyPI), never pinned.
lock:
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet uv==$(UV_VERSION)
	printf 'pip\n-e ./clients/python\n' | $(VENV)/bin/uv pip compile --quiet --universal --python-version 3.11 \
	  --extra dev --no-emit-package echomq-client \
	  --custom-compile-command 'make lock' $(LOCK_ARGS) -o $(LOCK) - pyproject.toml clients/python/pyproject.toml

serve: $(RUNTIME)
	exec $(VENV)/bin/emq serve

test: $(STAMP)
	$(PY) -m pytest

lint: $(STAMP)
	$(PY) -m ruff check service tests clients examples bench
	$(VENV)/bin/hadolint Dockerfile
	$(VENV)/bin/check-jsonschema --builtin-schema vendor.compose-spec examples/compose.yaml

openapi: $(STAMP)
	$(PY) -m echomq_http.api.openapi > openapi/openapi.json

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

# Benchmarks print figures; they assert nothing and are not part of `make test`.
bench: $(STAMP)
	$(PY) bench/bench.py $(BENCH_ARGS)

bench-quick: $(STAMP)
	$(PY) bench/bench.py --quick $(BENCH_ARGS)

# Regenerates the measured blocks of docs/PERFORMANCE.md and docs/RELIABILITY.md on this commit, and
# the README's screenshots
# (about 40 minutes; run it alone). REPORT_ARGS="--only bench" for one block.
report: $(STAMP)
	$(PY) bench/report/report.py $(REPORT_ARGS)

# The README's screenshots (docs/img/), of a scene a script makes: queues at work for a few minutes
# (the charts need the minutes), then chromium (Debian's: apt-get install chromium) over the dashboard.
screenshots: $(STAMP)
	$(PY) bench/report/screenshots.py $(SCREENSHOTS_ARGS)

scaling: $(STAMP)
	$(PY) bench/perf/scaling.py

# The chaos harness: kills workers, replicas and Redis, skews a clock; exits non-zero on any loss.
CHAOS_ARGS ?=
chaos: $(STAMP)
	$(PY) bench/chaos/chaos.py --profile short $(CHAOS_ARGS)

chaos-long: $(STAMP)
	$(PY) bench/chaos/chaos.py --profile long $(CHAOS_ARGS)

# Hostile floods against a live service with workers running (bench/chaos/abuse.py): exits non-zero
# on a lost job, a late reclaim, a probe p99 over 1 s after a flood, or a process over 300 MB.
# ABUSE_ARGS=--quick: the short profile (about 2 minutes).
ABUSE_ARGS ?=
abuse: $(STAMP)
	$(PY) bench/chaos/abuse.py $(ABUSE_ARGS)
