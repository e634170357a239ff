# The two commands of the README:
#   make serve   set up what serving needs, then serve the gateway on the embedded default (espeak-ng, no Redis, no
#                weights needed)
#   make test    set up (the test tools too, and as root the Debian packages), then run the linters and the whole test
#                suite (CI runs it)
# And for contributors (CONTRIBUTING.md):
#   make coverage  what make test does, with the suite under coverage, then the figure
#   make quick   the linters and the unit tests not marked slow (no engine process, no ChatTTS): a minute or two
#   make fuzz-uploads  tests/e2e/test_upload_fuzz.py at length: a real gateway's upload routes fuzzed with
#                FUZZ_UPLOADS_EXAMPLES (5000) mutated recordings, a random seed it prints (FUZZ_UPLOADS_SEED=...
#                replays it)
#   make lock    regenerate requirements/*.txt, the exact versions every install here takes, from pyproject.toml

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch is pinned, and the lock files say `torch==2.13.0`: on machines with a local CPU wheel of 2.13.0 pip takes it
# from disk (2.13.0+cpu satisfies the pin), while a bare `torch` would download a multi-GB CUDA build. Override for a
# GPU machine, e.g. `make serve TORCH=torch==2.13.0+cu128 PIP_EXTRA=--extra-index-url=...`.
TORCH ?= torch==2.13.0
PIP_EXTRA ?=
ARGS ?=
PYTEST_ARGS ?=
LOCK_ARGS ?=
PIP_VERSION := 26.3
PIP_TOOLS_VERSION := 7.6.2
PIP_INSTALL := $(BIN)/python -m pip install --quiet $(PIP_EXTRA)

.PHONY: setup serve test coverage quick fuzz-uploads lint lock system-deps

# The official OpenAI Node SDK for tests/e2e/test_clients.py, from tests/node's lockfile (needs Node.js 20+ and npm).
# Only `make test` installs it, so that `make serve` still needs nothing but Python.
NODE_SDK := tests/node/node_modules/.installed
# What each stage has installed: serving (the gateway, ChatTTS included), then testing (the tools on top).
SERVING := $(VENV)/.serving
TESTING := $(VENV)/.testing

setup: $(TESTING)

$(SERVING): requirements/serve.txt pyproject.toml scripts/fix_torchaudio.py
	$(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) "pip==$(PIP_VERSION)"
	$(PIP_INSTALL) -r requirements/serve.txt "$(TORCH)"
	# The project itself: its dependencies are the lock's, and the lock's setuptools builds it. Its former name
	# (tts-gateway, another project's on PyPI) goes first, so that an older checkout's venv keeps no stale command.
	$(BIN)/python -m pip uninstall --quiet --yes tts-gateway
	$(PIP_INSTALL) --no-deps --no-build-isolation -e .
	# ChatTTS imports torchaudio, whose newest wheel may not load next to a CPU torch: see the script.
	$(BIN)/python scripts/fix_torchaudio.py
	touch $@

$(TESTING): $(SERVING) requirements/test.txt
	$(PIP_INSTALL) -r requirements/test.txt "$(TORCH)"
	touch $@

$(NODE_SDK): tests/node/package.json tests/node/package-lock.json
	npm ci --prefix tests/node --no-audit --no-fund
	touch $@

serve: $(SERVING)
	$(BIN)/chattts-gateway serve $(ARGS)

# redis-server, Chromium, ChromeDriver and npm for the tests: installed with apt-get as root, else named.
system-deps:
	scripts/system-deps.sh

lint: $(TESTING)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m mypy
	$(BIN)/lint-imports

# Where the environment sets PYTHONDONTWRITEBYTECODE (this machine's environment does), nothing caches compiled code:
# each pytest worker rewrote and compiled every test module again (about 7 s of CPU each), and each of the hundreds of
# processes the suite starts (gateways, engine workers, decoders) compiled the project's modules again. The test
# targets write bytecode (`__pycache__/`, which git ignores); the installed packages' is written by pip either way.
test coverage quick fuzz-uploads: export PYTHONDONTWRITEBYTECODE :=

