# The two commands of the README:
#   make serve   set up, then serve the gateway on the embedded default (espeak-ng, no Redis, no weights needed)
#   make test    set up (Debian packages included, as root), then run the linters and the whole test suite (CI runs it)

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch goes in first, pinned: on machines with a local CPU wheel of 2.13.0 this takes it from disk, while a bare
# `torch` (or one pulled in by ChatTTS) would download a multi-GB CUDA build. Override for a GPU machine, e.g.
# `make serve TORCH=torch==2.13.0+cu128 PIP_EXTRA=--extra-index-url=...`.
TORCH ?= torch==2.13.0
PIP_EXTRA ?=
ARGS ?=
PYTEST_ARGS ?=

.PHONY: setup serve test lint system-deps

# The official OpenAI Node SDK for tests/e2e/test_clients.py, from tests/node's lockfile (needs Node.js 20+ and npm).
# Only `make test` installs it, so that `make serve` still needs nothing but Python.
NODE_SDK := tests/node/node_modules/.installed

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml scripts/fix_torchaudio.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(PIP_EXTRA) "$(TORCH)"
	$(BIN)/python -m pip install --quiet $(PIP_EXTRA) -e '.[chattts,test]' "$(TORCH)"
	# ChatTTS imports torchaudio, whose newest wheel may not load next to a CPU torch: see the script.
	$(BIN)/python scripts/fix_torchaudio.py
	touch $@

$(NODE_SDK): tests/node/package.json tests/node/package-lock.json
	npm ci --prefix tests/node --no-audit --no-fund
	touch $@

serve: setup
	$(BIN)/tts-gateway serve $(ARGS)

# redis-server, Chromium, ChromeDriver and npm for the tests: installed with apt-get as root, else named.
system-deps:
	scripts/system-deps.sh

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m mypy
	$(BIN)/lint-imports

test: system-deps lint $(NODE_SDK)
	$(BIN)/python -m pytest $(PYTEST_ARGS)
