# Two commands, each installing only what it needs:
#   make demo: Python 3.11+ and Node.js (for Azurite), nothing else; no root, no browser. Installs
#              the app, the local host and the `orders` CLI into .venv, and Azurite (npm ci).
#   make test: all that, then the test tooling (requirements-dev.txt, checkov, the ARM models,
#              Chromium for the console's browser tests), then lint and the whole test suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# What the demo needs (requirements-local.txt and the package with its `cli` extra).
LOCAL_STAMP := $(VENV)/.installed-local
# All the test tooling beside it.
STAMP := $(VENV)/.installed
# checkov pins an old pycep-parser, so it lives in a virtual environment of its own.
CHECKOV_VENV := .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed

.PHONY: test test-newest lint unit dev install clean demo bench price soak

ORDERS ?= 100
PORT ?= 7071

# What a clean machine may lack, said in one line before anything is installed.
NEED_PYTHON = @$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	echo "error: Python 3.11 or later is needed ($(PYTHON) is not): make demo PYTHON=python3.12"; \
	exit 1; }
NEED_NPM = @command -v npm >/dev/null || { \
	echo "error: Node.js (npm) is needed for Azurite, the storage emulator: https://nodejs.org"; \
	exit 1; }

# Every environment is made and filled by uv, pinned, fetched once into .uv: it installs the
# same files pip would, from the same lock, several times faster (docs/local-development.md,
# measured). The Flex remote build installs that lock with pip.
UV_VERSION := 0.13.9
UV := .uv/bin/uv
# The interpreter itself, not a name uv would look up (or download one for). .venv is seeded
# with pip, for tools that expect one there (the VS Code task installs with it).
INTERPRETER = "$$($(PYTHON) -c 'import sys; print(sys.executable)')"
UV_INSTALL = $(UV) pip install --quiet --python
$(UV):
	$(NEED_PYTHON)
	$(PYTHON) -m pip install --quiet --disable-pip-version-check --target .uv uv==$(UV_VERSION)

# What ships is installed first from requirements.txt, the lock of requirements.in: every
# package pinned and checked against its hashes (--require-hashes), as the Flex remote build
# installs it; the rest then finds it installed.
LOCKED_INSTALL = --require-hashes \
	-r requirements.txt
# The lock into the environment of interpreter $(1): from uv's cache alone when it holds every
# pinned file (no network: uv asks the index again for each package's page once its cached copy
# is ten minutes old, seen to take 12 s here), else from the index. The hashes are checked
# either way.
LOCKED = $(UV_INSTALL) $(1) --offline $(LOCKED_INSTALL) 2>/dev/null || \
	$(UV_INSTALL) $(1) $(LOCKED_INSTALL)
$(LOCAL_STAMP): requirements.in requirements.txt requirements-local.txt pyproject.toml | $(UV)
	$(NEED_PYTHON)
	[ -x $(PY) ] || $(UV) venv --quiet --seed --python $(INTERPRETER) $(VENV)
	$(call LOCKED,$(PY))
	$(UV_INSTALL) $(PY) -r requirements-local.txt -e ".[cli]"
	touch $(LOCAL_STAMP)

$(STAMP): $(LOCAL_STAMP) requirements-dev.txt
	$(UV_INSTALL) $(PY) -r requirements-dev.txt
	touch $(STAMP)

$(CHECKOV_STAMP): requirements-checkov.txt | $(UV)
	$(UV) venv --quiet --python $(INTERPRETER) $(CHECKOV_VENV)
	$(UV_INSTALL) $(CHECKOV_VENV)/bin/python -r requirements-checkov.txt
	touch $(CHECKOV_STAMP)

# Azurite and the AsyncAPI schemas, installed by npm ci once per lock into this user's cache (a
# directory per package.json, package-lock.json and Node.js version, filled whole, then put in
# place by one rename) and linked as node_modules: a second clone finds them at once, as uv's
# cache serves the Python side (docs/local-development.md). An entry found incomplete (an npm
# ci run through the link empties it) is installed again and replaced. NODE_CACHE= installs
# into node_modules instead.
NODE_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/order-pipeline/node
NODE_KEY = $(PYTHON) -c 'import hashlib, sys; h = hashlib.sha256(sys.argv[1].encode()); \
	[h.update(open(f, "rb").read()) for f in ("package.json", "package-lock.json")]; \
	print(h.hexdigest()[:16])' "$$(node --version)"
