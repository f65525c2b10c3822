# Every target sets itself up from nothing: a .venv, torch first (the local CPU wheel), then the project.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml setup.py Makefile | sha1sum | cut -c1-12)
ONLY ?=

.PHONY: demo test bench lint clean setup

$(STAMP):
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[backend,gpu,dev,clients]'
	$(BIN)/llmtrace model pull --quiet
	@command -v tmux >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && (apt-get update -qq && apt-get install -y -qq tmux >/dev/null) || echo 'tmux not installed: the one tmux test of the explorer will skip'; }
	@command -v chromium >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || echo 'chromium not installed: the browser tests of the report will skip'; }
	@rm -f $(VENV)/.installed-* && touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/llmtrace demo

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -rs --durations=15

bench: $(STAMP)
	$(BIN)/pip install -q -e '.[bench]'
	@# llama-cpp-python is the second llama.cpp peer (engine: in process, server: its server); it builds from
	@# source (~3 min on 2 quiet cores); [server] adds fastapi and the rest its server needs
	@$(BIN)/python -c 'import llama_cpp.server.app' 2>/dev/null || $(BIN)/pip install -q 'llama-cpp-python[server]==0.3.36' || echo 'llama-cpp-python did not build: its columns will say skipped'
	$(BIN)/python benchmarks/run.py $(ONLY)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q tests/test_architecture.py tests/test_types.py

clean:
	rm -rf $(VENV) build dist *.egg-info
