# Klique control plane. `make run` and `make test` are the two commands of the README.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test lint install migrate seed clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	touch $@

install: $(VENV)/.installed

migrate: install
	$(PY) manage.py migrate --no-input

seed: migrate
	$(PY) manage.py seed_demo

## The portal and admin on the embedded SQLite default, with the demo estate.
run: seed
	@echo "Klique: portal http://$(HOST):$(PORT)/  admin http://$(HOST):$(PORT)/admin/"
	$(PY) manage.py runserver $(HOST):$(PORT)

## The whole suite. With DATABASE_URL / REDIS_URL set it runs against PostgreSQL and Redis.
test: install
	$(VENV)/bin/pytest $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

clean:
	rm -rf $(VENV) db.sqlite3 .pytest_cache .ruff_cache .hypothesis staticfiles
