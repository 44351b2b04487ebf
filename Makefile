# Two commands set everything up on a fresh machine:
#   make run    install the tool in .venv and run the whole walkthrough
#   make test   install the test dependencies in .venv, lint, check the imports' contracts
#               (pyproject.toml's [tool.importlinter]), and run the whole test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: run install test lint bench clean

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
	$(BIN)/python -m pytest

lint: $(BIN)/python
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: install
	$(BIN)/python benchmarks/bench_startup.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .hypothesis .import_linter_cache
