# Two entry points: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
BASE := $(VENV)/.installed-base
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit bench mutation clean

# The demo needs only the package; the tools for `make test` come in on top.
$(BASE): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $(BASE)

$(STAMP): $(BASE)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(BASE)
	$(BIN)/python docs/examples/demo.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy --strict kernel plugins stores

unit: $(STAMP)
	$(BIN)/python -m pytest

test: lint typecheck unit

bench: $(STAMP)
	$(BIN)/python benchmarks/commit_scaling.py

# Slow (minutes), so not part of `make test`: mutates the commit, merge, copy, vector and
# persistence modules one change at a time ([tool.mutmut] in pyproject.toml) and prints the
# score per module with every surviving mutant; fails below 95 %.
$(VENV)/.mutation-installed: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,mutation]'
	touch $@

mutation: $(VENV)/.mutation-installed
	rm -rf mutants
	$(BIN)/mutmut run --max-children 2 > /dev/null
	$(BIN)/python tests/mutation_report.py --mutmut $(BIN)/mutmut --goal 95

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .statekernel build *.egg-info mutants
