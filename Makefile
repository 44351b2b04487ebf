# Two commands set everything up on a fresh machine:
#   make run    install the tool in .venv and run the whole walkthrough
#   make test   install the test dependencies in .venv, lint, check the imports' contracts
#               (pyproject.toml's [tool.importlinter]), and run the test suite on every core,
#               but for the long sweeps marked `slow`; `make test-all` (and CI, where CI=true)
#               runs those too
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# One worker per core (pytest-xdist), each test file on one worker: its fixtures built once.
PYTEST_WORKERS ?= -n auto --dist loadfile
PYTEST_SELECT := $(if $(or $(SLOW),$(filter true 1,$(CI))),,-m "not slow")

.PHONY: run install test test-all lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

install: $(BIN)/python
	$(BIN)/python -m pip install -q .

run: install
	$(BIN)/walkthrough run

test: $(BIN)/python
	$(BIN)/python -m pip install -q -e ".[test]"
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/python -m pytest $(PYTEST_WORKERS) $(PYTEST_SELECT)

test-all:
	$(MAKE) test SLOW=1

lint: $(BIN)/python
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: install
	$(BIN)/python benchmarks/bench_startup.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .hypothesis .import_linter_cache
