"""Build here, run elsewhere: a batch exported, run by the runtime-only runner (on CPU
artifacts: the same runner a GPU host uses), and imported into the records."""
import json
import os
import subprocess
import sys

import pytest
import tvm
from tvm import te

from tensortune.tuning.batch import export_batch, import_batch
from tensortune.db import Database
from tensortune.errors import UserError
from tensortune.measure.config import MeasureConfig
from tensortune.points import point_key
from tensortune.target import make_target
from tensortune.workloads import get_workload

QUICK = MeasureConfig(threads=2, final_repeat=3, final_min_repeat_ms=1)
WORKLOADS = [get_workload("gemm", "M=16,N=24,K=8"), get_workload("conv1d", "M=40,N=7")]


def run_batch(batch, *extra):
    env = dict(os.environ, TVM_USE_RUNTIME_LIB="1", TVM_NUM_THREADS="2")  # TVM's runtime only: no compiler
    return subprocess.run([sys.executable, str(batch / "runner.py"), str(batch), *extra], env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    out = tmp_path_factory.mktemp("batch") / "b"
    export_batch(WORKLOADS, make_target("cpu", 2), out, count=4, config=QUICK)
    return out


def test_export_writes_everything_the_runner_needs(batch):
    manifest = json.loads((batch / "manifest.json").read_text())
    assert {c["label"] for c in manifest["candidates"]} == {"naive", "hand", "search"}
    assert len(manifest["candidates"]) + len(manifest["failed"]) == 2 * 6
    assert (batch / "runner.py").is_file() and (batch / "vendor.py").is_file()
    assert all((batch / c["artifact"]).is_file() for c in manifest["candidates"])


def test_the_runtime_only_runner_then_import_stores_every_kernel(batch, tmp_path):
    done = run_batch(batch)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(l) for l in (batch / "results.jsonl").read_text().splitlines()]
    manifest = json.loads((batch / "manifest.json").read_text())
    assert {l["id"] for l in lines} == {c["id"] for c in manifest["candidates"]} | {"baselines"}
    assert all(l["status"] == "ok" for l in lines if l["id"] != "baselines")
    baselines = lines[-1]
    assert set(baselines["torch"]) == set(manifest["cases"])
    assert all(b["wrong"] is None for b in baselines["torch"].values())  # torch computes the same thing

    db = Database(str(tmp_path / "t.db"))
    summaries = import_batch(batch, db)
    assert [s["workload"] for s in summaries] == [w.key for w in WORKLOADS]
    for s in summaries:  # the summary's best is the database's: the fastest verified kernel, baselines included
        (task,) = db.tasks(s["workload"])
        assert s["correct"] == 6 and s["torch"] > 0 and s["best"] == db.best(task).result.latency
    tasks = db.tasks(WORKLOADS[0].key)
    assert len(tasks) == 1 and len(db.records(tasks[0], ("naive", "hand", "search"))) == 6
    with pytest.raises(UserError, match="already imported"):
        import_batch(batch, db)


def _rogue_gemm(path, kind, M=16, N=24, K=8):
    """Same signature as the batch's GEMM; 'crash' reads far outside A, 'hang' loops ~forever."""
    A, B = te.placeholder((M, K), name="A"), te.placeholder((K, N), name="B")
    if kind == "crash":
        C = te.compute((M, N), lambda i, j: A[i * 50_000_000 + 40_000_000, j % K] + B[0, j], name="C")
    else:  # 2^32 terms per output (one reduction axis that long makes TVM's compiler run out of memory)
        k1, k2 = te.reduce_axis((0, 1 << 16), name="k1"), te.reduce_axis((0, 1 << 16), name="k2")
        C = te.compute((M, N), lambda i, j: te.sum(A[i, k1 % K] * B[k2 % K, j], axis=[k1, k2]), name="C")
    tvm.compile(te.create_prim_func([A, B, C]), target={"kind": "llvm"}).export_library(path)


