# One-command setup and runs. Every target does its own idempotent setup first.
#   make train   - set up, then train the default experiment (~3 min on 2 CPU cores, plus the first install)
#   make test    - set up, then run the whole test suite (what CI runs)
#   make bench   - set up, then run the throughput benchmark
#   make docs    - set up, then build the documentation site strictly into site/
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TORCH_VERSION := 2.13.0
export MUJOCO_GL ?= egl
export PYOPENGL_PLATFORM ?= egl

RENDER_DEBS := libegl1 libegl-mesa0 libgl1-mesa-dri libopengl0 libosmesa6

.PHONY: setup system-deps train test bench docs clean

# Headless MuJoCo rendering (EGL through Mesa, OSMesa as fallback). Skipped when already installed.
system-deps:
	@if ! dpkg -s $(RENDER_DEBS) >/dev/null 2>&1; then \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq --no-install-recommends $(RENDER_DEBS); \
	fi

# torch first and pinned (a CPU build here): installing the project into an env without torch would
# let pip resolve a bare torch requirement to a multi-GB CUDA build.
$(VENV)/.stamp-installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==$(TORCH_VERSION)
	$(PY) -m pip install -q -e ".[test,playground,cluster,docs,envpool]"
	@touch $@

setup: system-deps $(VENV)/.stamp-installed

train: setup
	$(PY) -m genpol.train +experiment=default run_dir=runs/default

# Two workers: every test runs on one torch thread (tests/conftest.py), so one process leaves a core idle
# (16 min -> 10 min on a slow 2-core machine, 2026-12-01).
test: setup
	$(PY) -m pytest -q -n 2 --dist loadgroup --durations=25 tests

bench: setup
	$(PY) bench/throughput.py

docs: setup
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

clean:
	rm -rf runs outputs multirun site videos/*/ MUJOCO_LOG.TXT
