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
# The pinned agent CLIs for the end-to-end tests (their native binaries are optional dependencies
# from the npm registry; no other download), and what OpenCode installs into its config folder on a
# first start (e2e/opencode-config), placed in each test HOME.
E2E_STAMP := e2e/node_modules/.installed

.PHONY: run test lint clean bytecode browser fat-tools

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

$(E2E_STAMP): e2e/package.json e2e/package-lock.json e2e/opencode-config/package.json e2e/opencode-config/package-lock.json
	cd e2e && npm ci --no-audit --no-fund --loglevel=error
	cd e2e/opencode-config && npm ci --no-audit --no-fund --loglevel=error
	@touch $(E2E_STAMP)

# The web pages' browser tests (tests/test_web_browser.py) drive Chromium or Google Chrome and ChromeDriver,
# found on PATH or named by SESSIONMEM_CHROMIUM and SESSIONMEM_CHROMEDRIVER (tests/browser.py; `python -m
# tests.browser` says what it finds). When one is missing:
# where apt-get exists (Debian; CI runs as root), Debian's chromium and chromium-driver are installed;
# elsewhere make says what to install. Either way make goes on, and those tests fail saying what is missing.
browser: $(STAMP)
	@$(VENV)/bin/python -m tests.browser >/dev/null 2>&1 || { \
		if command -v apt-get >/dev/null 2>&1; then \
			echo "installing Debian's chromium and chromium-driver for the browser tests"; \
			(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) \
				|| echo "WARNING: could not install chromium and chromium-driver: the browser tests will fail"; \
		else \
			echo "WARNING: $$($(VENV)/bin/python -m tests.browser)"; \
		fi; \
	}

# The case-insensitive disk of tests/test_path_case.py on Linux: a FAT image (mkfs.vfat, from dosfstools)
# mounted through FUSE (fusefat). Installed with apt-get where it exists; elsewhere those tests say what is missing.
fat-tools:
	@command -v fusefat >/dev/null 2>&1 && { command -v mkfs.vfat || test -x /usr/sbin/mkfs.vfat || test -x /sbin/mkfs.vfat; } >/dev/null 2>&1 || { \
		if command -v apt-get >/dev/null 2>&1 && [ "$$(uname -s)" = Linux ]; then \
			echo "installing Debian's dosfstools and fusefat for the case-insensitive disk tests"; \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dosfstools fusefat >/dev/null 2>&1 \
				|| (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dosfstools fusefat) \
				|| echo "WARNING: could not install dosfstools and fusefat: the case-insensitive disk tests will fail"; \
		fi; \
	}

# Hook processes start ~10 ms faster from compiled bytecode; compile it explicitly
# because environments may set PYTHONDONTWRITEBYTECODE (only changed files are redone). The folders are
# pyproject.toml's package-dir (tools/layout.py), read when the recipe runs, once the virtualenv exists.
bytecode: $(STAMP)
	@$(VENV)/bin/python -m compileall -q -j 0 \
		$(or $(shell $(VENV)/bin/python -m tools.layout --folders),$(error python -m tools.layout --folders named no folders))

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
# in order on one process (`--dist loadgroup`): the Claude Code CLI tests, the Codex CLI tests, the browser tests.
# `make test PYTEST_ARGS="-n 0"` runs it in this one process; later options win.
PYTEST_WORKERS ?= 4

test: $(STAMP) $(E2E_STAMP) browser fat-tools bytecode lint
	$(VENV)/bin/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info e2e/node_modules e2e/opencode-config/node_modules
