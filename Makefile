# The README's commands: `make demo` and `make test`. Each sets up what it needs first.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
PY := $(BIN)/python
export PATH := $(BIN):$(PATH)
# pip's own chatter about unused local indexes is noise here, not a warning for us.
QUIET_PIP := grep -v 'is ignored: it is neither a file nor a directory' || true

HOST ?= 127.0.0.1
PORT ?= 8888
TOKEN ?= $(shell python3 -c 'import secrets; print(secrets.token_hex(16))')
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

.PHONY: help setup system demo lab test lint typecheck pytest bench clean

help:
	@echo "make demo   set everything up and start JupyterLab with jupyter_air"
	@echo "make test   set everything up and run lint, type checks and every test"
	@echo "make bench  run the benchmarks (results: docs/benchmarks.md)"

## --- setup ------------------------------------------------------------------------

system:
	@bash scripts/install-system-deps.sh

$(VENV)/bin/python:
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip 2>&1 | $(QUIET_PIP)

# Build tools first (the editable install runs without build isolation), then the
# package with its test and dev extras. Re-runs when the project's metadata changes.
$(VENV)/.installed: $(VENV)/bin/python pyproject.toml package.json package-lock.json
	$(PY) -m pip install -q "hatchling>=1.27" "hatch-jupyter-builder>=0.9" "hatch-nodejs-version>=0.3.2" editables "jupyterlab>=4.6,<5" 2>&1 | $(QUIET_PIP)
	npm ci --no-audit --no-fund
	$(PY) -m pip install -q --no-build-isolation -e ".[test,dev]" 2>&1 | $(QUIET_PIP)
	touch $@

# The prebuilt labextension, rebuilt when a front-end source changes.
jupyter_air/labextension/package.json: $(VENV)/.installed $(shell find labextension -type f) tsconfig.json
	npm run build:prod

setup: system $(VENV)/.installed jupyter_air/labextension/package.json

## --- the README's commands ----------------------------------------------------------

demo: setup
	@echo "Starting JupyterLab with jupyter_air. Open:"
	@echo "    http://$(HOST):$(PORT)/lab?token=$(TOKEN)"
	@echo "(the chip icon in the right sidebar opens GPU resources; Ctrl-C stops)"
	jupyter lab --no-browser $(ROOT_FLAG) --ServerApp.ip=$(HOST) --ServerApp.port=$(PORT) \
		--ServerApp.port_retries=0 --IdentityProvider.token=$(TOKEN)

lab: demo

test: setup lint typecheck pytest

lint:
	$(BIN)/ruff check jupyter_air tests bench
	$(BIN)/ruff format --check jupyter_air tests bench
	npm run lint:check

typecheck:
	$(BIN)/mypy

pytest:
	mkdir -p test-artifacts
	$(PY) -m pytest -ra

bench: setup
	$(PY) bench/bench_gpu.py

clean:
	rm -rf lib jupyter_air/labextension tsconfig.tsbuildinfo tests/fake_nvml/.build test-artifacts
