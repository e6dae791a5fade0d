# LayerSync: `make demo` (the main job) and `make test` (every suite) are the two
# entry points; both install what they need first (scripts/setup.sh, idempotent).
SHELL := /bin/bash
.DEFAULT_GOAL := help

CONFIG ?= debug
VENV ?= .venv
PY := $(VENV)/bin/python
SWIFT_BUILD_FLAGS ?= -j 2
LIB := .build/$(CONFIG)/liblayersync.so
SHARED ?= $(abspath ../shared)
export LAYERSYNC_LIBRARY := $(abspath $(LIB))
export LAYERSYNC_SHARED_DIR := $(SHARED)
export LAYERSYNC_CORPUS ?= $(SHARED)/corpus/pdf
export LAYERSYNC_SERVER_BIN := $(abspath $(VENV)/bin/layersync-server)

.PHONY: help setup generate build demo test test-suites test-generated test-swift test-c test-c-plain test-c-asan test-python test-server clean bench bench-smoke bench-setup test-c-tsan test-c-valgrind soak

help:
	@echo "make demo   - run the main job end to end (server, two clients, real PDFs);"
	@echo "              make demo KEEP=1 keeps the server and its dashboard up at the end"
	@echo "make test   - run every test suite (generated files, Swift, C/CTest, Python, server)"
	@echo "make bench  - run the benchmarks (bench/README.md); make bench-smoke: tiny sizes"
	@echo "make test-c-tsan / test-c-valgrind - the C suite under ThreadSanitizer / valgrind"
	@echo "make soak   - the convergence test for SOAK_SECONDS (default 600); SOAK_SEED=N replays a seed"
	@echo "make generate - regenerate include/layersync.h, ctypes declarations, docs/c-api.md from api/"

setup:
	@bash scripts/setup.sh

generate:
	python3 tools/gen_api.py

build: setup
	swift build -c $(CONFIG) $(SWIFT_BUILD_FLAGS) --product layersync
	@# The library's SONAME is liblayersync.so.0; give programs linked against the build tree
	@# the name their loader asks for (an install gets the full set of symlinks from CMake).
	@ln -sf liblayersync.so .build/$(CONFIG)/liblayersync.so.0

# KEEP=1: keep the server (and its dashboard, whose URL the demo prints) up until Ctrl-C
demo: build
	$(PY) examples/python/demo.py $(if $(KEEP),--keep-server)

# The suites run SUITE_JOBS at a time (make -j; default 2, one per core: each suite is about
# one core's work, much of it waiting on servers and sockets), longest first: the server suite
# beside the Swift build, then the Swift tests, the Python bindings, the C tests plain and under
# ASan as the slots free up. Each suite's output is printed whole when it ends
# (--output-sync). `make test SUITE_JOBS=1` runs them one after another.
SUITE_JOBS ?= 2
test:
	@$(MAKE) --no-print-directory -j $(SUITE_JOBS) --output-sync=target test-suites
	@echo "make test: all suites passed"

# The order is the one the free slots take them in (a suite starts once its prerequisites are done).
test-suites: setup test-generated build test-server test-swift test-python test-c-plain test-c-asan

test-generated:
	python3 tools/gen_api.py --check

test-swift: setup
	swift build -c $(CONFIG) $(SWIFT_BUILD_FLAGS) --build-tests
	swift test -c $(CONFIG) --skip-build

CMAKE_TEST_FLAGS = -DLAYERSYNC_SWIFT_CONFIG=$(CONFIG) -DLAYERSYNC_SWIFT_SCRATCH=$(abspath .build) \
	-DLAYERSYNC_SERVER_BIN=$(LAYERSYNC_SERVER_BIN) -DLAYERSYNC_SHARED_DIR=$(SHARED)
# The C test trees after `build`: they stage the library it built and run no `swift build` of
# their own (which would wait for SwiftPM's lock while `make test` runs `swift test` beside them).
CMAKE_BUILT_FLAGS = $(CMAKE_TEST_FLAGS) -DLAYERSYNC_SWIFT_BUILD=OFF

# The C tests twice: plain (with the ABI, install and example checks), then the C tests
# again under AddressSanitizer + UndefinedBehaviorSanitizer (leaks included). Each build tree
# runs CTEST_JOBS tests at a time (each test has its own server and temporary directories;
# the ABI install checks run alone, RUN_SERIAL); `make test` may run the two trees at once.
CTEST_JOBS ?= 2
test-c: test-c-plain test-c-asan

