# Two entry points: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
BASE := $(VENV)/.installed-base
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck docs unit unit-fast bench mutation mutation-continue mutation-save package-check clean

# The demo needs only the package; the tools for `make test` come in on top. The install is
# an editable one in strict mode: a tree of links under build/ that mypy and IDEs follow. A
# new or removed module needs a new link, so adding a file to kernel/, plugins/ or stores/
# or any folder inside them (which changes that folder) reinstalls.
PACKAGE_DIRS := $(shell find kernel plugins stores -type d -not -name __pycache__)
$(BASE): pyproject.toml $(PACKAGE_DIRS)
	[ -x $(BIN)/python ] || { $(PYTHON) -m venv $(VENV) && $(BIN)/python -m pip install --quiet --upgrade pip; }
	$(BIN)/python -m pip install --quiet -e . --config-settings editable_mode=strict
	touch $(BASE)

$(STAMP): $(BASE)
	$(BIN)/python -m pip install --quiet -e '.[dev]' --config-settings editable_mode=strict
	touch $(STAMP)

demo: $(BASE)
	$(BIN)/statekernel demo
	@echo
	$(BIN)/python docs/examples/team.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy --strict -p statekernel

# The docs site (mkdocs.yml): every page of docs/ and the API reference mkdocstrings generates
# from the public docstrings, built into site/. --strict makes a warning (a broken link or
# anchor, a name the reference cannot find, a page missing from the nav) fail the build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir site

unit: $(STAMP)
	$(BIN)/python -m pytest

# The fast lane while working (under a minute on 2 cores): the suite without the tests marked
# slow (the crash, fault and process trials, and every test of more than a few seconds).
# `make test` runs them all, and so does CI.
unit-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow"

test: lint typecheck docs unit

# The wheel holds only statekernel; a fresh venv with it imports the public modules and not
# kernel/plugins/stores; a user's module type-checks against the wheel and the editable
# install; an application with its own plugins/ and stores/ works beside it. CI runs it.
package-check: $(STAMP)
	$(BIN)/python tests/package_check.py

# The side-by-side suite (benchmarks/suite.py, about 5 minutes): statekernel, the plain-Python
# floor, LangGraph and EvoFabric in one run, in a venv of its own so that the peers never
# reach the test venv. Results: benchmarks/results/suite.json and docs/images/bench_*.png;
# `make bench BENCH_ARGS=--quick` for a smoke run, `BENCH_ARGS='--only state_size'` for one.
BENCH_VENV := .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed
BENCH_ARGS ?=
$(BENCH_STAMP): pyproject.toml
	[ -x $(BENCH_VENV)/bin/python ] || { $(PYTHON) -m venv $(BENCH_VENV) && $(BENCH_VENV)/bin/python -m pip install --quiet --upgrade pip; }
	echo '*' > $(BENCH_VENV)/.gitignore
	$(BENCH_VENV)/bin/python -m pip install --quiet -e '.[bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python benchmarks/suite.py $(BENCH_ARGS)

# Slow (minutes), so not part of `make test`: mutates the commit, merge, copy, vector, team and
# persistence modules one change at a time ([tool.mutmut] in pyproject.toml) and prints the
# score per module with every surviving mutant; fails below 95 %. A mutant's tests mostly wait
# on servers and processes, so more mutants than cores can run at once:
# `make mutation-continue MUTATION_CHILDREN=4`.
MUTATION_CHILDREN ?= 2
$(VENV)/.mutation-installed: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,mutation]' --config-settings editable_mode=strict
	touch $@

mutation: $(VENV)/.mutation-installed
	rm -rf .mutation && mkdir -p .mutation/statekernel
	cp -r kernel/. .mutation/statekernel/
	cp -r plugins .mutation/statekernel/plugins
	cp -r stores .mutation/statekernel/stores
	cp -r tests docs benchmarks pyproject.toml README.md mkdocs.yml .mutation/
	cd .mutation && ../$(BIN)/mutmut run --max-children $(MUTATION_CHILDREN) > /dev/null
	cd .mutation && ../$(BIN)/python tests/mutation_report.py --mutmut ../$(BIN)/mutmut --goal 95

# A whole run takes longer than a working session on 2 cores. This goes on with the run in
# .mutation where it stopped, on today's code and tests (mutmut keeps a mutant's result while
# the function it mutates is unchanged, and tests the others again). Test subprocesses import
# the checkout, so the copy must be today's code too. Without a .mutation (a new machine), it
# starts one from tests/mutation_ledger.json, the results `make mutation-save` kept.
mutation-continue: $(VENV)/.mutation-installed
	@test -d .mutation/mutants || test -f tests/mutation_ledger.json || { echo "no run in .mutation and no tests/mutation_ledger.json to continue: run make mutation"; exit 2; }
	mkdir -p .mutation/statekernel
	# Tests moved or deleted since the run began must not linger in the copies (pytest would
	# collect an old test beside its new place and stop): the tests are copied afresh.
	rm -rf .mutation/tests .mutation/mutants/tests
	# mutmut finds which tests cover a function only in a whole stats run: kept stats would
	# give a function added since no tests at all, and a changed one only its old callers'.
	rm -f .mutation/mutants/mutmut-stats.json
	cp -r kernel/. .mutation/statekernel/
	cp -r plugins .mutation/statekernel/
	cp -r stores .mutation/statekernel/
	cp -r tests docs benchmarks pyproject.toml README.md mkdocs.yml .mutation/
	test -d .mutation/mutants || { cd .mutation && ../$(BIN)/python tests/mutation_ledger.py restore --ledger ../tests/mutation_ledger.json; }
	cd .mutation && ../$(BIN)/python tests/mutation_ledger.py retest-uncovered
	cd .mutation && ../$(BIN)/mutmut run --max-children $(MUTATION_CHILDREN) > /dev/null
	cd .mutation && ../$(BIN)/python tests/mutation_report.py --mutmut ../$(BIN)/mutmut --goal 95

# Keep the results of the run in .mutation in the repository (tests/mutation_ledger.json), so
# that a later session's `make mutation-continue` goes on from them.
mutation-save:
	cd .mutation && ../$(BIN)/python tests/mutation_ledger.py save --ledger ../tests/mutation_ledger.json

clean:
	rm -rf $(VENV) $(BENCH_VENV) site .mypy_cache .pytest_cache .ruff_cache .statekernel build *.egg-info .mutation
