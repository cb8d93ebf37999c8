# Two commands: `make run` (set up and start the server) and `make test` (set up and run every test).
# Prerequisites: Python >= 3.11 and make. Optional: Python 3.12 (the Dify tests), Chromium (the /ui browser
# tests), redis-server and nginx (installed by root with apt-get); without them `make test` skips those tests and
# says why, except under CI=true, where they are required.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: run test test-engine schemas plugins bench clean browser acn redis nginx

# `make run` needs the runtime dependencies only (~150 MB); `make test` adds the test extras (Playwright,
# schemathesis, gunicorn, the USE embedder ...). An environment `make test` built already serves `make run`.
$(VENV)/.runtime: pyproject.toml
	@if [ -f $(VENV)/.installed ] && [ $(VENV)/.installed -nt pyproject.toml ]; then touch $@; else \
		$(PYTHON) -m venv $(VENV) && \
		$(PY) -m pip install --quiet --upgrade pip && \
		$(PY) -m pip install --quiet -e . && \
		touch $@; \
	fi

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

# The embedder is the settings' default (`use`, chosen by python -m bench.recall) unless ACN_EMBEDDER says otherwise:
# `make run`, `python server.py`, gunicorn and the image all get the same one.
run: $(VENV)/.runtime
	@echo "Operator CLI: $(VENV)/bin/acn --help (or: make acn)"
	$(PY) server.py

acn: $(VENV)/.runtime
	@$(VENV)/bin/acn --help

# Dify's plugin SDK (dify_plugin 0.10.2) and workflow engine (graphon) need Python 3.12; the integration
# tests run them in subprocesses from this second environment. The interpreter is found by
# tests/py312/find_python312.sh (PYTHON312=..., python3.12 on PATH, pyenv, uv); when there is none, the
# environment is not built and those tests skip, or fail under CI=true.
VENV312 ?= .venv312
PY312 := $(VENV312)/bin/python

$(VENV312)/.installed: tests/py312/requirements.txt
	@py312=$$(sh tests/py312/find_python312.sh); \
	if [ -z "$$py312" ]; then \
		if [ "$$CI" = "true" ]; then \
			echo "error: Python 3.12 not found (CI=true needs it): install it, or pass PYTHON312=/path/to/python3.12" >&2; \
			exit 1; \
		fi; \
		echo "note: Python 3.12 not found (python3.12 on PATH, pyenv, uv or PYTHON312=...): the Dify tests will be SKIPPED" >&2; \
		exit 0; \
	fi; \
	echo "Python 3.12 for the Dify tests: $$py312"; \
	"$$py312" -m venv $(VENV312) && printf '*\n' > $(VENV312)/.gitignore && \
	$(PY312) -m pip install --quiet -r tests/py312/requirements.txt && \
	$(PY312) -m pip install --quiet --no-deps graphon==0.8.0 && \
	touch $@

# The /ui inspector's browser tests drive a system Chromium (no browser is downloaded at run time); the CJK font
# keeps Chinese readable in their screenshots. Installed with apt-get only when missing and only as root;
# otherwise this prints what to install, and the browser tests skip (fail under CI=true).
browser:
	@if (command -v chromium || command -v chromium-browser) >/dev/null 2>&1 && fc-list :lang=zh 2>/dev/null | grep -q .; then \
		exit 0; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-wqy-microhei; \
	elif [ "$$CI" = "true" ]; then \
		echo "error: Chromium and a CJK font are missing (CI=true needs them): apt-get install chromium fonts-wqy-microhei as root" >&2; \
		exit 1; \
	else \
		echo "note: Chromium or a CJK font is missing and this is not root with apt-get: the browser tests will be SKIPPED." >&2; \
		echo "      Install them yourself (Debian/Ubuntu: sudo apt-get install chromium fonts-wqy-microhei;" >&2; \
		echo "      Fedora: sudo dnf install chromium wqy-microhei-fonts; macOS: brew install --cask chromium)" >&2; \
		echo "      or point CHROMIUM_PATH at a Chromium binary." >&2; \
	fi

# The multi-process tests start Debian's redis-server on a free loopback port (no persistence, a temp folder).
# Root with apt-get installs it; CI=true without it fails; elsewhere those tests are skipped with the reason.
redis:
	@if command -v redis-server >/dev/null 2>&1; then \
		exit 0; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server; \
	elif [ "$$CI" = "true" ]; then \
		echo "error: redis-server is missing (CI=true needs it): apt-get install redis-server as root" >&2; \
		exit 1; \
	else \
		echo "note: redis-server is missing and this is not root with apt-get: the multi-process tests will be SKIPPED." >&2; \
	fi

# The serving tests (tests/test_serving.py) start Debian's nginx on loopback with deploy/nginx.conf in front of gunicorn.
# Root with apt-get installs it (a service the package started is stopped); CI=true without it fails; elsewhere those tests skip.
nginx:
	@if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then \
		exit 0; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx && \
		{ nginx -s quit 2>/dev/null || true; }; \
	elif [ "$$CI" = "true" ]; then \
		echo "error: nginx is missing (CI=true needs it): apt-get install nginx as root" >&2; \
		exit 1; \
	else \
		echo "note: nginx is missing and this is not root with apt-get: the nginx serving tests will be SKIPPED." >&2; \
	fi

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

test: $(VENV)/.installed $(VENV312)/.installed browser redis nginx
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(PY) -m acn.integrations.package_dify
	$(PY) -m pytest
	$(MAKE) test-engine

schemas: $(VENV)/.runtime
	$(PY) -m acn.app.generate

# The Dify and Coze packages are a project of their own beside the product (integrations/, its own pyproject.toml):
# their declarations are generated by `make schemas`; this builds the two Dify plugin packages into dist/ (`make test`
# builds them too, and its tests load and run them in Dify's SDK and workflow engine).
plugins: $(VENV)/.runtime
	$(PY) -m acn.integrations.package_dify

clean:
	rm -rf $(VENV) $(VENV312) $(VENV_ENGINE) .pytest_cache