NODE_WHOLE = [ -f "$$dir/node_modules/.whole" ] && [ -x "$$dir/node_modules/.bin/azurite" ] \
	&& [ -f "$$dir/node_modules/@asyncapi/specs/package.json" ]
# The new entry in place of an incomplete one; beside another install that got there first, the
# first one stays (the two are the same).
NODE_PLACE = $(PYTHON) -c 'import os, sys; new, dir = sys.argv[1:]; \
	os.path.lexists(dir) and os.rename(dir, f"{dir}.old.{os.getpid()}"); \
	os.rename(new, dir)' "$$new" "$$dir" 2>/dev/null || true
node_modules/.package-lock.json: package.json package-lock.json
	$(NEED_NPM)
	@set -e; rm -rf node_modules; \
	if [ -z "$(NODE_CACHE)" ]; then npm ci --no-audit --no-fund; exit 0; fi; \
	key=$$($(NODE_KEY)); dir="$(NODE_CACHE)/$$key"; \
	if ! { $(NODE_WHOLE); }; then \
	  mkdir -p "$(NODE_CACHE)"; new=$$(mktemp -d "$(NODE_CACHE)/.new.XXXXXX"); \
	  trap 'rm -rf "$$new"' EXIT; trap 'exit 130' INT TERM; \
	  cp package.json package-lock.json "$$new"; \
	  (cd "$$new" && npm ci --no-audit --no-fund); touch "$$new/node_modules/.whole"; \
	  $(NODE_PLACE); rm -rf "$$dir".old.*; \
	fi; \
	ln -s "$$dir/node_modules" node_modules; touch node_modules/.package-lock.json

# Each ARM model package on its own (two releases of one package are needed): see the file.
# Inside .venv: tools that walk the project (azure-functions-doctor) skip it there.
ARMSCHEMAS := $(VENV)/armschemas
ARMSCHEMAS_STAMP := $(ARMSCHEMAS)/.installed
$(ARMSCHEMAS_STAMP): requirements-armschemas.txt $(STAMP)
	rm -rf $(ARMSCHEMAS)
	grep -v '^#' requirements-armschemas.txt | grep . | while read -r req; do \
		$(UV_INSTALL) $(PY) --no-deps \
			--target "$(ARMSCHEMAS)/$$(echo $$req | tr '=' '-' | tr -s '-')" "$$req" || exit 1; \
	done
	touch $(ARMSCHEMAS_STAMP)

# The console's browser tests drive Debian's Chromium (Playwright's own browser download is not
# used: it needs a host this machine may not reach).
CHROMIUM ?= $(or $(CHROMIUM_PATH),/usr/bin/chromium)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
$(CHROMIUM):
	@command -v apt-get >/dev/null || { echo "install Chromium and set CHROMIUM_PATH"; exit 1; }
	$(SUDO) apt-get update -qq
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null

install: $(STAMP) $(CHECKOV_STAMP) $(ARMSCHEMAS_STAMP) node_modules/.package-lock.json $(CHROMIUM)

# The development packages alone (what lint, the tests and `python -m shared.contracts` use),
# into the demo's .venv: no browser, no Checkov, nothing run.
dev: $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# The unit and model tests again on the newest Python the app supports (the Bicep's default),
# beside azure-functions-runtime, the worker's engine from 3.13 on
# (tests/unit/test_python313_runtime.py). PYTHON_NEWEST= (empty) skips it, saying so.
PYTHON_NEWEST ?= $(shell (python3.13 -c '' 2>/dev/null && echo python3.13) || \
	ls -d "$$(pyenv root 2>/dev/null)"/versions/3.13*/bin/python3.13 2>/dev/null | tail -1)
VENV_NEWEST := .venv-py313
NEWEST_STAMP := $(VENV_NEWEST)/.installed
$(NEWEST_STAMP): requirements.in requirements.txt requirements-local.txt \
		requirements-dev.txt pyproject.toml | $(UV)
	$(UV) venv --quiet --python $(PYTHON_NEWEST) $(VENV_NEWEST)
	$(call LOCKED,$(VENV_NEWEST)/bin/python)
	$(UV_INSTALL) $(VENV_NEWEST)/bin/python -r requirements-dev.txt -e ".[cli]"
	touch $(NEWEST_STAMP)