test-c-plain: build
	cmake -S . -B build/ctest $(CMAKE_BUILT_FLAGS) >/dev/null
	cmake --build build/ctest -j 2
	ctest --test-dir build/ctest -j $(CTEST_JOBS) --output-on-failure

test-c-asan: build
	cmake -S . -B build/ctest-asan -DLAYERSYNC_SANITIZE=address $(CMAKE_BUILT_FLAGS) >/dev/null
	cmake --build build/ctest-asan -j 2
	ctest --test-dir build/ctest-asan -j $(CTEST_JOBS) -L c --output-on-failure

# Not in `make test` (about 2.5 and 4 minutes): the C tests under ThreadSanitizer and under
# valgrind memcheck (errors and definitely-lost blocks fail a test).
# test-c-tsan instruments the library too: `swift build --sanitize=thread` in its own scratch
# path (never .build), the C tests and examples built by the toolchain's clang (CMakeLists.txt).
TSAN_CC = $(dir $(realpath $(shell command -v swift)))clang
test-c-tsan: setup
	@# A cache made with another C compiler (the former C-only mode) cannot be switched in place.
	@grep -qsx 'CMAKE_C_COMPILER:FILEPATH=$(TSAN_CC)' build/ctest-tsan/CMakeCache.txt || rm -rf build/ctest-tsan
	cmake -S . -B build/ctest-tsan -DLAYERSYNC_SANITIZE=thread \
		$(filter-out -DLAYERSYNC_SWIFT_SCRATCH=%,$(CMAKE_TEST_FLAGS)) \
		-DLAYERSYNC_SWIFT_SCRATCH=$(abspath build/ctest-tsan/swift) \
		-DCMAKE_C_COMPILER=$(TSAN_CC) -DCMAKE_CXX_COMPILER=$(TSAN_CC)++ >/dev/null
	cmake --build build/ctest-tsan
	ctest --test-dir build/ctest-tsan -L c --output-on-failure

test-c-valgrind: build
	cmake -S . -B build/ctest-valgrind -DLAYERSYNC_VALGRIND=ON $(CMAKE_BUILT_FLAGS) >/dev/null
	cmake --build build/ctest-valgrind
	ctest --test-dir build/ctest-valgrind -L c --output-on-failure

# The two pytest suites run on TEST_JOBS workers (pytest-xdist), a test file per worker
# (--dist loadfile: a file's fixtures and servers stay in one process). TEST_JOBS=0 runs
# them in this process, as plain pytest does.
TEST_JOBS ?= 2
PYTEST_JOBS = $(if $(filter 0,$(TEST_JOBS)),,-n $(TEST_JOBS) --dist loadfile)

test-python: build
	$(PY) -m pytest -q $(PYTEST_JOBS) bindings/python/tests

# Not in `make test` (which runs the same test for 35 s of faults): 3 client processes, faults,
# kill -9, token expiry and a server restart for SOAK_SECONDS; the seed is printed and
# SOAK_SEED=<seed> replays its schedule (bindings/python/tests/test_convergence.py).
SOAK_SECONDS ?= 600
soak: build
	SOAK_SECONDS=$(SOAK_SECONDS) $(if $(SOAK_SEED),SOAK_SEED=$(SOAK_SEED)) \
		$(PY) -m pytest -q -s bindings/python/tests/test_convergence.py

test-server: setup
	$(PY) -m pytest -q formats/tests
	$(PY) -m pytest -q $(PYTEST_JOBS) server/tests

# Benchmarks (bench/README.md): not part of `make test`; `bench-smoke` keeps the harness
# from rotting in CI with tiny sizes. Peers (Kinto, pycrdt-websocket) live in their own venv.
bench-setup:
	@bash bench/setup.sh || echo "bench: peers' virtualenv unavailable; scenario 7 will be skipped"

bench: setup bench-setup
	swift build -c release $(SWIFT_BUILD_FLAGS) --product layersync
	LAYERSYNC_LIBRARY=$(abspath .build/release/liblayersync.so) $(PY) bench/run.py $(BENCH_ARGS)

bench-smoke: build bench-setup
	$(PY) bench/run.py --smoke $(BENCH_ARGS)

clean:
	rm -rf .build build
