# splitlab: make demo | demo-jgroups | up | down | test | images | doctor | bench | clean
# `make test` and `make demo` work on a fresh machine: host packages, a virtual environment, images, then run.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.splitlab-installed
N ?= 3
PYTEST_ARGS ?=

.PHONY: demo demo-jgroups test unit images images-all up down doctor bench clean host-deps venv setup

host-deps:
	@bash images/host-deps.sh

## splitlab and its dependencies installed by uv, which fetches and unpacks them in parallel (37 s -> 19 s with
## pip's and uv's caches empty, 2026-11-30), their bytecode compiled there: uv writes none by default, and a
## Python that runs with PYTHONDONTWRITEBYTECODE (as this machine's sessions do) then compiles every module it
## imports in every process (`import matplotlib.figure` 2.56 -> 0.83 s, `import pytest` 0.94 -> 0.15 s)
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet uv
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -e '.[dev]'
	@touch $@

## splitlab's own modules compiled too (an editable install's sources are the checkout's); an edited module's
## bytecode is stale by its timestamp and compiled again when imported
venv: $(STAMP)
	@$(BIN)/python -m compileall -q -j 0 chaos pipeline node jgnode bench

## the host packages and the virtual environment at once (both mostly downloads); a host without Python's venv
## module gets the host packages first
setup:
	@$(PYTHON) -c 'import venv, ensurepip' 2>/dev/null || bash images/host-deps.sh
	@bash images/host-deps.sh & deps=$$!; $(MAKE) --no-print-directory venv; made=$$?; wait $$deps && exit $$made

images: setup
	$(BIN)/splitlab images

## every node kind's image: splitlab's node and the real JGroups' (the tests run both)
images-all: setup
	$(BIN)/splitlab images --kind all

## the tests: every node kind's image and the multi-host test bed's (built beside them, not in the first multi-host
## test); unit tests beside the real-container cluster and scenario tests (needs root and Docker), in three
## pytest-xdist workers; the timing-sensitive container tests run in one of them, one after the other, the
## multi-host tests and the container tests no timing decides in the others (tests/conftest.py)
## (tests marked `long` run in `make bench` instead); the doctor first: an engine that cannot create a network fails
## here in seconds, not in every container test after 60 s; the JVM's class archive is recorded beside the images
## (pipeline.jvm_archive), so that every test's JVM maps it (the workers' sessions start before any analysis ends)
test: setup
	@$(BIN)/splitlab spark archive & archive=$$!; $(BIN)/splitlab images --kind all --bed; built=$$?; \
		wait $$archive && exit $$built
	$(BIN)/splitlab doctor
	@mkdir -p runs
	$(BIN)/pytest tests -ra -n 3 -m "not long" --junitxml=runs/junit.xml $(PYTEST_ARGS)

## unit tests only (no root, no Docker)
unit: venv
	$(BIN)/pytest tests/unit -ra $(PYTEST_ARGS)

demo: images
	$(BIN)/splitlab demo

## the demo, and the same bug in the real JGroups 2.12.2 (its image too)
demo-jgroups: images-all
	$(BIN)/splitlab demo --jgroups

up: images
	$(BIN)/splitlab up -n $(N)

down: venv
	$(BIN)/splitlab down $(if $(RUN),--run-id $(RUN),)

doctor: venv
	$(BIN)/splitlab doctor

bench: images-all
	$(BIN)/python -m bench
	$(BIN)/pytest tests -ra -m long

clean:
	-[ -x $(BIN)/splitlab ] && $(BIN)/splitlab down --all
	rm -rf $(VENV) .build runs
