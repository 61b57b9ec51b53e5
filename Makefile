# The two commands: `make serve` and `make test`. Each bootstraps .venv from nothing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: serve test lint openapi clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

serve: $(STAMP)
	exec $(PY) -m service

test: $(STAMP)
	$(PY) -m pytest

lint: $(STAMP)
	$(PY) -m ruff check service tests
	$(VENV)/bin/hadolint Dockerfile

openapi: $(STAMP)
	$(PY) -m service.openapi > openapi/openapi.json

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
