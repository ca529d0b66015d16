# Klique control plane. `make run` and `make test` are the two commands of the README.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
GATEWAY_PORT ?= 8001
TEST_WORKERS ?= auto
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/klique
TEST_REDIS_URL ?= redis://127.0.0.1:6379/15

.PHONY: run test test-services lint install migrate seed clean

# Everything (make test, make lint, CI), and what make run, migrate and seed need.
ALL_EXTRAS := server,sessions,kubernetes,docker,test
RUN_EXTRAS := server,sessions
MIGRATE_AND_SEED := from django.core.management import call_command as c; \
  c('migrate', interactive=False, skip_checks=False); c('seed_demo')

## $(call install,EXTRAS): the checkout, editable, and pip into $(VENV). uv installs them when it is on
## PATH or in $(VENV) (else pip puts it there first): 10-20 s from empty caches where pip alone took
## 60-190 s (docs/benchmarks.md, "Start-up"). pip does when uv cannot be installed or fails. uv reads
## pip's index from PIP_INDEX_URL and PIP_EXTRA_INDEX_URL only (not pip.conf).
define install
@set -e; \
	[ -x $(PY) ] || { echo "$(PYTHON) -m venv --without-pip $(VENV)"; $(PYTHON) -m venv --without-pip $(VENV); }; \
	uv=$$(command -v uv || true); \
	[ -n "$$uv" ] || [ ! -x $(VENV)/bin/uv ] || uv=$(VENV)/bin/uv; \
	if [ -z "$$uv" ]; then \
	  echo "$(PYTHON) -m pip --python $(PY) install --quiet uv"; \
	  if $(PYTHON) -m pip --python $(PY) install --quiet --disable-pip-version-check uv 2>/dev/null \
	    || { $(PY) -m ensurepip --upgrade >/dev/null && $(PY) -m pip install --quiet --disable-pip-version-check uv; }; \
	  then uv=$(VENV)/bin/uv; else echo "Klique: uv could not be installed; pip installs"; fi; \
	fi; \
	[ -z "$${PIP_INDEX_URL:-}" ] || export UV_INDEX_URL="$${UV_INDEX_URL:-$$PIP_INDEX_URL}"; \
	[ -z "$${PIP_EXTRA_INDEX_URL:-}" ] || export UV_EXTRA_INDEX_URL="$${UV_EXTRA_INDEX_URL:-$$PIP_EXTRA_INDEX_URL}"; \
	if [ -n "$$uv" ]; then \
	  echo "$$uv pip install --quiet --python $(PY) --upgrade-package pip pip -e \".[$(1)]\""; \
	  "$$uv" pip install --quiet --python $(PY) --upgrade-package pip pip -e ".[$(1)]" && exit 0; \
	  echo "Klique: uv could not install; pip installs"; \
	fi; \
	$(PY) -m pip --version >/dev/null 2>&1 || $(PY) -m ensurepip --upgrade >/dev/null; \
	echo "$(PY) -m pip install --quiet --upgrade pip"; \
	$(PY) -m pip install --quiet --upgrade pip; \
	echo "$(PY) -m pip install --quiet -e \".[$(1)]\""; \
	$(PY) -m pip install --quiet -e ".[$(1)]"
endef

$(VENV)/.installed: pyproject.toml
	$(call install,$(ALL_EXTRAS))
	touch $@ $(VENV)/.installed-server

$(VENV)/.installed-server: pyproject.toml
	$(if $(shell [ $(VENV)/.installed -nt pyproject.toml ] && echo all),,$(call install,$(RUN_EXTRAS)))
	touch $@

install: $(VENV)/.installed

migrate: $(VENV)/.installed-server
	$(PY) manage.py migrate --no-input

## migrate, then the demo estate, in one process: Django starts once, not twice.
seed: $(VENV)/.installed-server
	mkdir -p var
	$(PY) manage.py shell --no-imports -c "$(MIGRATE_AND_SEED)"

# The demo shortens the low watermark (default 900 s) so that its budget story fits in minutes.
run: export LOW_WATERMARK_S ?= 120
# The cloud pool's nodes (local klique-worker processes) enrol at this URL.
run: export KLIQUE_PUBLIC_URL ?= http://$(HOST):$(PORT)
# Sessions open through the session gateway (docs/sessions.md): the demo's daemons keep a tunnel to it.
run: export KLIQUE_SESSION_GATEWAY_URL ?= http://$(HOST):$(GATEWAY_PORT)

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
	  kill $$web $$gateway 2>/dev/null; wait $$web $$gateway 2>/dev/null; echo "Klique: stopped"; exit 0' INT TERM EXIT; \
	if [ -n "$$REDIS_URL" ]; then \
	  $(VENV)/bin/celery -A klique worker -B -Q engine,meter,sweep,autoscale,whatif,celery --concurrency 2 --loglevel INFO \
	    --schedule var/celerybeat-schedule & \
	else \
	  $(PY) manage.py run_engine >/dev/null & \
	fi; \
	engine=$$!; \
	$(PY) manage.py demo_load --workers --server http://$(HOST):$(PORT) & \
	load=$$!; \
	$(VENV)/bin/klique-gateway --listen $(HOST):$(GATEWAY_PORT) --control-plane http://$(HOST):$(PORT) \
	  --public-url $$KLIQUE_SESSION_GATEWAY_URL --portal-url http://$(HOST):$(PORT) --log-level WARNING & \
	gateway=$$!; \
	$(PY) manage.py runserver --noreload --skip-checks $(HOST):$(PORT) & \
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
