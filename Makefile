# Two commands do all set-up on a fresh machine:
#   make run   -- create the virtualenv, install, run the worker in the foreground
#   make test  -- create the virtualenv, install, run the whole test suite
# The virtualenv's interpreter: PYTHON if given (`make PYTHON=python3.13`), else the newest supported
# CPython that runs here, python3.14 down to python3.11, then python3, by its real path (a pyenv shim
# for a version that is not selected fails to run, and is passed over).
SUPPORTED_PYTHONS := python3.14 python3.13 python3.12 python3.11 python3
ifndef PYTHON
PYTHON := $(shell for p in $(SUPPORTED_PYTHONS); do "$$p" -c 'import sys; assert sys.implementation.name == "cpython" and sys.version_info >= (3, 11); print(sys.executable)' 2>/dev/null && break; done)
endif
VENV := .venv
# The interpreter an existing virtualenv was made with: it keeps it (the venv is never mixed with
# another Python); `make clean` and `make` make it again with PYTHON.
VENV_PYTHON := $(shell sed -n 's/^executable *= *//p' $(VENV)/pyvenv.cfg 2>/dev/null)
ifneq ($(VENV_PYTHON),)
ifneq ($(PYTHON),)
ifneq ($(realpath $(VENV_PYTHON)),$(realpath $(shell $(PYTHON) -c 'import sys; print(sys.executable)' 2>/dev/null)))
$(warning $(VENV) was made with $(VENV_PYTHON), not $(PYTHON): it keeps its interpreter; `make clean`, then `make`, to make it again with $(PYTHON))
endif
endif
endif
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
	@if [ ! -x $(VENV)/bin/python ]; then \
		if [ -z "$(PYTHON)" ]; then \
			echo "sessionmem needs CPython 3.11 or newer, and none of $(SUPPORTED_PYTHONS) is one" \
				"(python3: $$(python3 --version 2>&1 || echo none)): install Python 3.11+, or make PYTHON=/path/to/python3.x"; \
			exit 1; \
		fi; \
		$(PYTHON) -c 'import sys; sys.exit(None if sys.version_info >= (3, 11) else "sessionmem needs Python 3.11 or newer; PYTHON=$(PYTHON) is " + sys.version.split()[0])' \
			&& $(PYTHON) -m venv $(VENV); \
	fi
	@echo "$(VENV): $$($(VENV)/bin/python -c 'import platform, sys; print(platform.python_implementation(), platform.python_version(), "from", sys.base_prefix)')"
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

# The pins resolve, as wheels, on every platform and Python claimed (tools/resolve_platforms.py: pip's
# --dry-run against the package index, which it needs; ~56 s of CPU, 20 resolutions in 4 pip processes): checked
# again whenever pyproject.toml or the check changes.
PLATFORMS_STAMP := build/.platforms-resolved

$(PLATFORMS_STAMP): $(STAMP) tools/resolve_platforms.py tools/pip_on_target.py
	$(VENV)/bin/python -m tools.resolve_platforms
	@mkdir -p build && touch $@

# Style, layers, types and wheels: ruff, the import-linter contracts of pyproject.toml (which
# tests/test_layers.py also checks, with a forbidden import shown failing), and mypy
# ([tool.mypy], run on the tree laid out as installed by tools/typecheck.py).
lint: $(STAMP) $(PLATFORMS_STAMP)
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
