# Two commands: `make run` (set up and start the server) and `make test` (set up and run every test).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: run test test-engine schemas bench clean browser redis

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

# The multi-process tests start Debian's redis-server on a free loopback port (no persistence, a temp folder).
redis:
	command -v redis-server >/dev/null || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server)

# The store and node tests again on the C++ Milvus Lite 2.5.1 (embedded, the closest engine to a Milvus 2.5 server
# that runs here), in its own environment, with the in-process index off (TEST_ENGINE, tests/conftest.py).
VENV_ENGINE ?= .venv-engine
PY_ENGINE := $(VENV_ENGINE)/bin/python
ENGINE_TESTS ?= tests/test_store.py tests/test_sessions.py tests/test_memory_nodes.py tests/test_admin.py \
	tests/test_assemble.py tests/test_retrieval_hybrid.py tests/test_read_caches.py tests/test_compact_node.py \
	tests/test_recall_packing.py tests/test_errors.py

$(VENV_ENGINE)/.installed: tests/engine-requirements.txt
	$(PYTHON) -m venv $(VENV_ENGINE)
	printf '*\n' > $(VENV_ENGINE)/.gitignore
	$(PY_ENGINE) -m pip install --quiet -r tests/engine-requirements.txt
	touch $@

test-engine: $(VENV_ENGINE)/.installed
	TEST_ENGINE=cpp-lite $(PY_ENGINE) -m pytest -p no:cacheprovider \
		-W "ignore:pkg_resources is deprecated:UserWarning" $(ENGINE_TESTS)

test: $(VENV)/.installed $(VENV312)/.installed browser redis
	$(PY) -m pytest
	$(MAKE) test-engine

schemas: $(VENV)/.installed
	$(PY) -m common.openapi

clean:
	rm -rf $(VENV) $(VENV312) $(VENV_ENGINE) .pytest_cache
