"""The benchmark scripts' own bookkeeping (their figures are theirs to measure): the race
against MetaSchedule resumes from its runs file and pools one machine kind."""
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import vs_metaschedule as race  # noqa: E402  (a script of benchmarks/, found by the path above)

WORKLOAD, CONFIG = "gemm:M=16,N=16,K=16", "random@cpu-template"


def never_run(*_):
    """A test double for a tuning run: a recorded run must not run again."""
    pytest.fail("a run already in the runs file ran again")


def test_the_race_appends_each_run_as_it_ends_and_resumes_without_running_it_again(tmp_path, monkeypatch):
    runs = tmp_path / "runs.jsonl"
    first = race.compare(WORKLOAD, [CONFIG], {CONFIG: 16}, 1, str(runs))
    lines = runs.read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["seed"] for r in records] == [1] and all(len(r["latencies"]) == 16 for r in records)
    assert {r["machine"] for r in records} == {race.machine_kind()} and all(r["revision"] for r in records)

    monkeypatch.setattr(race, "run", never_run)
    again = race.compare(WORKLOAD, [CONFIG], {CONFIG: 16}, 1, str(runs))
    assert again["summary"] == first["summary"] and runs.read_text().splitlines() == lines

    # runs of another machine kind are not pooled with this one's: they would be run here again
    runs.write_text("".join(json.dumps({**r, "machine": "another CPU, 2 threads"}) + "\n" for r in records))
    with pytest.raises(pytest.fail.Exception, match="ran again"):
        race.compare(WORKLOAD, [CONFIG], {CONFIG: 16}, 1, str(runs))
