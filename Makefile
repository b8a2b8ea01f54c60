# `make demo`: set up a local virtual environment and tune a seed workload on this CPU.
# `make test`: set up and run the tests (`make test-fast`: without the slow ones). All are idempotent.
# `make leaderboard`: set up, then replay every strategy over the corpus (benchmarks/leaderboard.py).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast bench leaderboard clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[torch,search,test,agents,cluster]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tensortune tune conv1d-1024 --trials 64 --db tensortune.db

test: $(STAMP)
	$(BIN)/python -m pytest

# the suite without the few tests marked slow (about 4 of its 9 minutes)
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow"

bench: $(STAMP)
	$(BIN)/python benchmarks/seed_cpu.py

leaderboard: $(STAMP)
	$(BIN)/python benchmarks/leaderboard.py

# never the user's records (tensortune.db): they cost hours of tuning
clean:
	rm -rf $(VENV)
