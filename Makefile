# One task runner for setup, the demo, the tests and the linters.
VENV ?= .venv
PY := $(VENV)/bin/python
# TORCH picks the torch build. With an NVIDIA GPU (a working `nvidia-smi`): the CUDA build from
# PyPI (~3 GB with its nvidia-* packages). Without one: the CPU build (~190 MB), which PyPI does
# not carry: it comes from a local wheel if pip's configured sources have one, else from
# PyTorch's CPU index. Any other build: `make setup TORCH=...`.
GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)
comma := ,
TORCH ?= torch==2.13.0$(if $(GPU),,+cpu)
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
PYTEST_ARGS ?=
# The inner loop: no GPU, no Ray head, no service or trial processes, nothing slow (~2.5 min).
FAST_TESTS := not (gpu or slow or ray or service or trials or browser)

.PHONY: setup demo test test-fast lint format gpu-test

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@echo "installing $(TORCH) ($(if $(GPU),NVIDIA GPU found,no NVIDIA GPU: the CPU build))"
	$(PY) -m pip install -q "$(TORCH)" $(if $(GPU),,2>/dev/null || \
		$(PY) -m pip install -q "$(TORCH)" --extra-index-url $(TORCH_CPU_INDEX))
	$(PY) -m pip install -q -e ".[worker,dev$(if $(GPU),$(comma)kernels,)]"
	touch $@

demo: setup
	$(VENV)/bin/autotuner tune examples/tiny.yaml --space cpu-demo --trials 8

# The whole suite, as CI runs it (.ci/run): real Postgres, Ray, services, trials. Most of it
# waits on processes, so it runs in TEST_WORKERS processes (pytest-xdist; each test's Postgres
# database, Ray cluster, ports and temp dirs are its own); the tests that assert wall-clock
# limits (marker `timing`) run after it, alone, where load from the others cannot decide them.
# 3 processes on 2 cores keep both busy while tests wait on processes, faster than 2 or 4.
# Collection order is kept on purpose: it mixes the CPU-bound compiles with the tests that wait
# on processes, where the minute-long tests first would run the compiles beside each other.
# Timings: bench/results/test_suite_cpu.md.
TEST_WORKERS ?= 3
test: setup
	$(PY) -m pytest -m "not gpu and not timing" -n $(TEST_WORKERS) $(PYTEST_ARGS)
	$(PY) -m pytest -m "not gpu and timing" $(PYTEST_ARGS)

# In TEST_WORKERS processes too, faster than one (bench/results/test_suite_cpu.md).
test-fast: setup
	$(PY) -m pytest -m "$(FAST_TESTS)" -n $(TEST_WORKERS) $(PYTEST_ARGS)

lint: setup
	@# A merge's conflict markers left in a tracked file (docs and results included: ruff sees
	@# only Python).
	@! git grep -n -E '^(<{7} |>{7} |={7}$$)' -- . ':!*.db' || (echo "conflict markers above"; false)
	$(VENV)/bin/ruff check autotuner workers tests bench
	$(VENV)/bin/ruff format --check autotuner workers tests bench
	$(VENV)/bin/mypy

format: setup
	$(VENV)/bin/ruff check --fix autotuner workers tests bench
	$(VENV)/bin/ruff format autotuner workers tests bench

gpu-test: setup
	$(PY) -m pytest -m gpu $(PYTEST_ARGS)
