# Everything runs from the virtual environment at .venv/ (created on first use).
VENV := .venv
BIN := $(VENV)/bin
PYTHON ?= python3

.PHONY: install system-deps run test lint compose-check down bench clean

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
	$(BIN)/hubjobs demo --pages 20000

test: install system-deps lint compose-check
	$(BIN)/pytest

# Debian packages the tests use: Chromium (the Temporal UI browser test) and
# docker-compose (validating docker-compose.yml; no Docker engine is needed for that).
system-deps:
	@command -v chromium >/dev/null && command -v docker-compose >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium docker-compose >/dev/null; }

compose-check:
	docker-compose --env-file .env.example config --quiet

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .

down: install
	$(BIN)/hubjobs down

bench: install
	$(BIN)/python bench/bench_tagging.py
	$(BIN)/python bench/bench_backup.py
	$(BIN)/python bench/bench_restore.py

clean:
	-$(BIN)/hubjobs down
	rm -rf .hubjobs
