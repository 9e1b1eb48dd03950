# The two commands: `make run` (a working dashboard on a simulated grid) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test install migrate demo worker bench reliability screenshots check clean simulate

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Reinstall only when requirements.txt changes.
$(STAMP): requirements.txt | $(BIN)/python
	$(BIN)/pip install --quiet -r requirements.txt
	touch $(STAMP)

install: $(STAMP)

migrate: install
	$(BIN)/python manage.py migrate --no-input

demo: migrate
	$(BIN)/python manage.py demo_fleet

# Web and worker (with the reaper's beat) side by side; Ctrl-C stops both.
run: demo
	@$(BIN)/python manage.py demo_fleet --print-logins
	@echo "Dashboard: http://$(HOST):$(PORT)/   (Ctrl-C stops web and worker)"
	@trap 'kill 0' INT TERM EXIT; \
	$(BIN)/celery -A dashboard worker --beat --loglevel=INFO --concurrency=2 \
	    --schedule=var/celerybeat-schedule --logfile=var/worker.log & \
	$(BIN)/python manage.py runserver --noreload $(HOST):$(PORT)

# One worker on the configured broker (CELERY_BROKER_URL), as `make run` starts.
worker: install
	$(BIN)/celery -A dashboard worker --beat --loglevel=INFO --schedule=var/celerybeat-schedule

test: install
	$(BIN)/python -m pytest

# Figures at 100, 1,000 and 10,000 nodes (own database, Redis db 6) into BENCHMARKS.md;
# a short run: make bench BENCH_ARGS="--sizes 100,1000 --quick"
# Retake the README's screenshots (docs/screenshots/) through the browser tests.
screenshots: install
	UPDATE_SCREENSHOTS=1 $(BIN)/python -m pytest tests/browser -q

bench: install
	$(BIN)/python bench/run.py $(BENCH_ARGS)

# A month of marketplace traffic against each policy (1,000 nodes, 10,000 events): SIMULATION.md and its chart.
simulate: install
	$(BIN)/python manage.py simulate_traffic --nodes 1000 --events 10000 --seed 7 --write SIMULATION.md --chart docs/simulation.png

# The long reliability runs (kill loop, 10,000-case fuzz, faults, load under gunicorn, check --deploy);
# results in bench/reliability/results/latest.json, written up in RELIABILITY.md. `make test` does not run them.
reliability: install
	$(BIN)/python bench/reliability/run.py $(RELIABILITY_ARGS)

check: install
	$(BIN)/python -m pytest -x -q

clean:
	rm -rf var staticfiles .pytest_cache .hypothesis
