# The two commands: `make run` (a working dashboard on a simulated grid) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000
# Python's bytecode caches (__pycache__/, git-ignored) stay on for these commands even where the
# environment turns them off: without them every pytest process (each xdist worker) rewrites and
# compiles every test module again, about 9 s of CPU a process, most of a collection's cost.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: run test bench-test install migrate demo demo-reset worker bench reliability screenshots check lint format clean simulate worlds

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Reinstall only when requirements.txt changes.
$(STAMP): requirements.txt | $(BIN)/python
	$(BIN)/pip install --quiet -r requirements.txt
	touch $(STAMP)

install: $(STAMP)

# Without DATABASE_URL, a command on the embedded PostgreSQL (var/postgres): started for it when it
# is not running, and stopped after it (config/embedded_db.py).
WITH_DB := $(BIN)/python -m config.embedded_db with --

migrate: install
	$(WITH_DB) $(BIN)/python manage.py migrate --no-input

demo: migrate
	$(WITH_DB) $(BIN)/python manage.py demo_fleet

# The demo is built once per database and kept across restarts; this builds it anew, on purpose
# (the demo's nodes and what was done to them are removed; other nodes are left alone).
demo-reset: migrate
	$(WITH_DB) $(BIN)/python manage.py demo_fleet --reset

# The embedded database, migrate, the demo (built once per database), then web and worker (with the
# reaper's beat) side by side; Ctrl-C stops all three within 10 s (scripts/run.py says how, and stops
# a worker an earlier run left behind).
run: install
	@$(BIN)/python scripts/run.py --host $(HOST) --port $(PORT)

# One worker on the configured broker (CELERY_BROKER_URL), as `make run` starts.
worker: install
	$(WITH_DB) $(BIN)/celery -A config worker --beat --loglevel=INFO --schedule=var/celerybeat-schedule

# Two pytest-xdist workers (a module's or a class's tests stay on one worker, so the fixtures they
# share are built once); `make check XDIST=` runs in one process.
XDIST ?= -n 2 --dist loadscope

# Everything: slow, worker and browser tests included. Both parts run on both cores (pytest-xdist; each
# worker has its own test database, Redis db and VAR_DIR, tests/testenv.py; servers take free ports, the
# embedded PostgreSQL a unix socket in the test's folder). The slow, worker and browser tests run after
# the quick part: on 2 cores they took 11:02 this way on a quiet machine (568 tests, the tests of a second
# or more among them), against 19 to 21 minutes in one process (issue 46), their timed assertions included. `make test SLOW_XDIST=`
# runs them in one process.
SLOW_XDIST ?= $(XDIST)
test: install lint
	$(BIN)/python -m pytest $(XDIST) -m "not slow and not worker and not browser"
	$(BIN)/python -m pytest $(SLOW_XDIST) -m "slow or worker or browser"
	$(MAKE) --no-print-directory bench-test

# The bench's own code (its seed, its report, the kill loop at suite size): bench/tests/, with the
# suite's fixtures. The suite (tests/) imports nothing from bench/.
bench-test: install
	$(BIN)/python -m pytest bench/tests

# The quick loop (aim: under 2 minutes on 2 cores, issue 46; 1:46 after its moves, 1:52 to 2:14 at 3,460 tests on
# 2026-12-07, the machine's own noise ±10 %): all but the tests marked
# slow, worker or browser (a test that takes a second or more on its own is marked slow, docs/testing.md).
# It keeps its test databases between runs (--reuse-db: migrate applies only what is new), as creating
# them and dropping them (a checkpoint of everything the run wrote) cost half a minute a run;
# `make check REUSE_DB=--create-db` builds them afresh. `make test` always starts from new ones.
# Property tests that set no example count of their own try 25 examples here, 100 in `make test`
# (the profile is in tests/conftest.py).
REUSE_DB ?= --reuse-db
check: install lint
	$(BIN)/python -m pytest -q $(XDIST) $(REUSE_DB) --hypothesis-profile=quick -m "not slow and not worker and not browser"

# ruff's lint and format check (pyproject.toml); `make format` rewrites the files.
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Figures at 100, 1,000 and 10,000 nodes (own database, Redis db 6) into BENCHMARKS.md;
# a short run: make bench BENCH_ARGS="--sizes 100,1000 --quick"
# Retake the README's screenshots (docs/screenshots/) through the browser tests.
screenshots: install
	UPDATE_SCREENSHOTS=1 $(BIN)/python -m pytest tests/browser -q

bench: install
	$(BIN)/python bench/run.py $(BENCH_ARGS)

# A month of marketplace traffic against each policy (1,000 nodes, 10,000 events, an rmb-peer as deployed;
# add --no-rmb for the Grid Proxy alone): SIMULATION.md and its chart.
simulate: install
	$(BIN)/python manage.py simulate_traffic --nodes 1000 --events 10000 --seed 7 --write SIMULATION.md --chart docs/simulation.png

# Six months, one per world of hidden memory use (builds, wide, nodes), without and with probes, each
# beside the oracle that is told every node's hidden use (issue 44); about half an hour on 2 cores.
worlds: install
	$(BIN)/python manage.py simulate_traffic --worlds --nodes 1000 --events 10000 --seed 1206 --write docs/worlds.md

# The long reliability runs (kill loop, 10,000-case fuzz, faults, load under gunicorn, check --deploy,
# schemathesis, the dripping Grid Proxy, the user in no group); results in
# bench/reliability/results/latest.json, written up in RELIABILITY.md. `make test` does not run them.
# Some stages only: make reliability RELIABILITY_ARGS="--only drip,nogroup"
reliability: install
	$(BIN)/python bench/reliability/run.py $(RELIABILITY_ARGS)

clean:
	rm -rf var staticfiles .pytest_cache .hypothesis
