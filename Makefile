# Everything runs from the virtual environment at .venv/ (created on first use).
VENV := .venv
BIN := $(VENV)/bin
PYTHON ?= python3

.PHONY: install run test lint down bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $@

# Bring up the embedded stack, seed a demo course, tag it with a worker and a progress
# bar, print where to see it in the Temporal UI. The stack stays up: `make down`.
run: install
	$(BIN)/hubjobs up
	$(BIN)/hubjobs demo --pages 2000

test: install lint
	$(BIN)/pytest

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .

down: install
	$(BIN)/hubjobs down

bench: install
	$(BIN)/python bench/bench_tagging.py

clean:
	-$(BIN)/hubjobs down
	rm -rf .hubjobs
