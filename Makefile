# The commands the README names. Everything installs into ./.venv; nothing global.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
export PIPELINES_DATA_DIR ?= $(CURDIR)/.pipelines-data
export DAGSTER_HOME ?= $(PIPELINES_DATA_DIR)/dagster-home

.PHONY: install run test bench

$(STAMP): pyproject.toml
	$(PYTHON) -c 'import sys; sys.exit("Python 3.11 or 3.12 is needed, found " + sys.version.split()[0]) if sys.version_info[:2] not in ((3, 11), (3, 12)) else None'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# Seed the demo workspace over examples/site (served on 127.0.0.1:8765) and start the
# Dagster UI + daemon on http://127.0.0.1:3000, all on the embedded default.
run: install
	$(BIN)/pipelines-dagster demo

test: install
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# Each prints its figures and exits non-zero when it misses its target.
bench: install
	$(BIN)/python bench/blob_stream.py
	$(BIN)/python bench/crawl_throughput.py
	$(BIN)/python bench/crawl_memory.py
	$(BIN)/python bench/history_query.py
	$(BIN)/python bench/schedule_tick.py
	$(BIN)/python bench/run_overhead.py
