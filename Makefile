# The commands the README names. Everything installs into ./.venv; nothing global.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Every package at the version CI tested (`make lock` refreshes it from pyproject.toml).
CONSTRAINTS := constraints.txt
RUN_STAMP := $(VENV)/.installed-run-stamp
STAMP := $(VENV)/.installed-stamp
DEV_STAMP := $(VENV)/.installed-dev-stamp
# The venv's own dg, told it runs in that venv (it warns otherwise, as if another one were active).
DG := VIRTUAL_ENV=$(abspath $(VENV)) $(BIN)/dg
export PIPELINES_DATA_DIR ?= $(CURDIR)/.pipelines-data
export DAGSTER_HOME ?= $(PIPELINES_DATA_DIR)/dagster-home

.PHONY: browser install install-dev lock run dev check-defs lint test bench bench-smoke

# What running needs and no more: `make run` on a fresh clone installs no test tools.
$(RUN_STAMP): pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -c 'import sys; sys.exit("Python 3.11 or 3.12 is needed, found " + sys.version.split()[0]) if sys.version_info[:2] not in ((3, 11), (3, 12)) else None'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e .
	touch $(RUN_STAMP)

# The `test` extra on top, for the tests, lint and benches.
$(STAMP): $(RUN_STAMP)
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e '.[test]'
	touch $(STAMP)

# Chromium renders the pages that need JavaScript (a connector's render setting); Playwright drives this system
# package and never downloads a browser. Installed when absent, as root, from the system's packages.
CHROMIUM ?= /usr/bin/chromium
browser:
	@if [ -x $(CHROMIUM) ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing Chromium (apt-get install chromium) to render pages that need JavaScript"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else \
		echo "no Chromium at $(CHROMIUM): install your system's chromium package (as root) to render pages that" \
			"need JavaScript; without it such pages fail saying so, and the render tests skip (fail under CI=true)" >&2; \
	fi

install: $(STAMP) browser

# The `dev` extra (dg) on top of what `install` puts in.
$(DEV_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e '.[test,dev]'
	touch $(DEV_STAMP)

install-dev: $(DEV_STAMP)

# Resolve pyproject.toml afresh in a scratch venv and pin every package it brings into $(CONSTRAINTS).
lock:
	rm -rf .lock-venv
	$(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip install --quiet --upgrade pip
	.lock-venv/bin/python -m pip install --quiet -e '.[test,dev]'
	{ echo "# pip constraints: what \`make install\` and CI install. Refresh with \`make lock\`."; \
	  .lock-venv/bin/python -m pip freeze --exclude-editable; } > $(CONSTRAINTS)
	rm -rf .lock-venv

# The project's instance starts as the embedded default; an existing dagster.yaml is left as it is.
$(DAGSTER_HOME)/dagster.yaml:
	mkdir -p $(DAGSTER_HOME)
	cp deploy/dagster.yaml $@

# Seed the demo workspace over examples/site (served on 127.0.0.1:8765) and start the
# Dagster UI + daemon on http://127.0.0.1:3000, all on the embedded default.
# `make run UI_PORT=3100 SITE_PORT=8800` (or $$PIPELINES_UI_PORT, $$PIPELINES_SITE_PORT) moves them.
run: $(RUN_STAMP)
	$(BIN)/pipelines-dagster demo $(if $(UI_PORT),--ui-port $(UI_PORT)) $(if $(SITE_PORT),--site-port $(SITE_PORT))

# `dg dev` (UI and daemon on http://127.0.0.1:3000) on the project's DAGSTER_HOME, exported above,
# over the embedded default's app database (the sensors read it from their first tick).
dev: install-dev $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/pipelines-dagster db upgrade
	$(DG) dev

# What dg loads of the project, checked and listed; CI runs it before the tests.
check-defs: install-dev $(DAGSTER_HOME)/dagster.yaml
	$(DG) check defs
	$(DG) list defs

# Lint, format check, type check (strict on core/) and the import contracts in pyproject.toml (what
# may import what); CI runs it before the tests.
lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# Test files run on PYTEST_WORKERS processes (each file on one, so a file's deployment is started
# once); most of a test's time is spent waiting on a real service, so more workers than cores pays.
PYTEST_WORKERS ?= 3
test: install
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# Each prints its figures and exits non-zero when it misses its target.
bench: install
	$(BIN)/python bench/blob_stream.py
	$(BIN)/python bench/crawl_throughput.py
	$(BIN)/python bench/crawl_throughput.py --mode site
	$(BIN)/python bench/crawl_memory.py
	$(BIN)/python bench/crawl_memory.py --mode site
	$(BIN)/python bench/history_query.py
	$(BIN)/python bench/schedule_tick.py
	$(BIN)/python bench/run_overhead.py
	$(BIN)/python bench/scale.py
	$(BIN)/python bench/notify_load.py
	$(BIN)/python bench/hostile.py
	$(BIN)/python bench/worker_memory.py
	$(BIN)/python bench/render_cost.py
	$(BIN)/python bench/pdf_parse.py

# Every bench at a tiny size of the same code path: its figures printed, its speed and memory targets not
# judged; each fails only when something did not work (a crash, a failed run, a wrong count). CI runs it.
# scale.py's smoke (three deployments one after another, much of it waiting on their daemons' ticks and on a
# schedule's minute) runs beside the others, which it would otherwise add minutes to; each part's lines are
# printed together when it ends.
bench-smoke: install
	$(MAKE) --no-print-directory -j2 --output-sync=target bench-smoke-scale bench-smoke-others

.PHONY: bench-smoke-scale bench-smoke-others
bench-smoke-scale:
	$(BIN)/python bench/scale.py --smoke

bench-smoke-others:
	$(BIN)/python bench/blob_stream.py --smoke
	$(BIN)/python bench/crawl_throughput.py --smoke
	$(BIN)/python bench/crawl_throughput.py --mode site --smoke
	$(BIN)/python bench/crawl_memory.py --smoke
	$(BIN)/python bench/crawl_memory.py --mode site --smoke
	$(BIN)/python bench/history_query.py --smoke
	$(BIN)/python bench/schedule_tick.py --smoke
	$(BIN)/python bench/run_overhead.py --smoke
	$(BIN)/python bench/notify_load.py --smoke
	$(BIN)/python bench/hostile.py --smoke
	$(BIN)/python bench/worker_memory.py --smoke
	$(BIN)/python bench/render_cost.py --smoke
	$(BIN)/python bench/pdf_parse.py --smoke
