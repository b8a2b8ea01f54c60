"""One contract, every evaluator (measure/evaluator.py): the local Measurer, the replay table
over it, and the batch path (kernels carried in a batch folder to the runtime-only runner,
run here on CPU artifacts). A weaker backend cannot hide: each must refuse the same wrong
kernel with the same check layer, keep the order, honour the cutoff and the final timing."""
import pytest

from tensortune.db import Database, Task
from tensortune.measure import runner, tasks
from tensortune.measure.batch import BatchEvaluator
from tensortune.measure.config import MeasureConfig, Timing
from tensortune.measure.measurer import Measurer
from tensortune.measure.replay import ReplayTable
from tensortune.result import Status
from tensortune.target import make_target

from mutants import MutantSpace, clamped_gemm

QUICK = MeasureConfig(threads=2, repeat=3, min_repeat_ms=1, final_repeat=4, final_min_repeat_ms=1)
NAIVE, CLAMPED, INVALID = {"kernel": "naive"}, {"kernel": "clamped"}, {"kernel": "invalid"}


def _local(target):
    measurer = Measurer(target, QUICK)
    return measurer, measurer


def _replay(target):
    measurer = Measurer(target, QUICK)
    return ReplayTable(Database(":memory:"), Task("gemm", "cpu", target.hardware, "mutants"), measurer), measurer


def _batch(target):
    batch = BatchEvaluator(target, QUICK)
    return batch, batch


@pytest.fixture(params=[_local, _replay, _batch], ids=["local", "replay", "batch"], scope="module")
def evaluator(request):
    """(the evaluator, what to close when done)"""
    made, workers = request.param(make_target("cpu", 2))
    yield made
    workers.close()


@pytest.fixture(scope="module")
def space():
    return MutantSpace(make_target("cpu", 2))


def test_one_answer_per_point_in_order_and_every_check_layer(evaluator, space):
    results = evaluator.measure(space, [NAIVE, INVALID, CLAMPED, NAIVE])
    assert [r.status for r in results] == [Status.OK, Status.INVALID, Status.WRONG, Status.OK]
    assert results[0].runs and results[0].threads == 2 and results[0].latency > 0
    assert "invalid on purpose" in results[1].reason
    # the timed draw cannot see the clamp; the large (or exact) draw does, on every backend
    assert results[2].reason.startswith(("large draw", "exact-")), results[2].reason
    assert not results[2].runs  # a wrong kernel is never timed


def test_the_cutoff_and_the_final_timing(evaluator, space):
    (cut,) = evaluator.measure(space, [NAIVE], cutoff_s=1e-12)
    (final,) = evaluator.measure(space, [NAIVE], final=True)
    if isinstance(evaluator, ReplayTable):  # answers come from the table: the first measurement of each point
        assert cut == final
        return
    assert cut.ok and len(cut.runs) == 1 and "timed once" in cut.reason
    assert final.ok and len(final.runs) == QUICK.final_repeat


def test_the_clamped_kernel_passes_the_timed_draw_alone(space, tmp_path):
    """What makes the contract test above worth having: checked on one draw, as the batch
    runner once did, the clamped kernel counts as correct."""
    path = str(tmp_path / "clamped.so")
    import tvm

    tvm.compile(clamped_gemm(**space.workload.kwargs), target={"kind": "llvm"}).export_library(path)
    full = tasks.all_checks(space.workload.ident, 0)
    one_draw = runner.Case(full.inputs, full.expected, full.tolerance)
    lib = runner.load(path, "cpu")
    assert runner.run_kernel(lib, "cpu", one_draw, Timing(1, 1))["status"] == "ok"
    assert runner.run_kernel(lib, "cpu", full, Timing(1, 1))["status"] == "wrong"
