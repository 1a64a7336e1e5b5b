# sentinel — build, test and demo. Everything installs into project-local folders.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: all install demo test lint typecheck unit loopback engine engine-env chaos bench bench-sim clean

all: test

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/sentinel demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

unit: $(STAMP)
	$(PY) -m pytest -q tests/unit

loopback: $(STAMP)
	$(PY) -m pytest -q tests/loopback tests/contract -m "not engine"

test: $(STAMP)
	$(MAKE) lint typecheck
	$(PY) -m pytest -q -m "not slow" tests

bench-sim: $(STAMP)
	$(PY) -m tests.bench.bench_sim_capacity

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
