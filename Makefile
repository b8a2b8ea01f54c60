# `make demo`: set up a local virtual environment and tune a seed workload on this CPU.
# `make test`: set up and run the tests (`make test-fast`: without the slow ones). All are idempotent.
# `make leaderboard`: set up, then replay every strategy over the corpus (benchmarks/leaderboard.py).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast browser bench leaderboard docs clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[torch,search,test,agents,cluster,report,docs]"
	touch $(STAMP)

# the HTML report's tests open it in a real headless browser: Debian's chromium, installed here
# as root where apt-get exists (Debian's archive keeps one version per release, so it is not
# pinned); elsewhere those tests skip and say how to get it
browser:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; } || \
	  echo "no chromium and no way to install it here: the report's browser tests will skip"

# the docs site from docs/ and the docstrings, into site/ (open site/index.html)
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

demo: $(STAMP)
	$(BIN)/tensortune tune conv1d-1024 --trials 64 --db tensortune.db

# two pytest workers, a test file each at a time (a file's module fixtures, such as the one
# local Ray cluster, run once), the longest files first (tests/conftest.py: LONGEST_FIRST, taken
# in that order with --no-loadscope-reorder; xdist would otherwise start the files with most
# tests first and leave the Ray cluster's file to run alone at the end). Each worker's kernel
# timings take turns with its own processes only (tests/conftest.py gives each its own lock,
# measure/cores.py): no test depends on which of two timings wins (the timings that choose a
# build are injected), so none needs the machine to itself. On a 2-core AMD EPYC on 2026-12-07:
# 630 s with one lock for both workers and xdist's order, 514 s so (a third worker: no faster);
# 511 s in a fresh clone (fresh-check) once the Ray and MetaSchedule tests were trimmed.
PYTEST := $(BIN)/python -m pytest
PARALLEL := -n 2 --dist loadfile --no-loadscope-reorder

test: $(STAMP) browser
	$(PYTEST) $(PARALLEL)

# the suite without the few tests marked slow (about half its time)
test-fast: $(STAMP) browser
	$(PYTEST) $(PARALLEL) -m "not slow"

bench: $(STAMP)
	$(BIN)/python benchmarks/seed_cpu.py

leaderboard: $(STAMP)
	$(BIN)/python benchmarks/leaderboard.py

# never the user's records (tensortune.db): they cost hours of tuning
clean:
	rm -rf $(VENV)