# The whole suite in TEST_WORKERS processes (pytest-xdist), a test file each at a time: its module-scoped gateways
# start once. Three on 2 cores: much of an end-to-end test is waiting (for a gateway to start or stop, a socket, a
# deadline), and two workers left a third of the cores idle; three took the suite 826 -> 700 s on machine B, 1.5 of
# the 2 cores busy. `make test TEST_WORKERS=0` runs it in one process.
TEST_WORKERS ?= 3
PYTEST_SUITE := -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)
test: system-deps lint $(NODE_SDK)
	$(BIN)/python $(PYTEST_SUITE)

# The same suite under coverage ([tool.coverage] in pyproject.toml; `make coverage COVER_PROCESSES=1` measures the
# gateway processes of the end-to-end tests too), then the figure; `.venv/bin/coverage report` lists it file by file.
# Not what CI runs: coverage's tracer makes ChatTTS's per-token Python loop about 2x slower, and the suite about a
# quarter (CONTRIBUTING.md).
COVER_PROCESSES ?= 0
coverage: system-deps lint $(NODE_SDK)
	$(BIN)/coverage erase
	COVER_PROCESSES=$(COVER_PROCESSES) $(BIN)/coverage run $(PYTEST_SUITE)
	$(BIN)/coverage combine --quiet
	@echo "Coverage: $$($(BIN)/coverage report --format=total) % of the lines and branches of gateway, engines, auth and storage"

# What a contributor runs before each commit; `make test` before a push.
quick: lint
	$(BIN)/python -m pytest tests/unit -m "not slow" $(PYTEST_ARGS)

# The upload fuzz test of the suite (500 examples, derandomized) at length, with a random seed unless
# FUZZ_UPLOADS_SEED names one; pytest's per-test timeout is off, for the run lasts as long as its examples.
FUZZ_UPLOADS_EXAMPLES ?= 5000
FUZZ_UPLOADS_SEED ?=
fuzz-uploads: $(TESTING)
	@seed="$(or $(FUZZ_UPLOADS_SEED),$$(od -An -N4 -tu4 /dev/urandom | tr -d ' '))"; \
	echo "fuzz-uploads: $(FUZZ_UPLOADS_EXAMPLES) examples, seed $$seed (FUZZ_UPLOADS_SEED=$$seed replays them)"; \
	FUZZ_UPLOADS_EXAMPLES=$(FUZZ_UPLOADS_EXAMPLES) FUZZ_UPLOADS_SEED=$$seed \
		$(BIN)/python -m pytest tests/e2e/test_upload_fuzz.py --timeout 0 $(PYTEST_ARGS)

# The lock files: serve.txt for `make serve` and the Dockerfile, test.txt (serve.txt's versions and the test tools)
# for `make test`. pip-compile keeps the versions already locked that still fit pyproject.toml;
# `make lock LOCK_ARGS=--upgrade` takes the newest that fit. It resolves for this machine (Linux, CPython 3.11) from
# pip's configured indexes, with torch as $(TORCH): run where that is the CPU wheel, so that no CUDA packages are
# locked. The lock then says `torch==2.13.0` without the wheel's `+cpu` label, which the CUDA image's torch
# (`2.13.0+cu128`) satisfies as well.
LOCK_VENV := $(VENV)-lock
PIP_COMPILE := CUSTOM_COMPILE_COMMAND="make lock" $(LOCK_VENV)/bin/pip-compile --quiet --strip-extras --allow-unsafe \
	--no-emit-index-url --no-emit-find-links $(LOCK_ARGS)

lock:
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install --quiet $(PIP_EXTRA) "pip==$(PIP_VERSION)" "pip-tools==$(PIP_TOOLS_VERSION)"
	$(PIP_COMPILE) --extra chattts --upgrade-package "$(TORCH)" -o requirements/serve.txt pyproject.toml
	$(PIP_COMPILE) --extra chattts --extra test --constraint requirements/serve.txt -o requirements/test.txt pyproject.toml
	sed -i 's/^torch==\([^+]*\)+cpu$$/torch==\1/' requirements/serve.txt requirements/test.txt
