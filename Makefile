# Two commands: `make run` (set up and start the server) and `make test` (set up and run every test).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: run test schemas bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

run: $(VENV)/.installed
	$(PY) server.py

test: $(VENV)/.installed
	$(PY) -m pytest

schemas: $(VENV)/.installed
	$(PY) -m common.openapi

clean:
	rm -rf $(VENV) .pytest_cache
