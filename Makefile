# Two commands do all set-up on a fresh machine:
#   make run   -- create the virtualenv, install, run the worker in the foreground
#   make test  -- create the virtualenv, install, run the whole test suite
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
STAMP := $(VENV)/.installed
# The pinned Claude Code CLI for the end-to-end tests (its native binary is an
# optional dependency from the npm registry; no other download).
E2E_STAMP := e2e/node_modules/.installed
# Debian's Chromium and ChromeDriver for the web pages' browser tests (tests/test_web_browser.py):
# installed with apt-get when missing (CI runs as root); the stamp is made again whenever one is gone.
# Should the install fail, make goes on and those tests fail saying what is missing.
BROWSER := /usr/bin/chromium /usr/bin/chromedriver
BROWSER_STAMP := build/.browser-installed

SOURCES := actors compress embed hooks index mcpserver replay search server sessionmem storage testing web

.PHONY: run test lint clean bytecode FORCE

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "sessionmem needs Python 3.11, found " + sys.version' 
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e '.[test,bench]'
	@touch $(STAMP)

$(E2E_STAMP): e2e/package.json e2e/package-lock.json
	cd e2e && npm ci --no-audit --no-fund --loglevel=error
	@touch $(E2E_STAMP)

$(BROWSER_STAMP): $(if $(filter-out $(wildcard $(BROWSER)),$(BROWSER)),FORCE)
	@if [ -n "$(filter-out $(wildcard $(BROWSER)),$(BROWSER))" ]; then \
		echo "installing Debian's chromium and chromium-driver for the browser tests"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) \
			|| echo "WARNING: could not install chromium and chromium-driver: the browser tests will fail"; \
	fi
	@mkdir -p build && if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then touch $@; fi

FORCE:

# Hook processes start ~10 ms faster from compiled bytecode; compile it explicitly
# because environments may set PYTHONDONTWRITEBYTECODE (only changed files are redone).
bytecode: $(STAMP)
	@$(VENV)/bin/python -m compileall -q -j 0 $(SOURCES)

run: $(STAMP) bytecode
	$(VENV)/bin/sessionmem serve $(ARGS)

# Style, layers and types: ruff, the import-linter contracts of pyproject.toml (which
# tests/test_layers.py also checks, with a forbidden import shown failing), and mypy
# ([tool.mypy], run on the tree laid out as installed by tools/typecheck.py).
lint: $(STAMP)
	$(VENV)/bin/ruff check --quiet .
	$(VENV)/bin/lint-imports --no-logo --no-cache
	$(VENV)/bin/python -m tools.typecheck

# The suite runs in PYTEST_WORKERS processes (pytest-xdist): most tests wait for worker processes,
# hooks and timers rather than compute, so even two cores finish it in about half the time. Tests
# that must not overlap, or share an expensive module fixture, carry one `xdist_group` mark and run
# in order on one process (`--dist loadgroup`): the Claude Code CLI tests, the browser tests.
# `make test PYTEST_ARGS="-n 0"` runs it in this one process; later options win.
PYTEST_WORKERS ?= 4

test: $(STAMP) $(E2E_STAMP) $(BROWSER_STAMP) bytecode lint
	$(VENV)/bin/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info e2e/node_modules
