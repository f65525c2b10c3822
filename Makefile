# Every target sets itself up from nothing, from the committed locks in requirements/:
#   test.lock  every package the test suite needs (backend, gpu, dev, clients), pinned with hashes
#   demo.lock  only what `make demo` needs (backend, clients)
# torch is the one package outside the locks: the CPU wheel of torch 2.13.0 (on this machine kind's disk).
# Installs go through uv (pinned in test.lock); pip is used only to install uv itself.
# `make lock` refreshes both locks to the newest releases pyproject.toml's ranges allow, then runs the suite.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch is the CPU wheel on this machine kind's disk (its dependencies are in the locks); elsewhere, PyPI's
TORCH_WHEEL := $(firstword $(wildcard /opt/wheels/torch-2.13.0+cpu-*.whl))
TORCH := $(if $(TORCH_WHEEL),--no-deps $(TORCH_WHEEL),torch==2.13.0)
# --compile-bytecode: where PYTHONDONTWRITEBYTECODE is set (this project's machines set it) nothing writes .pyc
# files, so without it every process the suite starts compiles torch, pandas, litellm... from source (importing
# those five: 9.9 s of CPU from source, 6.2 s compiled, measured at load ~13)
# uv installs the locks (pip takes minutes to resolve 150 pinned packages on a busy 2-core machine); its version
# is the one test.lock pins
UV := uv==$(shell sed -n 's/^uv==\([^ ]*\).*/\1/p' requirements/test.lock)
UV_INSTALL := $(BIN)/uv pip install -q --python $(BIN)/python --compile-bytecode
HASH = $(shell cat pyproject.toml setup.py Makefile requirements/*.lock requirements/*.txt | sha1sum | cut -c1-12)
TEST_STAMP := $(VENV)/.test-$(HASH)
DEMO_STAMP := $(VENV)/.demo-$(HASH)
JOBS ?= auto
ONLY ?=
# pytest-xdist's workers; each test file runs whole on one worker (the model servers they share start once)
PYTEST := $(BIN)/python -m pytest -q -rfEs --durations=30 -n $(JOBS) --dist loadfile
LOCK := uv pip compile pyproject.toml --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
	--override requirements/torch-cpu.txt --no-emit-package torch --generate-hashes \
	$(if $(wildcard /opt/wheels),--find-links /opt/wheels)

.PHONY: demo test bench lint lock clean setup

$(VENV)/bin/python:
	$(PY) -m venv $(VENV)

$(BIN)/uv: | $(VENV)/bin/python
	$(BIN)/pip install -q --no-deps $(UV)

# --require-hashes: a package that is not in the lock, or a file whose hash differs, stops the install
$(TEST_STAMP): | $(BIN)/uv
	$(UV_INSTALL) --require-hashes -r requirements/test.lock
	$(UV_INSTALL) $(TORCH)
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	$(BIN)/llmtrace model pull --quiet
	@command -v tmux >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && (apt-get update -qq && apt-get install -y -qq tmux >/dev/null) || echo 'tmux not installed: the one tmux test of the explorer will skip'; }
	@command -v chromium >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || echo 'chromium not installed: the browser tests of the report will skip'; }
	@rm -f $(VENV)/.test-* $(VENV)/.demo-* && touch $@ $(DEMO_STAMP)

# the demo's own, smaller set; a venv set up for the tests already holds it
$(DEMO_STAMP): | $(BIN)/uv
	$(UV_INSTALL) --require-hashes -r requirements/demo.lock
	$(UV_INSTALL) $(TORCH)
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	$(BIN)/llmtrace model pull --quiet
	@rm -f $(VENV)/.demo-* && touch $@

setup: $(TEST_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/llmtrace demo

test: $(TEST_STAMP)
	$(BIN)/ruff check .
	@# the product's own bytecode, compiled once: where PYTHONDONTWRITEBYTECODE is set, every process
	@# the suite starts would otherwise compile every module it imports from source
	$(BIN)/python -m compileall -q -j 0 llmtrace tracer adapters analyzers backend tui report >/dev/null
	$(PYTEST)

lock: $(TEST_STAMP)
	$(BIN)/$(LOCK) --upgrade --extra backend --extra gpu --extra dev --extra clients -o requirements/test.lock
	$(BIN)/$(LOCK) --upgrade --extra backend --extra clients -o requirements/demo.lock
	@# the suite must pass on what was just locked before the lock is committed
	$(MAKE) test

bench: $(TEST_STAMP)
	$(BIN)/pip install -q -e '.[bench]'
	@# llama-cpp-python is the second llama.cpp peer (engine: in process, server: its server); it builds from
	@# source (~3 min on 2 quiet cores); [server] adds fastapi and the rest its server needs
	@$(BIN)/python -c 'import llama_cpp.server.app' 2>/dev/null || $(BIN)/pip install -q 'llama-cpp-python[server]==0.3.36' || echo 'llama-cpp-python did not build: its columns will say skipped'
	$(BIN)/python benchmarks/run.py $(ONLY)

lint: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q tests/test_architecture.py tests/test_types.py

clean:
	rm -rf $(VENV) build dist *.egg-info
