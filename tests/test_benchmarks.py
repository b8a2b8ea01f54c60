"""The benchmark scripts' own bookkeeping (their figures are theirs to measure): the race
against MetaSchedule resumes from its runs file and pools one machine kind; the corpus grows
each kernel's table to its points, once."""
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


def test_a_run_primed_by_the_packaged_model_is_pooled_only_with_runs_primed_by_the_same_one():
    """A `model` run made with another packaged cost model (retrained since) is another tuner's
    run: it is run again; a run of a strategy that does not read the model is pooled whatever
    model was packaged when it ran."""
    run = {"workload": WORKLOAD, "seed": 1, "trials": 16, "machine": race.machine_kind(),
           "latencies": [1e-3] * 16, "walls": [0.1] * 16, "prior": "an older model"}
    runs = [{**run, "config": "model@sketch"}, {**run, "config": CONFIG}]
    assert race.recorded(runs, WORKLOAD, "model@sketch", 1, 16) is None
    assert race.recorded(runs, WORKLOAD, CONFIG, 1, 16) is not None
    runs.append({**run, "config": "model@sketch", "prior": race.packaged_model()})
    assert race.recorded(runs, WORKLOAD, "model@sketch", 1, 16)["prior"] == race.packaged_model()


def test_the_race_refuses_a_workload_the_packaged_model_learned_from_unless_told_it_was_seen():
    seen = "gemm:M=256,N=256,K=256"  # a leaderboard table, in the packaged model's training
    with pytest.raises(SystemExit, match=f"trained on {seen}"):
        race.held_out_check([seen, race.HELD_OUT[0]], allow_seen=False)
    assert race.held_out_check([seen, race.HELD_OUT[0]], allow_seen=True) == {seen}


def test_the_corpus_grows_a_kernel_table_to_its_points_once_and_resumes_where_it_stopped(tmp_path):
    import grow_corpus

    from tensortune.measure.config import MeasureConfig
    from tensortune.measure.measurer import Measurer
    from tensortune.target import make_target

    target = make_target("cpu", 1)
    found = list(grow_corpus.kernels(["conv_block"], target, set()))
    keys = [w.key for _, w in found]
    assert found and len(set(keys)) == len(keys)  # distinct kernels, each once
    task, workload = next((t, w) for t, w in found if "conv2d" in t.name)  # a transpose has one point: skipped
    transpose = next((t, w) for t, w in found if t.name.endswith("-transpose1"))
    config = MeasureConfig(threads=1, repeat=1, min_repeat_ms=1)
    with Measurer(target, config) as measurer:
        assert grow_corpus.grow(*transpose, target, measurer, 3, tmp_path) is None  # nothing to learn from
        assert "+3 points" in grow_corpus.grow(task, workload, target, measurer, 3, tmp_path)
        assert grow_corpus.grow(task, workload, target, measurer, 3, tmp_path) is None  # nothing left to measure
        assert "+2 points" in grow_corpus.grow(task, workload, target, measurer, 5, tmp_path)
    table = grow_corpus.corpus.load_table(task, tmp_path)
    assert len(table.results) == 5 and table.hardware == target.hardware and table.workload == workload.key
    assert [entry["measured"] for entry in table.made_by] == [3, 2]
    assert grow_corpus.complete(tmp_path, target.hardware, 5) == {workload.key}
    assert not grow_corpus.complete(tmp_path, "another machine", 5)
