# The whole setup on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
WAREHOUSE ?= ./warehouse

.PHONY: install constraints constraints-newest demo test test-fast test-lowest test-newest lint bench clean paimon-env paimon-fixtures deltalake-env

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip setuptools wheel

# torch first and pinned: any other spec downloads gigabytes of CUDA (docs/dependencies.md).
# pyproject.toml says which versions raylake supports; constraints.txt pins the ones we test.
$(STAMP): pyproject.toml constraints.txt | $(PY)
	$(PY) -m pip install -c constraints.txt "torch==2.13.0"
	$(PY) -m pip install -c constraints.txt -e ".[all,tf-cpu,test]"
	touch $(STAMP)

install: $(STAMP)

# Regenerate the pins from a working environment (after adding or moving a dependency).
# A local version label (+cpu) is dropped: torch==2.13.0 also names the CPU wheel.
constraints: install
	{ echo "# The exact versions that make install uses, written by make constraints from a"; \
	  echo "# working .venv (docs/dependencies.md). pyproject.toml holds the supported ranges."; \
	  $(PY) -m pip freeze --exclude-editable | grep -v -i '^raylake[= ]' \
	    | sed -E 's/^([A-Za-z0-9_.-]+==[^+ ]+)\+[^ ]*$$/\1/'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

demo: install
	$(PY) examples/quickstart.py --warehouse $(WAREHOUSE)
	$(PY) examples/streaming_quickstart.py --warehouse $(WAREHOUSE)
	$(PY) examples/spark_to_ray.py --warehouse $(WAREHOUSE)
	$(PY) examples/train_quickstart.py --warehouse $(WAREHOUSE)

lint: install
	$(PY) -m ruff check raylake tests bench examples
	$(PY) -m ruff format --check raylake tests bench examples
	$(PY) -m mypy

# Two pytest sessions side by side: the tests that need Ray or Spark, and the rest
# (tests/run_suite.py; an empty session fails the run). The slowest tests of each are
# listed so that a run near the 15-minute bar shows where time goes.
test: install lint
	$(PY) tests/run_suite.py --durations=15

test-fast: install
	$(PY) -m pytest tests -m "$(FAST)"

# pytest -m for the legs that run only the fast tests (no Ray, no Spark, nothing slow).
FAST := not ray and not spark and not slow and not multinode

# CI runs the lowest and newest legs side by side: each keeps its tmp_path directories
# under a root of its own, as tests/run_suite.py gives each of its sessions one. pytest
# removes old numbered directories as a session ends; two sessions sharing a root can
# remove the same one at once, and the later one fails.
PYTEST_TMP := $(or $(PYTEST_DEBUG_TEMPROOT),$(TMPDIR),/tmp)/raylake-pytest

# The lowest and newest legs run every property test through the same code paths with a
# quarter of its examples (tests/property_depth.py): they look for what other releases
# change, and the 3.11 leg draws every example.
EXTRA_LEG_DEPTH := RAYLAKE_PROPERTY_DEPTH=0.25

# The oldest Python raylake supports with the lower ends of the ranges (docs/dependencies.md):
# the core and the s3, duckdb, polars and paimon extras at the lowest versions pyproject.toml
# allows, in an environment of their own; torch at its pin. Ray, Spark and TensorFlow are not
# installed there: Ray Data 2.60 itself needs pyarrow>=17.
# pyenv's interpreter where there is one (its python3.10 shim fails unless 3.10 is selected).
LOWEST_PYTHON ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.10.*/bin/python3) python3.10)
LOWEST_VENV ?= .venv-lowest
LOWEST_PY := $(LOWEST_VENV)/bin/python

$(LOWEST_VENV)/.installed: pyproject.toml constraints-lowest.txt
	rm -rf $(LOWEST_VENV)
	$(LOWEST_PYTHON) -m venv $(LOWEST_VENV)
	$(LOWEST_PY) -m pip install --upgrade pip setuptools wheel
	$(LOWEST_PY) -m pip install -c constraints-lowest.txt "torch==2.13.0"
	$(LOWEST_PY) -m pip install -c constraints-lowest.txt -e ".[torch,s3,duckdb,polars,paimon,test]"
	touch $@

test-lowest: $(LOWEST_VENV)/.installed
	mkdir -p $(PYTEST_TMP)/lowest
	$(EXTRA_LEG_DEPTH) PYTEST_DEBUG_TEMPROOT=$(PYTEST_TMP)/lowest $(LOWEST_PY) -m pytest tests -m "$(FAST)"