def test_a_crashing_or_hanging_kernel_costs_only_itself(tmp_path):
    out = tmp_path / "rogue"
    export_batch([get_workload("gemm", "M=16,N=24,K=8")], make_target("cpu", 2), out, count=2, config=QUICK)
    manifest = json.loads((out / "manifest.json").read_text())
    ids = [c["id"] for c in manifest["candidates"]]
    _rogue_gemm(str(out / manifest["candidates"][1]["artifact"]), "crash")
    _rogue_gemm(str(out / manifest["candidates"][2]["artifact"]), "hang")
    done = run_batch(out, "--timeout", "3")
    assert done.returncode == 0, done.stderr
    status = {l["id"]: l.get("status") for l in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert [status[i] for i in ids] == ["ok", "run_crash", "run_timeout", "ok"]
    reasons = {l["id"]: l.get("reason") for l in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert "SIGSEGV" in reasons[ids[1]] and "within 3 s" in reasons[ids[2]]


def test_import_of_an_unfinished_batch_says_what_to_do(tmp_path):
    out = tmp_path / "b"
    export_batch([get_workload("gemm", "M=8,N=8,K=8")], make_target("cpu", 2), out, count=1, config=QUICK)
    with pytest.raises(UserError, match="run it first"):
        import_batch(out, Database(str(tmp_path / "t.db")))
    (out / "results.jsonl").write_text('{"id": "baselines"}\n')
    with pytest.raises(UserError, match="have no result"):
        import_batch(out, Database(str(tmp_path / "t.db")))


def test_a_gpu_batch_tries_every_caching_choice_at_the_hand_tiles():
    from tensortune.tuning.batch import choose_points
    from tensortune.space import make_space

    space = make_space("cuda-template", get_workload("gemm-1024"), make_target("cuda", 1))
    chosen = choose_points(space, 40, seed=0)
    hand = chosen[1][1]
    assert [label for label, _ in chosen[:2]] == ["naive", "hand"] and len(chosen) == 42
    tiles = {k: v for k, v in hand.items() if k.startswith("tile.")}
    scopes = {(p["cache.A"], p["cache.B"]) for _, p in chosen if all(p[k] == v for k, v in tiles.items())}
    assert {("shared", "shared"), ("local", "local"), ("shared", "local"), ("none", "none")} <= scopes
    assert len({point_key(p) for _, p in chosen}) == len(chosen)


def test_a_wrong_kernel_through_export_run_import_is_caught_by_the_layer_that_catches_it_here(tmp_path):
    """A kernel that passes the timed draw (tests/mutants.py: outputs clamped at 10) is put in
    a batch in place of a candidate; run by the runtime-only runner and imported, its record is
    `wrong`, refused by the same check layer as this machine's own runner refuses it."""
    from tensortune.measure import tasks
    from tensortune.measure.config import Timing
    from tensortune.measure import runner as local_runner

    from mutants import SHAPE, clamped_gemm

    wl = get_workload("gemm", ",".join(f"{k}={v}" for k, v in SHAPE.items()))
    out = tmp_path / "b"
    export_batch([wl], make_target("cpu", 2), out, count=1, config=QUICK)
    manifest = json.loads((out / "manifest.json").read_text())
    victim = manifest["candidates"][-1]
    tvm.compile(clamped_gemm(**SHAPE), target={"kind": "llvm"}).export_library(str(out / victim["artifact"]))
    assert run_batch(out).returncode == 0
    db = Database(str(tmp_path / "t.db"))
    import_batch(out, db)
    (task,) = db.tasks(wl.key)
    (record,) = [r for r in db.records(task, ("search",)) if point_key(r.point) == point_key(victim["point"])]
    here = local_runner.run_kernel(local_runner.load(str(out / victim["artifact"]), "cpu"),
                                   "cpu", tasks.all_checks(wl.ident, QUICK.seed), Timing(1, 1))
    assert record.result.status == "wrong" and here["status"] == "wrong"
    layer = record.result.reason.split(":")[0]
    assert layer.endswith("draw") and layer != "uniform draw" and here["reason"].split(":")[0] == layer


def test_a_large_case_travels_as_a_recipe_and_is_drawn_the_same_there(tmp_path):
    """A case too big to carry (inputs and output over batch.RECIPE_ABOVE_BYTES) is drawn on
    the host from its recipe, with torch's float64 result as the expected output: the same
    inputs, expected outputs and tolerances as here, and kernels checked and timed on them."""
    from tensortune.measure import batch as batch_module, checks, runner, tasks

    wl = get_workload("gemm", "M=512,N=512,K=512")
    assert wl.bytes > batch_module.RECIPE_ABOVE_BYTES
    out = tmp_path / "b"
    export_batch([wl], make_target("cpu", 2), out, count=1, config=QUICK)
    manifest = json.loads((out / "manifest.json").read_text())
    (spec,) = manifest["cases"].values()
    assert "recipe" in spec and not list((out / "cases").iterdir())

    recipe = checks.Recipe.from_json(spec["recipe"])
    there = checks.make_case(recipe, runner._vendor_reference(out, spec, recipe.out_dtype, "cpu"))
    here = tasks.all_checks(wl.ident, recipe.seed)
    assert here.tolerance == there.tolerance and len(here.draws) == len(there.draws) == 5
    for (name, ins, expected, tol, bound), (name2, ins2, expected2, tol2, bound2) in zip(here.draws, there.draws):
        assert name == name2 and tol == tol2 and all((a == b).all() for a, b in zip(ins, ins2))
        assert abs(expected.astype(float) - expected2).max() <= 1e-6 * abs(expected).max()
    done = run_batch(out, "--no-baselines")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(l) for l in (out / "results.jsonl").read_text().splitlines()]
    assert len(lines) == len(manifest["candidates"]) == 3 and all(l["status"] == "ok" for l in lines), lines
