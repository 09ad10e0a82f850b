# vpatch — every target does its own set-up; `make test` is what CI runs.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
CACHE ?= /var/cache/vpatch-test
export VPATCH_TEST_CACHE := $(CACHE)

.PHONY: install test lint unit demo bench docs clean

$(BIN)/vpatch: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

install: $(BIN)/vpatch

lint: install
	$(BIN)/ruff check patcher tests
	$(BIN)/ruff format --check patcher tests
	$(BIN)/mypy

unit: install
	$(BIN)/pytest -q tests/unit

test: install lint
	$(BIN)/pytest -q -ra --durations=15 tests

demo: install
	$(BIN)/python -m tests.envs demo

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
