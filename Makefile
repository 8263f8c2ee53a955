# Everything runs from the virtual environment at .venv/ (created on first use).
VENV := .venv
BIN := $(VENV)/bin
PYTHON ?= python3

.PHONY: install system-deps run test unit lint compose-check down bench clean

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

# The fast tier first (tests/unit: no servers, seconds), then the tests on real servers.
test: install system-deps lint compose-check
	$(BIN)/pytest tests/unit
	$(BIN)/pytest --ignore=tests/unit

unit: install
	$(BIN)/pytest tests/unit

# Debian packages the tests use: Chromium (the Temporal UI browser test) and
# docker-compose (validating docker-compose.yml; no Docker engine is needed for that).
system-deps:
	@command -v chromium >/dev/null && command -v docker-compose >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium docker-compose >/dev/null; }

# The compose file, and the Temporal dynamic config it mounts (which `config` does not
# read): every key a list of values, each a `value` and optional `constraints`. Debian's
# docker-compose brings python3-yaml.
DYNAMIC_CONFIG := deploy/temporal/dynamicconfig.yaml
compose-check:
	docker-compose --env-file .env.example config --quiet
	python3 -c 'import sys, yaml; c = yaml.safe_load(open(sys.argv[1])); \
	  ok = isinstance(c, dict) and all(isinstance(v, list) and v and all(isinstance(e, dict) \
	    and "value" in e and set(e) <= {"value", "constraints"} and set(e.get("constraints") \
	    or {}) <= {"namespace", "taskQueueName", "taskType"} for e in v) for v in c.values()); \
	  sys.exit(0 if ok else sys.argv[1] + ": not a Temporal dynamic config file")' $(DYNAMIC_CONFIG)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .

down: install
	$(BIN)/hubjobs down

# Every benchmark side by side on servers of its own (~10 minutes): one table on stdout,
# plots and results.json in bench/results/. BENCH_ARGS passes flags to bench/run_all.py.
bench: install
	$(BIN)/python bench/run_all.py $(BENCH_ARGS)

clean:
	-$(BIN)/hubjobs down
	rm -rf .hubjobs
