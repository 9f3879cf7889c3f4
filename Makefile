# The README's commands: `make demo` and `make test`. Each sets up what it needs first.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
PY := $(BIN)/python
export PATH := $(BIN):$(PATH)
# pip's own chatter about unused local indexes is noise here, not a warning for us.
QUIET_PIP := sed '/is ignored: it is neither a file nor a directory/d'

HOST ?= 127.0.0.1
PORT ?= 8888
ifndef TOKEN
TOKEN := $(shell python3 -c 'import secrets; print(secrets.token_hex(16))')
endif
LAB_URL := http://$(HOST):$(PORT)/lab?token=$(TOKEN)
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

.PHONY: help setup system bytecode demo lab test check static lint typecheck jstest pytest pytest-fast hub-day bench clean

help:
	@echo "make demo   set everything up and start JupyterLab with jupyter_air"
	@echo "make test   set everything up and run lint, type checks and every test"
	@echo "make check  the fast loop: lint, types, jest, and pytest without browser, Ray, Slurm, slow and heavy tests"
	@echo "make bench  run the benchmarks (results: docs/benchmarks.md)"
	@echo "make hub-day  five users on one JupyterHub for 10 minutes (a test)"

## --- setup ------------------------------------------------------------------------

system:
	@bash scripts/install-system-deps.sh

$(VENV)/bin/python:
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip 2>&1 | $(QUIET_PIP)

$(VENV)/.build-tools: $(VENV)/bin/python
	$(PY) -m pip install -q "hatchling>=1.27" "hatch-jupyter-builder>=0.9" "hatch-nodejs-version>=0.3.2" editables "jupyterlab>=4.6,<5" 2>&1 | $(QUIET_PIP)
	touch $@

# --loglevel=error: npm's warnings here are not the user's to act on (errors still show):
# EBADENGINE for commander@15, configurable-http-proxy's (a test tool), which asks for
# Node >= 22.12 and works on Node 20 (the Hub tests run it here). The two install scripts
# npm skips are recorded as denied in package.json's allowScripts (not needed: npm
# skips them by default; jest's @parcel/watcher uses its prebuilt binary).
node_modules/.package-lock.json: package-lock.json | system
	npm ci --no-audit --no-fund --loglevel=error

# The prebuilt labextension, rebuilt when a front-end source changes.
jupyter_air/labextension/package.json: $(VENV)/.build-tools node_modules/.package-lock.json package.json tsconfig.json $(shell find labextension -type f)
	npm run build:prod

# What the package, its test and its dev extras require, without the package: pip's
# longest step (torch, Ray, MLflow) then runs beside the system packages, npm's install
# and the front-end build, which the package's own install waits for. Their bytecode is
# compiled next, on every core (pip compiles one file at a time: 77 s for the install
# where this takes 35 s and 31 s), beside ruff and mypy, which need none.
$(VENV)/.deps: $(VENV)/.build-tools pyproject.toml
	$(PY) -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
		print(*p["dependencies"], *p["optional-dependencies"]["test"], *p["optional-dependencies"]["dev"], sep="\n")' \
		> $(VENV)/requirements.txt
	$(PY) -m pip install -q --no-compile -r $(VENV)/requirements.txt 2>&1 | $(QUIET_PIP)
	touch $@

# As pip does, files that no Python 3.11 compiles (torch ships one for 3.12) are skipped.
$(VENV)/.deps-bytecode: $(VENV)/.deps
	$(PY) -c 'import compileall, sysconfig; compileall.compile_dir(sysconfig.get_path("purelib"), quiet=2, workers=0)'
	touch $@

# The package in editable mode with its test and dev extras. The install copies the
# prebuilt labextension and the server-extension switch into the venv, so it is
# redone when either changes.
$(VENV)/.installed: $(VENV)/.deps pyproject.toml jupyter_air/labextension/package.json jupyter-config/jupyter_server_config.d/jupyter_air.json
	$(PY) -m pip install -q --no-build-isolation -e ".[test,dev]" 2>&1 | $(QUIET_PIP)
	touch $@

# The package's bytecode, as a user's install has it: this machine's environment may say
# PYTHONDONTWRITEBYTECODE, and then every process of ours (the kernel's %load_ext, each
# supervisor, rank, tail process and `air` command) compiled the editable package's
# sources anew, 0.1-0.2 CPU s each (tests: their helpers). compileall redoes only what changed.
bytecode: $(VENV)/.installed $(VENV)/.deps-bytecode
	$(PY) -m compileall -q jupyter_air tests

# The steps above as one parallel make, each step's output printed whole once it is done.
PARALLEL := $(MAKE) --no-print-directory -j3 --output-sync=target

