"""MetaSchedule's design space behind our interface, for template and template-less operators."""
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tensortune.points import InvalidPoint, point_key
from tensortune.space import make_space
from tensortune.agents.code_space import trace_json
from tensortune.space.sketch import TraceSpace
from tensortune.workloads import get_workload

from kernels import assert_correct

OPERATORS = Path(__file__).parent / "operators"
CASES = [("gemm", "7,13,5"), ("conv1d", "13,5"), ("dwconv2d", "1,3,7,5,3"), ("dwsep_conv2d", "1,3,7,5,3,2"),
         (f"{OPERATORS}/softmax.py:softmax", "R=6,C=10"), (f"{OPERATORS}/batch_matmul.py:batch_matmul", "2,5,7,3")]


@pytest.fixture(scope="module")
def spaces(cpu_target):
    return {name: make_space("sketch", get_workload(name, shape), cpu_target) for name, shape in CASES}


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_sampled_sketch_points_apply_and_verify(name, spaces, target_spec):
    space = spaces[name]
    rng = random.Random(1)
    for _ in range(6):
        point = space.sample(rng)
        if space.workload.family.reference is None:
            continue  # checked against the naive kernel in the CLI test below
        assert_correct(space.workload, space.apply(point), target_spec, seed=rng.randrange(100))
    assert len(space.encode(point)) == len(space.encode(space.named("default")))


def test_inactive_sketches_do_not_make_new_points(spaces):
    space = spaces["gemm"]
    rng = random.Random(2)
    point = space.sample(rng)
    other = (point["sketch"] + 1) % len(space.traces)
    noise = {k.name: k.sample(rng) for k in space.knobs if k.name.startswith(f"s{other}.")}
    assert point_key(space.canonical(point | noise)) == point_key(point)


def test_tiles_and_compute_locations_are_drawn_as_metaschedule_draws_them(spaces, target_spec):
    """Tiles: the innermost factor uniform up to its cap, each prime's exponent spread over
    the outer parts uniformly among its compositions (for 2**10 over 3 parts, the outermost
    takes all ten 1 time in 66; drawing divisor by divisor gave 1 in 11). Compute locations:
    inlining (-2) and the root (-1) are offered, and the depthwise convolution's padding,
    drawn at every location offered, applies and computes the right result."""
    from tensortune.space.knobs import PerfectTile

    tile, rng = PerfectTile("t", 4096, 4, 4), random.Random(0)
    draws = [tile.sample(rng) for _ in range(6600)]
    assert all(v[0] * v[1] * v[2] * v[3] == 4096 and v[3] <= 4 for v in draws)
    assert {v[3] for v in draws} == {1, 2, 4}
    assert 15 < sum(v[0] == 1024 for v in draws if v[3] == 4) < 60  # 1/66 of ~2200 (1/11: 200)
    space = spaces["dwconv2d"]
    location = next(k for k in space.knobs if k.name.startswith("s0.") and k.name.endswith("ComputeLocation"))
    assert location.options[:2] == (-2, -1)
    point = space.named("default")
    for option in location.options:
        assert_correct(space.workload, space.apply(point | {location.name: option}), target_spec)


def test_wrong_decisions_are_invalid_with_a_reason(spaces):
    space = spaces["gemm"]
    point = space.named("default")
    tile = next(k for k in space.knobs if k.name.startswith("s0.") and k.name.endswith("PerfectTile"))
    with pytest.raises(InvalidPoint, match="multiply to"):
        space.apply(point | {tile.name: (1,) * tile.parts})
    with pytest.raises(InvalidPoint, match="not one of"):
        space.apply(point | {"sketch": 99})


def test_a_trace_replays_to_the_same_kernel(spaces, target_spec):
    space = spaces["conv1d"]
    schedule = space.apply(space.sample(random.Random(3)))
    replay = TraceSpace(space)
    trace = trace_json(schedule, remove_postproc=True)
    assert_correct(space.workload, replay.apply({"trace": trace}), target_spec)