# The newest Python raylake supports with the newest release of every dependency (pandas 3
# included), pinned in constraints-newest.txt; `make constraints-newest` refreshes the pins
# from a new environment that pip resolves without them. Spark is left out: pyspark is a
# source distribution of 300 MB and its tests are not fast tests. TensorFlow is left out:
# with the CUDA build of torch that 3.13 gets, `import tensorflow` then `import triton`
# (which torch.optim imports) segfaults; the 3.11 leg tests the same TensorFlow release.
NEWEST_PYTHON ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.13.*/bin/python3) python3.13)
NEWEST_VENV ?= .venv-newest
NEWEST_PY := $(NEWEST_VENV)/bin/python
NEWEST_EXTRAS := ray,s3,torch,duckdb,polars,paimon,test

$(NEWEST_VENV)/.installed: pyproject.toml constraints-newest.txt
	rm -rf $(NEWEST_VENV)
	$(NEWEST_PYTHON) -m venv $(NEWEST_VENV)
	$(NEWEST_PY) -m pip install --upgrade pip
	$(NEWEST_PY) -m pip install -c constraints-newest.txt -e ".[$(NEWEST_EXTRAS)]"
	touch $@

test-newest: $(NEWEST_VENV)/.installed
	mkdir -p $(PYTEST_TMP)/newest
	$(EXTRA_LEG_DEPTH) PYTEST_DEBUG_TEMPROOT=$(PYTEST_TMP)/newest $(NEWEST_PY) -m pytest tests -m "$(FAST)"

constraints-newest:
	rm -rf $(NEWEST_VENV).refresh
	$(NEWEST_PYTHON) -m venv $(NEWEST_VENV).refresh
	$(NEWEST_VENV).refresh/bin/python -m pip install --upgrade pip
	$(NEWEST_VENV).refresh/bin/python -m pip install -e ".[$(NEWEST_EXTRAS)]"
	{ echo "# The newest release of each dependency on the newest Python raylake supports (3.13), written by"; \
	  echo "# make constraints-newest (docs/dependencies.md); make test-newest installs these."; \
	  $(NEWEST_VENV).refresh/bin/python -m pip freeze --exclude-editable | grep -v -i '^raylake[= ]' \
	    | sed -E 's/^([A-Za-z0-9_.-]+==[^+ ]+)\+[^ ]*$$/\1/'; } > constraints-newest.txt.new
	mv constraints-newest.txt.new constraints-newest.txt
	rm -rf $(NEWEST_VENV).refresh

bench: install
	$(PY) bench/scan.py
	$(PY) bench/merge.py
	$(PY) bench/ray_read.py
	$(PY) bench/plan.py
	$(PY) bench/spark.py
	$(PY) bench/streaming.py
	$(PY) bench/changes.py
	$(PY) bench/train.py
	$(PY) bench/object_store.py

# pypaimon pins pyarrow<20, so it lives in its own environment, never in $(VENV):
# it writes the Paimon fixture tables (tests/paimon/fixtures) and runs the peer benchmarks.
PAIMON_VENV ?= .venv-paimon
PAIMON_PY := $(PAIMON_VENV)/bin/python

# torch (for pypaimon's torch dataset in bench/paimon.py) first and pinned, as above.
$(PAIMON_VENV)/.installed:
	$(PYTHON) -m venv $(PAIMON_VENV)
	$(PAIMON_PY) -m pip install "torch==2.13.0"
	$(PAIMON_PY) -m pip install "pypaimon==2.1.0" "pandas<3"
	touch $@

paimon-env: $(PAIMON_VENV)/.installed

paimon-fixtures: paimon-env
	$(PAIMON_PY) tests/paimon/fixtures/generate.py

# deltalake, the peer of bench/merge_into.py, lives in its own environment too (its own
# pyarrow pin must not decide ours); the benchmark runs its side in this interpreter.
DELTALAKE_VENV ?= .venv-deltalake
DELTALAKE_PY := $(DELTALAKE_VENV)/bin/python

$(DELTALAKE_VENV)/.installed:
	$(PYTHON) -m venv $(DELTALAKE_VENV)
	$(DELTALAKE_PY) -m pip install "deltalake==1.6.6" pyarrow numpy
	touch $@

deltalake-env: $(DELTALAKE_VENV)/.installed

clean:
	rm -rf $(VENV) $(PAIMON_VENV) $(DELTALAKE_VENV) $(LOWEST_VENV) $(NEWEST_VENV) $(WAREHOUSE) .pytest_cache .pytest-cluster.log .mypy_cache .ruff_cache
