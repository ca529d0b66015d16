# Klique control plane. `make run` and `make test` are the two commands of the README.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
TEST_WORKERS ?= auto
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/klique
TEST_REDIS_URL ?= redis://127.0.0.1:6379/15

.PHONY: run test test-services lint install migrate seed clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[server,kubernetes,docker,test]"
	touch $@

install: $(VENV)/.installed

migrate: install
	$(PY) manage.py migrate --no-input

seed: migrate
	mkdir -p var
	$(PY) manage.py seed_demo

# The demo shortens the low watermark (default 900 s) so that its budget story fits in minutes.
run: export LOW_WATERMARK_S ?= 120
# The cloud pool's nodes (local klique-worker processes) enrol at this URL.
run: export KLIQUE_PUBLIC_URL ?= http://$(HOST):$(PORT)

## The portal and admin on the embedded SQLite default, with the demo estate, the engine (a loop
## in one process, or Celery worker and beat when REDIS_URL is set), worker daemons and demo load.
## The cloud pool's nodes run in sessions of their own (as VMs outlive their autoscaler): on the
## way out they are terminated through their provider. Ctrl-C stops the engine and the demo's
## daemons first (they report their tasks' stops to the portal, which stays up until the cloud
## nodes have ended), then the portal, and prints one line.
run: seed
	@echo "Klique: portal http://$(HOST):$(PORT)/  admin http://$(HOST):$(PORT)/admin/  (Ctrl-C stops all)"
	@trap 'trap - INT TERM EXIT; \
	  kill $$engine $$load 2>/dev/null; wait $$engine $$load; \
	  LOG_LEVEL=WARNING $(PY) manage.py cloud_release --all --wait 30 >/dev/null; \
	  kill $$web 2>/dev/null; wait $$web 2>/dev/null; echo "Klique: stopped"; exit 0' INT TERM EXIT; \
	if [ -n "$$REDIS_URL" ]; then \
	  $(VENV)/bin/celery -A klique worker -B -Q engine,meter,sweep,autoscale,whatif,celery --concurrency 2 --loglevel INFO \
	    --schedule var/celerybeat-schedule & \
	else \
	  $(PY) manage.py run_engine >/dev/null & \
	fi; \
	engine=$$!; \
	$(PY) manage.py demo_load --workers --server http://$(HOST):$(PORT) & \
	load=$$!; \
	$(PY) manage.py runserver --noreload $(HOST):$(PORT) & \
	web=$$!; \
	wait $$web

## The whole suite on the embedded SQLite default, on every core (pytest-xdist, a database file per
## worker). Tests that need a service this machine lacks skip, with the command that runs them.
test: install
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

## The same suite against real PostgreSQL and Redis: installs them from Debian's packages where
## missing (root) and starts them on loopback. With CI=1 (as .ci/run sets) whatever is missing fails.
test-services: install
	deploy/dev-services/start.sh postgresql redis
	DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) \
	  $(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadfile --create-db $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache

clean:
	rm -rf $(VENV) db.sqlite3 .pytest_cache .ruff_cache .hypothesis staticfiles
