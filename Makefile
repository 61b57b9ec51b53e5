# The two commands: `make serve` and `make test`. Each bootstraps .venv from nothing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: serve test lint openapi clean bench bench-quick scaling chaos chaos-long report

$(STAMP): pyproject.toml clients/python/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]' -e ./clients/python
	touch $(STAMP)

serve: $(STAMP)
	exec $(VENV)/bin/emq serve

test: $(STAMP)
	$(PY) -m pytest

lint: $(STAMP)
	$(PY) -m ruff check service tests clients examples bench
	$(VENV)/bin/hadolint Dockerfile

openapi: $(STAMP)
	$(PY) -m service.openapi > openapi/openapi.json

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

# Benchmarks print figures; they assert nothing and are not part of `make test`.
bench: $(STAMP)
	$(PY) bench/bench.py $(BENCH_ARGS)

bench-quick: $(STAMP)
	$(PY) bench/bench.py --quick $(BENCH_ARGS)

# Regenerates the measured blocks of docs/PERFORMANCE.md and docs/RELIABILITY.md on this commit
# (about 40 minutes; run it alone). REPORT_ARGS="--only bench" for one block.
report: $(STAMP)
	$(PY) bench/report.py $(REPORT_ARGS)

scaling: $(STAMP)
	$(PY) bench/scaling.py

# The chaos harness: kills workers, replicas and Redis, skews a clock; exits non-zero on any loss.
CHAOS_ARGS ?=
chaos: $(STAMP)
	$(PY) bench/chaos.py --profile short $(CHAOS_ARGS)

chaos-long: $(STAMP)
	$(PY) bench/chaos.py --profile long $(CHAOS_ARGS)