test-newest: $(if $(PYTHON_NEWEST),$(NEWEST_STAMP))
	$(if $(PYTHON_NEWEST),$(VENV_NEWEST)/bin/python -m pytest tests/unit tests/model -q \
		-p no:cacheprovider,@echo "PYTHON_NEWEST is empty: the tests on the newest Python were skipped")

# The suite on both cores (pytest-xdist): each worker starts its own Azurite, and every test
# has its own tables, queues and ports (docs/testing.md).
test: install lint test-newest
	$(PY) -m pytest -n 2

# The whole pipeline on this machine with faults: Azurite, the function app, live progress.
# SERVE=1 keeps the app and its operator console up after the run, until Ctrl-C, and prints the
# commands that point the `orders` CLI at it. Installs only what that needs (see the top).
# (pip and npm run at once: on a clean clone about 7 s sooner than one after the other.)
demo:
	$(NEED_PYTHON)
	$(NEED_NPM)
	@$(MAKE) --no-print-directory -j2 $(LOCAL_STAMP) node_modules/.package-lock.json
	$(PY) -m localrun demo --orders $(ORDERS) --port $(PORT) $(if $(SERVE),--serve)

# Transactions per order, throughput, latency, Supervisor cost, recovery: bench-report/.
# (Its CPU meter and charts come with the test tooling; no browser, checkov or ARM models.)
bench: $(STAMP) node_modules/.package-lock.json
	$(PY) -m localrun bench --out bench-report

# The last bench report priced again, running nothing (prices change, the counts do not): at the
# prices the bench ships with, or at yours with PRICES=my-prices.json (a copy of
# docs/prices.template.json filled in).
price: $(STAMP)
	$(PY) -m localrun bench --out bench-report --price-only $(if $(PRICES),--prices $(PRICES))

# The loop to run after each change: the unit and model tests on fakes, on both cores, with a
# quarter of the property tests' search (docs/testing.md); `make test` searches in full.
unit: $(STAMP)
	HYPOTHESIS_PROFILE=quick $(PY) -m pytest tests/unit tests/model -q -n 2 -p no:cacheprovider

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) $(VENV_NEWEST) .uv node_modules .pytest_cache .ruff_cache

# The long runs, on demand: 20,000 model-based sequences and 1000 orders end to end with kills.
soak: install
	HYPOTHESIS_PROFILE=soak $(PY) -m pytest tests/model -p no:cacheprovider --timeout=0
	E2E_ORDERS=1000 $(PY) -m pytest tests/e2e/test_pipeline.py -p no:cacheprovider --timeout=0

# A service paused for 5 minutes under load, on demand (tests/bench/test_pause_run.py runs a
# short one): no order fails, is undone or has a failure counted because of it; all finish
# after the resume (docs/operating.md, Pausing a service or a workflow).
.PHONY: pause-run
pause-run: $(STAMP) node_modules/.package-lock.json
	$(PY) -m localrun.bench.pausing --pause 300 --rate 2

# A backlog through a service limited to 4 calls at once and 20 a second, against the same
# unlimited (tests/bench/test_limit_run.py runs a short one): what the service saw, and what
# the limit cost in storage transactions per call (docs/operating.md, Limits per service).
.PHONY: limit-run
limit-run: $(STAMP) node_modules/.package-lock.json
	$(PY) -m localrun.bench.limiting --orders 200 --at-once 4 --per-second 20

# 10,000 failed orders re-driven against their failed step's service limited to 20 calls a
# second (tests/bench/test_redrive_run.py runs a short one): what the service saw, whether any
# order was resubmitted or shipped twice, and the progress an operator saw (docs/operating.md,
# Re-driving failed orders).
.PHONY: redrive-run
redrive-run: $(STAMP) node_modules/.package-lock.json
	$(PY) -m localrun.bench.redriving --orders 10000 --per-second 20

# A rolling deployment rehearsed, on demand (not in make test; tests/e2e/test_rolling.py runs a
# small one): the previous release (PREVIOUS, a commit of this clone's history, in a temporary
# git worktree) and this checkout side by side under load on one Azurite, the two hosts rolled
# over one by one; every order settled, nothing lost or done twice (localrun/rolling/).
PREVIOUS ?= 21d9dac
ROLLING_ORDERS ?= 300
.PHONY: rolling
rolling: $(STAMP) node_modules/.package-lock.json
	$(PY) -m localrun.rolling --previous $(PREVIOUS) --orders $(ROLLING_ORDERS)