def cli(*args):
    return subprocess.run([sys.executable, "-m", "tensortune", *args], capture_output=True, text=True, timeout=900)


def test_a_user_operator_tunes_end_to_end_on_the_sketch_space(tmp_path):
    """From the CLI, checked against the unscheduled kernel (the file gives no reference)."""
    done = cli("tune", f"{OPERATORS}/batch_matmul.py:batch_matmul", "--shape", "B=2,M=8,N=8,K=4", "--space",
               "sketch", "--trials", "8", "--batch", "4", "--db", str(tmp_path / "t.db"), "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["space"] == "sketch" and summary["trials"] == 8
    assert "unscheduled kernel" in summary["verified_against"]
    assert summary["ms"]["tuned"] > 0 and summary["ms"]["naive"] > 0
    assert summary["ms"]["hand"] is None and summary["not_timed"][0].startswith("hand: invalid: ")  # and why


def test_a_user_operator_with_a_reference_tunes_on_the_sketch_space(tmp_path):
    """In this process (its MetaSchedule set-up is paid already), checked against NumPy."""
    from tensortune.db import Database
    from tensortune.measure.config import MeasureConfig
    from tensortune.target import make_target
    from tensortune.tuning.tuner import TuneConfig, tune

    wl = get_workload(f"{OPERATORS}/softmax.py:softmax", "R=8,C=16")
    summary = tune(wl, make_target("cpu", 2), Database(str(tmp_path / "t.db")),
                   TuneConfig(trials=8, batch=4, space="sketch"), MeasureConfig(threads=2, repeat=3, min_repeat_ms=1))
    assert summary.trials == 8 and summary.best.ok and summary.naive.ok and wl.family.reference is not None


@pytest.mark.slow  # the fast subset skips it: pytest -m 'not slow'
def test_metaschedule_resumes_from_its_own_records_and_never_stores_a_trace_twice(tmp_path):
    """MetaSchedule keeps its records beside the database. A run interrupted after it measured
    (here: MetaSchedule run alone) re-measures those without tuning again, and a finished run
    adds nothing. From the CLI, so that MetaSchedule's own logging cannot spoil the JSON."""
    from tensortune.db import Database, Task
    from tensortune.measure.config import MeasureConfig
    from tensortune.search import metaschedule
    from tensortune.target import make_target
    from tensortune.tuning.tuner import TuneConfig, tune

    db = str(tmp_path / "t.db")
    wl, target = get_workload("gemm", "16,16,16"), make_target("cpu", 2)
    task = Task(wl.key, target.name, target.hardware, "metaschedule-trace")
    metaschedule.run_metaschedule(wl, target, 2, 2, metaschedule.work_dir(db, task), seed=0)
    traces = metaschedule.recorded_traces(metaschedule.work_dir(db, task))
    args = ("tune", "gemm", "--shape", "16,16,16", "--strategy", "metaschedule", "--trials", str(len(traces)),
            "--no-baselines", "--db", db, "--json")
    first = cli(*args)
    assert first.returncode == 0, first.stderr
    summary = json.loads(first.stdout)
    assert summary["space"] == "metaschedule-trace" and summary["ms"]["tuned"] > 0
    assert summary["new_trials"] == len(traces) >= 1 and summary["tuning_s"] == 0  # MetaSchedule did not run again
    again = tune(wl, target, Database(db), TuneConfig(trials=len(traces), strategy="metaschedule"), MeasureConfig())
    assert again.new_trials == 0  # in this process: no second `import tvm`
    records = Database(db).records(task)
    assert sorted(r.point["trace"] for r in records) == sorted(traces)  # each once
    assert all(r.result.ok for r in records)  # re-verified and re-timed by us
    # export (and a model build) apply a stored record in its task's space, this one included
    assert make_space(task.space, wl, target).apply(records[0].point).mod is not None
