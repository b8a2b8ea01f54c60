"""The closed loop on tiny shapes: stores everything, resumes without re-measuring."""
import sqlite3

import pytest

from tensortune.db import Database
from tensortune.measure import MeasureConfig
from tensortune.target import make_target
from tensortune.tuner import TuneConfig, tune
from tensortune.workloads import get_workload

FAST = MeasureConfig(threads=2, repeat=3, min_repeat_ms=1, final_repeat=3, final_min_repeat_ms=1)


class Interrupt(Exception):
    pass


def _stop_after(batches):
    calls = []

    def progress(done, total, best):
        calls.append(done)
        if len(calls) > batches:
            raise Interrupt

    return progress


def test_tune_finds_a_verified_kernel_faster_than_naive(tmp_path):
    wl = get_workload("gemm", "48,64,32")
    db = Database(str(tmp_path / "t.db"))
    summary = tune(wl, make_target("cpu", 2), db, TuneConfig(trials=24, batch=8, seed=1), FAST)
    assert summary.trials == 24 and summary.new_trials == 24
    assert summary.best.ok and summary.naive.ok and summary.hand.ok
    assert summary.best.latency < summary.naive.latency
    assert summary.best_point is not None
    assert len(db.records(summary.task)) == 24


def test_an_interrupted_run_resumes_without_measuring_anything_twice(tmp_path):
    wl = get_workload("conv1d", "40,9")
    path = str(tmp_path / "t.db")
    target = make_target("cpu", 2)
    config = TuneConfig(trials=20, batch=6, seed=2, strategy="evolutionary")
    with pytest.raises(Interrupt):
        tune(wl, target, Database(path), config, FAST, progress=_stop_after(2))
    before = sqlite3.connect(path).execute("SELECT count(*) FROM records").fetchone()[0]
    assert before == 12  # two whole batches landed, nothing of the third
    summary = tune(wl, target, Database(path), config, FAST)
    assert summary.new_trials == 8 and summary.trials == 20
    points = [r[0] for r in sqlite3.connect(path).execute("SELECT point FROM records WHERE label='search'")]
    assert len(points) == 20 and len(set(points)) == 20
