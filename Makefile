# Two entry points for a newcomer: `make demo` and `make test`.
# Both create .venv on first use and reinstall only when pyproject.toml changes.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
OUT ?= runs/demo

.PHONY: demo test bench clean-venv

$(PY):
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "bnmem needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# Stamps record what is installed; they are newer than pyproject.toml unless it changed.
$(VENV)/.installed: pyproject.toml | $(PY)
	$(PIP) install -q -e .
	@touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed
	$(PIP) install -q -e '.[test]'
	@touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/bnmem memorize --dataset digits --arch lenet --norms batch,none --label-noise 0.05 --epochs 30 --seeds 3 --out $(OUT)
	@echo "demo results: $(OUT)/ (metrics.json, memorization.png)"

test: $(VENV)/.installed-test
	$(PY) -m pytest -q

bench: $(VENV)/.installed
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b; done

clean-venv:
	rm -rf $(VENV)
