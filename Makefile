# One task runner for setup, the demo, the tests and the linters.
# TORCH picks the torch build: the default is the CPU wheel this project is developed on; on a
# GPU machine use e.g. `make setup TORCH=torch` (a CUDA build from PyPI).
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH ?= torch==2.13.0
PYTEST_ARGS ?=
# The inner loop: no GPU, no Ray head, no service or trial processes, nothing slow (~1 min).
FAST_TESTS := not (gpu or slow or ray or service or trials or browser)

.PHONY: setup demo test test-fast lint format gpu-test

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[worker,dev]"
	touch $@

demo: setup
	$(VENV)/bin/autotuner tune examples/tiny.yaml --space cpu-demo --trials 8

# The whole suite, as CI runs it (.ci/run): real Postgres, Ray, services, trials; ~10 min.
test: setup
	$(PY) -m pytest -m "not gpu" $(PYTEST_ARGS)

test-fast: setup
	$(PY) -m pytest -m "$(FAST_TESTS)" $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check autotuner workers tests bench
	$(VENV)/bin/ruff format --check autotuner workers tests bench
	$(VENV)/bin/mypy

format: setup
	$(VENV)/bin/ruff check --fix autotuner workers tests bench
	$(VENV)/bin/ruff format autotuner workers tests bench

gpu-test: setup
	$(PY) -m pytest -m gpu $(PYTEST_ARGS)