setup:
	$(PARALLEL) system bytecode

## --- the README's commands ----------------------------------------------------------

# The demo works on copies of notebooks/ in $(DEMO_DIR) (ignored by git): saved outputs,
# checkpoints stay there (runs go to the one MLflow store in AIR_HOME), and `git status`
# stays clean.
DEMO_DIR ?= .demo
# The demo lab's settings, on top of the user's own: its terminals have `air` on PATH
# (a terminal is a login shell, whose /etc/profile resets the PATH exported here; see
# the folder's jupyter_server_config.py). tests/ui/test_demo_terminal.py uses the same.
# The lab runs in $(DEMO_DIR), so that a terminal opens in the folder the lab shows.
DEMO_LAB_CONFIG := $(CURDIR)/scripts/demo_lab

# scripts/demo.py checks the quickstart headless, then prints the URL that opens it.
demo: setup
	$(PY) scripts/demo.py --url "$(LAB_URL)" --workdir "$(DEMO_DIR)"
	cd "$(DEMO_DIR)" && \
	JUPYTER_CONFIG_PATH="$(DEMO_LAB_CONFIG)$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
		jupyter lab --no-browser $(ROOT_FLAG) --ServerApp.ip=$(HOST) --ServerApp.port=$(PORT) \
		--ServerApp.port_retries=0 --IdentityProvider.token=$(TOKEN) --ServerApp.root_dir=.

lab: demo

# Setup and the static checks in one parallel make, then the tests: jest and the JS lint
# run once npm has installed, ruff and mypy once pip has, beside the rest of the setup
# (mypy alone keeps one core busy for about 40 s on a fresh clone, with no cache).
test:
	$(PARALLEL) system bytecode lint typecheck jstest
	$(MAKE) --no-print-directory pytest

# The fast loop while developing: what `make test` runs, less the browser, Ray, Slurm,
# slow and heavy tests (those that start kernels, servers or jobs).
check:
	$(PARALLEL) system bytecode lint typecheck jstest
	$(MAKE) --no-print-directory pytest-fast

# Lint, types and jest side by side, each one's output in one piece.
static:
	$(PARALLEL) lint typecheck jstest

lint: $(VENV)/.deps node_modules/.package-lock.json
	$(BIN)/ruff check jupyter_air tests bench scripts
	$(BIN)/ruff format --check jupyter_air tests bench scripts
	npm run lint:check

typecheck: $(VENV)/.deps
	$(BIN)/mypy

# Unit tests of the labextension's models, formatting and buffers (jest, labextension/test).
jstest: node_modules/.package-lock.json
	npm test -- --ci

# Test files run PYTEST_WORKERS at a time, each file whole on one worker (its module
# fixtures, a lab or a Ray cluster, stay together): most tests wait on processes they
# started, so with two workers on two cores 16-18 % of the CPU stayed idle; three use
# it (6-7 % idle) and took 1,356 s against 1,516 s (docs/benchmarks.md). The suite is
# written to pass on a loaded machine. PYTEST_WORKERS=0: one by one. The files go out
# costliest first (tests/ordering.py), not in xdist's order (most tests first).
PYTEST_WORKERS ?= 3
PYTEST := $(PY) -m pytest -ra -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder

pytest:
	mkdir -p test-artifacts
	$(PYTEST)

pytest-fast:
	$(PYTEST) -m "not browser and not ray and not slurm and not slow and not heavy"

# Five users on one JupyterHub for 10 minutes (make test runs the same for 1 minute).
hub-day: setup
	AIR_HUB_TEAM_MINUTES=10 $(PY) -m pytest -ra tests/test_hub_team.py

bench: setup
	$(PY) bench/bench_gpu.py
	$(PY) bench/bench_magic.py
	$(PY) bench/bench_logs.py
	$(PY) bench/bench_ray.py
	$(PY) bench/bench_permissions.py
	$(PY) bench/bench_live_view.py
	$(PY) bench/bench_runs.py
	$(PY) bench/bench_panel_update.py
	$(PY) bench/bench_cli.py
	$(PY) bench/bench_back_to_back.py
	$(PY) bench/bench_soak.py
	$(PY) bench/bench_schedules.py
	$(PY) bench/bench_session.py
	$(PY) bench/bench_tracking.py
	$(PY) bench/bench_tracking_outage.py
	$(PY) bench/bench_notify.py
	$(PY) bench/bench_long_runs.py
	$(PY) bench/bench_slurm.py
	$(PY) bench/bench_hub_team.py
	$(PY) bench/bench_overhead.py

clean:
	rm -rf lib jupyter_air/labextension tsconfig.tsbuildinfo tests/fake_nvml/.build test-artifacts
