# Two commands: `make run` (set up and start the server) and `make test` (set up and run every test).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: run test schemas bench clean browser

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

run: $(VENV)/.installed
	$(PY) server.py

# Dify's plugin SDK (dify_plugin 0.10.2) and workflow engine (graphon) need Python 3.12; the integration
# tests run them in subprocesses from this second environment. Override PYTHON312 if 3.12 lives elsewhere.
PYTHON312 ?= $(HOME)/.pyenv/versions/3.12.1/bin/python
VENV312 ?= .venv312
PY312 := $(VENV312)/bin/python

$(VENV312)/.installed: tests/py312/requirements.txt
	$(PYTHON312) -m venv $(VENV312)
	printf '*\n' > $(VENV312)/.gitignore
	$(PY312) -m pip install --quiet -r tests/py312/requirements.txt
	$(PY312) -m pip install --quiet --no-deps graphon==0.8.0
	touch $@

# The /ui inspector's browser tests drive Debian's Chromium (no browser is downloaded at run time); the CJK font
# keeps Chinese readable in their screenshots. Installing needs root, as CI has; if it fails, `make test` fails.
browser:
	command -v chromium >/dev/null && fc-list :lang=zh | grep -q . || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-wqy-microhei)

test: $(VENV)/.installed $(VENV312)/.installed browser
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(PY) -m pytest

schemas: $(VENV)/.installed
	$(PY) -m app.generate

clean:
	rm -rf $(VENV) $(VENV312) .pytest_cache
