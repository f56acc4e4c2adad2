# The whole setup on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
WAREHOUSE ?= ./warehouse

.PHONY: install demo test test-fast lint bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip setuptools wheel

# torch first and pinned: any other spec downloads gigabytes of CUDA (docs/dependencies.md).
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install "torch==2.13.0"
	$(PY) -m pip install -e ".[all,test]"
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(PY) examples/quickstart.py --warehouse $(WAREHOUSE)
	$(PY) examples/streaming_quickstart.py --warehouse $(WAREHOUSE)
	$(PY) examples/spark_to_ray.py --warehouse $(WAREHOUSE)
	$(PY) examples/train_quickstart.py --warehouse $(WAREHOUSE)

lint: install
	$(PY) -m ruff check raylake tests bench examples
	$(PY) -m ruff format --check raylake tests bench examples
	$(PY) -m mypy

# pytest exits 5 when it collects nothing: an empty run must not pass as green.
test: install lint
	$(PY) -m pytest tests; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest ran no tests" >&2; exit 1; fi; exit $$rc

test-fast: install
	$(PY) -m pytest tests -m "not ray and not spark and not slow"

bench: install
	$(PY) bench/scan.py
	$(PY) bench/merge.py
	$(PY) bench/ray_read.py
	$(PY) bench/plan.py
	$(PY) bench/spark.py
	$(PY) bench/streaming.py
	$(PY) bench/train.py
	$(PY) bench/object_store.py

clean:
	rm -rf $(VENV) $(WAREHOUSE) .pytest_cache .mypy_cache .ruff_cache
