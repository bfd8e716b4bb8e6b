# Two entry points for a newcomer: `make demo` and `make test`.
# Both create .venv on first use and reinstall only when pyproject.toml changes.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
OUT ?= runs/demo

# `make test` runs the suite on two worker processes (pytest-xdist), each test file whole on one
# worker (its module fixtures are built once), then the Ray and Chromium tests on their own:
# they start process pools and a browser that must not compete with each other or with the
# workers. WORKERS=0 runs the first part serially too. (--dist loadfile rather than loadgroup:
# loadgroup ignores xdist_group marks under pytest 9.2 with pytest-xdist 3.8.)
WORKERS ?= 2

.PHONY: demo test docs mutate bench clean-venv

$(PY):
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "bnmem needs Python 3.11 or newer")'
	$(PYTHON) tools/venv_install.py --create $(VENV)

# Stamps record what is installed; they are newer than pyproject.toml unless it changed.
# tools/venv_install.py installs with uv when it can (it unpacks the several GB of PyTorch's CUDA wheels in parallel;
# pip, one at a time), handing it pip's configuration (`pip config list`, PIP_* variables: indexes, find-links,
# constraints), and with `pip install --no-compile` otherwise, saying why; INSTALLER=pip forces pip, INSTALLER=uv
# forbids the fallback. benchmarks/bench_install.py measures both side by side, fresh venv and empty caches each
# (medians of 2 rounds on the 2-core machine, load 2-9 with other work): venv, pip upgrade and install 140 s with pip,
# venv and install 72 s with uv (1.9x); with the first `import torch, bnmem.lenses.memorize` 158 s and 90 s.
# Neither byte-compiles at install time: Python compiles (and caches) only the modules a command imports, on first
# import. pip's byte-compilation measured on the 2-core machine under load (2 rounds each at load 13-19): install
# 345 s -> 181 s without it, the first `import torch` 11 s -> 26 s (once). pip is not upgraded (Python 3.11's is
# 22.3 or newer, which installs editable pyproject.toml projects and reads the same configuration; upgrading it cost
# 6-9 s of every fresh install in the runs above). `--create` makes the venv without pip when the base Python's pip
# can act on it (`pip --python`): `python -m venv` spends ~7 s of CPU byte-compiling the venv's own pip; uv then
# installs pip into the venv with the rest (the pip fallback bootstraps it with ensurepip first).
INSTALLER ?= auto
VENV_INSTALL := $(PY) tools/venv_install.py --installer $(INSTALLER)
$(VENV)/.installed: pyproject.toml | $(PY)
	$(VENV_INSTALL) -e .
	@touch $@

# The docs extra with the test one: the suite builds the API reference site (mkdocs build --strict) and executes
# the tutorial notebook (tests/test_api_docs.py, tests/test_tutorial.py).
$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed
	$(VENV_INSTALL) -e '.[test,docs]'
	@touch $@

# The whole study on the embedded digits (studies/demo.yaml: every lens but defenses; three outlier settings x
# 3 replicates, one model seed each, the shared recipe = 9 cells)
# and its report; a rerun resumes and skips what is finished. Two worker processes
# with one torch thread each (the results do not depend on the worker count).
demo: $(VENV)/.installed
	$(VENV)/bin/bnmem run studies/demo.yaml --out $(OUT) --workers 2
	$(VENV)/bin/bnmem report $(OUT)
	@echo "demo results: $(OUT)/report.html (claims checklist and figures), $(OUT)/summary.md, $(OUT)/deciding.csv.gz (every number a verdict rests on: bnmem verify $(OUT)), $(OUT)/index.json (every cell and lens folder)"

# lint-imports first: the layer contracts of docs/architecture.md ([tool.importlinter] in pyproject.toml).
test: $(VENV)/.installed-test
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q -n $(WORKERS) --dist loadfile -m "not ray and not chromium"
	$(VENV)/bin/bnmem verify docs/decisive --repo .
	$(PY) -m pytest -q -m "ray or chromium"

# The API reference site into site/ (`.venv/bin/mkdocs serve` serves it at http://127.0.0.1:8000 while you edit).
docs: $(VENV)/.installed-test
	$(VENV)/bin/mkdocs build --strict

# Mutation testing of the pure-numpy and bookkeeping modules ([tool.mutmut] in pyproject.toml,
# docs/testing.md). Results are cached in mutants/: a rerun retests only what changed.
$(VENV)/.installed-mutate: pyproject.toml $(VENV)/.installed-test
	$(VENV_INSTALL) -e '.[test,mutate]'
	@touch $@

mutate: $(VENV)/.installed-mutate
	@$(PY) tests/mutation_score.py --reset-stale-cache
	OMP_NUM_THREADS=1 $(VENV)/bin/mutmut run
	@$(PY) tests/mutation_score.py

bench: $(VENV)/.installed
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b; done

clean-venv:
	rm -rf $(VENV)
