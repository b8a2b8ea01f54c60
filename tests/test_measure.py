"""Isolation, verification and timing on real kernels."""
import os
import signal
import time

import numpy as np
import pytest
import tvm
from tvm import te

from tensortune.measure.config import MeasureConfig
from tensortune.measure.measurer import Measurer
from tensortune.measure import checks, runner, tasks
from tensortune.measure.config import Timing
from tensortune.measure.pool import WorkerPool, start_clock
from tensortune.space import make_space
from tensortune.target import Target
from tensortune.workloads import get_workload


def _work(task):
    if task == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if task == "hang":
        time.sleep(60)
    if task == "raise":
        raise ValueError("bad input")
    return task * 2


def test_a_crash_or_hang_costs_one_task_only():
    with WorkerPool(2, _work) as pool:
        outcomes = pool.map([1, "crash", 2, "hang", "raise", 3], timeout_s=2)
    assert [o.value for o in outcomes if o.ok] == [2, 4, 6]
    assert [o.kind for o in outcomes if not o.ok] == ["crash", "timeout", "error"]
    assert "bad input" in outcomes[4].reason


def _slow_start(task):
    time.sleep(task)  # set-up (a fresh worker importing, inputs made): not the task's time
    start_clock()
    time.sleep(0.2)
    return "done"


def test_a_time_limit_counts_from_when_the_work_starts():
    """A fresh worker's set-up must not count against the task: on a slow machine it made
    every kernel of a batch time out."""
    with WorkerPool(1, _slow_start, self_timed=True) as pool:
        outcomes = pool.map([1.5, 0.0], timeout_s=1.0)
    assert [o.value for o in outcomes] == ["done", "done"]


def _wrong_gemm(path, target_spec, M=8, N=8, K=8):
    """A GEMM that forgets the last term of every sum: almost right, and must be caught."""
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K - 1), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    tvm.compile(te.create_prim_func([A, B, C]), target=tvm.target.Target(target_spec)).export_library(path)


def test_verification_catches_a_wrong_kernel(tmp_path, target_spec):
    path = str(tmp_path / "wrong.so")
    _wrong_gemm(path, target_spec)
    result = tasks.run(tasks.RunTask(get_workload("gemm", "8,8,8").ident, path, Timing(3, 1), seed=0))
    assert result["status"] == "wrong" and "exceeds" in result["reason"]


def test_measurer_verifies_times_and_records_every_outcome(cpu_target):
    wl = get_workload("gemm", "16,16,16")
    space = make_space("cpu-template", wl)
    good = space.named("hand")
    broken = good | {"tile.i": (3, 3, 3)}  # does not multiply to 16
    with Measurer(cpu_target, MeasureConfig(threads=2, repeat=3, min_repeat_ms=1)) as m:
        ok, bad = m.measure(space, [good, broken])
    assert ok.ok and len(ok.runs) >= 3 and ok.threads == 2 and ok.latency > 0 and ok.build_s > 0
    assert bad.status == "invalid" and "multiply to 16" in bad.reason and bad.latency == float("inf")


def test_a_point_measured_again_is_not_compiled_again(cpu_target):
    """The final re-timing of the best reuses their libraries; only correct ones are kept."""
    space = make_space("cpu-template", get_workload("gemm", "16,16,16"))
    hand, naive = space.named("hand"), space.named("naive")
    with Measurer(cpu_target, MeasureConfig(threads=2, repeat=3, min_repeat_ms=1)) as m:
        (first,) = m.measure(space, [hand])
        libraries = set(os.listdir(m.tmp.name))
        again, other = m.measure(space, [hand, naive], final=True)
        assert len(libraries) == 1 and len(os.listdir(m.tmp.name)) == 2
    assert first.ok and again.ok and other.ok and again.build_s == first.build_s


def test_a_hopeless_candidate_is_timed_once(cpu_target):
    wl = get_workload("gemm", "16,16,16")
    space = make_space("cpu-template", wl)
    with Measurer(cpu_target, MeasureConfig(threads=2, repeat=5, min_repeat_ms=1)) as m:
        (slow,) = m.measure(space, [space.named("naive")], cutoff_s=1e-12)
    assert slow.ok and len(slow.runs) == 1 and "timed once" in slow.reason


def test_verify_bounds_the_error_relative_to_the_largest_expected_element():
    expected = np.array([1.0, -4.0, 2.0], np.float32)
    error, why = runner.verify(expected + np.float32([0, 0, 0.002]), expected, 1e-3)
    assert error == pytest.approx(0.0005, rel=1e-3) and why is None
    error, why = runner.verify(expected + np.float32([0, 0, 0.008]), expected, 1e-3)
    assert error == pytest.approx(0.002, rel=1e-3) and "exceeds" in why


class ClipAfterSubtract:
    """Test double of a workload (only what tasks.expected_output reads): a batch-norm-like
    subtraction after a product sum, clipped to [0, 6] as ReLU6 does, so that large inputs
    leave small outputs carrying the rounding of large sums."""

    def io_specs(self):
        return [((64, 9), "float32"), ((9,), "float32"), ((64,), "float32")], ((64,), "float32")

    def reference(self, a, w, mean):
        return np.clip(a @ w - mean, 0.0, 6.0)


def test_an_ill_conditioned_element_is_bounded_by_how_far_rounded_inputs_move_it():
    """A correct float32 kernel that sums in another order fails the plain bound on large
    inputs (its error is the sums' rounding, measured against outputs of at most 6) but
    passes the conditioned bound; a wrong one (an element from its neighbour) fails both."""
    wl, rng = ClipAfterSubtract(), np.random.default_rng(0)
    a, w = rng.uniform(-44, 44, (64, 9)).astype(np.float32), rng.uniform(-44, 44, 9).astype(np.float32)
    mean = (a.astype(np.float64) @ w - rng.uniform(-1, 7, 64)).astype(np.float32)  # outputs near [0, 6]
    expected = tasks.expected_output(wl, [a, w, mean])
    reordered = np.clip(sum(a[:, k] * w[k] for k in reversed(range(9))) - mean, 0, 6).astype(np.float32)
    tolerance = tasks.tolerance("float32", 9)
    bound = checks.error_bound(lambda inputs: tasks.expected_output(wl, inputs), [a, w, mean], expected,
                               polynomial=False, tolerance=tolerance)
    assert runner.verify(reordered, expected, tolerance)[1] is not None  # the plain bound rejects it
    assert runner.verify(reordered, expected, tolerance, bound)[1] is None
    shifted = reordered.copy()
    shifted[5] = reordered[6] if reordered[6] != reordered[5] else reordered[5] + 1
    assert runner.verify(shifted, expected, tolerance, bound)[1] is not None


def test_verify_counts_equal_infinities_as_exact_and_an_unwritten_element_as_wrong():
    expected = np.array([-np.inf, 1.0, 3.0], np.float32)
    assert runner.verify(expected.copy(), expected, 0.0) == (0.0, None)
    unwritten = expected.copy()
    unwritten[2] = runner.unwritten((1,), "float32")[0]
    error, why = runner.verify(unwritten, expected, 1e-3)
    assert error == np.inf and why is not None


def test_verify_compares_integers_exactly():
    expected = np.array([1, 2, 3], np.int32)
    assert runner.verify(expected.copy(), expected, 0.0)[1] is None
    assert runner.verify(np.array([1, 2, 4], np.int32), expected, 0.0)[1] is not None


OPERATOR = '''from tvm import te
def double(N):
    a = te.placeholder((N,), name="a")
    return [a, te.compute((N,), lambda i: a[i] * 2.0, name="out")]
def third(N):  # not a polynomial: the exact layer does not apply
    a = te.placeholder((N,), name="a")
    return [a, te.compute((N,), lambda i: a[i] / 3.0, name="out")]
'''


def _script_kernel(tmp_path, body: str) -> str:
    """A hand-written TVMScript kernel `main(a, out)` over 8 floats, compiled: test doubles of
    wrong kernels that TE cannot express."""
    path = str(tmp_path / f"k{len(list(tmp_path.iterdir()))}.so")
    text = ("@T.prim_func\n"
            "def main(a: T.Buffer((8,), \"float32\"), out: T.Buffer((8,), \"float32\")):\n" + body)
    tvm.compile(tvm.script.from_source(text), target={"kind": "llvm"}).export_library(path)
    return path


@pytest.mark.parametrize("op,body,caught", [
    ("double", "    for i in range(9):\n        out[i] = a[T.min(i, 7)] * T.float32(2)\n", "wrote outside its output"),
    ("double", "    for i in range(8):\n        out[i] = a[i] * T.float32(2)\n        a[i] = T.float32(0)\n",
     "wrote into an input"),
    ("double", "    for i in range(8):\n        out[i] = a[i] * T.float32(2.000001)\n", "exact-1 draw"),
    ("third", "    for i in range(8):\n        out[i] = T.min(a[i] / T.float32(3), T.float32(10))\n", "large draw"),
    ("third", "    for i in range(8):\n        out[i] = T.if_then_else(a[i] * a[i] < T.float32(1e-4), "
              "T.float32(0), a[i] / T.float32(3))\n", "small draw"),
])
def test_each_layer_catches_what_the_timed_draw_alone_would_pass(tmp_path, op, body, caught):
    """Each wrong kernel matches the reference on the timed draw (or writes where no check of
    the output looks); its layer catches it: a clamp shows on large values, a flush to zero
    on small ones."""
    (tmp_path / "ops").mkdir()
    (tmp_path / "ops" / "ops.py").write_text(OPERATOR)
    wl = get_workload(f"{tmp_path / 'ops' / 'ops.py'}:{op}", "N=8")
    result = tasks.run(tasks.RunTask(wl.ident, _script_kernel(tmp_path, body), Timing(3, 1), seed=0))
    assert result["status"] == "wrong" and caught in result["reason"]


def test_the_exact_layer_applies_to_sums_of_products_only():
    from tensortune.measure.checks import exact_applies, exact_magnitude

    assert exact_applies(get_workload("gemm", "8,8,8").prim_func()) is None
    assert exact_applies(get_workload("conv1d", "40,9").prim_func()) is None
    softmax = get_workload(f"{os.path.dirname(__file__)}/operators/softmax.py:softmax", "R=4,C=8").prim_func()
    assert exact_applies(softmax) is not None
    assert exact_magnitude("float32", 1024) ** 2 * 1024 < 2 ** 24 and exact_magnitude("float16", 4096) == 0
    assert exact_magnitude("float32", 45, degree=3) == 45  # 45 terms of 45^3 fit in 2^22, of 46^3 do not


def test_the_exact_draws_of_a_chained_reduction_are_exact(cpu_target):
    """A depthwise then pointwise conv sums 9 x C products of three inputs: its exact draws are
    sized for that (sized for one reduction of two, no kernel, the naive one included, passed)."""
    space = make_space("cpu-template", get_workload("dwsep_conv2d", "1,3,8,8,3,4"))
    with Measurer(cpu_target, MeasureConfig(threads=2, repeat=1, min_repeat_ms=1)) as m:
        results = m.measure(space, [space.named("naive"), space.named("hand")])
    assert all(r.ok for r in results), [r.reason for r in results]
    draws = tasks.all_checks(space.workload.ident, 0).draws
    assert [name for name, *_ in draws if name.startswith("exact")] == ["exact-1", "exact-2"]


@pytest.mark.parametrize("op", ["matmul_f16", "matmul_bf16", "matmul_i8"])
def test_each_dtype_is_checked_and_an_all_zeros_output_is_wrong(tmp_path, op):
    """float16 at K=512, where 4 eps K exceeds 1 and an uncapped bound let zeros through the
    timed draw (which now catches them, before any other layer); bfloat16 (which NumPy
    lacks); int8 summed in int32, compared exactly."""
    wl = get_workload(f"{os.path.dirname(__file__)}/operators/matmul_dtypes.py:{op}", "M=8,N=8,K=512")
    (a_spec, b_spec), (out_shape, out_dtype) = wl.io_specs()
    a, b = te.placeholder(a_spec[0], a_spec[1], name="a"), te.placeholder(b_spec[0], b_spec[1], name="b")
    zeros = te.compute(out_shape, lambda i, j: tvm.tirx.const(0, out_dtype), name="c")
    kernels = {"correct": wl.prim_func(), "zeros": te.create_prim_func([a, b, zeros])}
    status = {}
    for name, func in kernels.items():
        path = str(tmp_path / f"{name}.so")
        tvm.compile(func, target={"kind": "llvm"}).export_library(path)
        status[name] = tasks.run(tasks.RunTask(wl.ident, path, Timing(3, 1), seed=0))
    assert {name: s["status"] for name, s in status.items()} == {"correct": "ok", "zeros": "wrong"}
    assert "draw:" not in status["zeros"]["reason"]  # the timed draw caught it, not a later layer


class MemorisingSpace:
    """A test double for a search space: its one point is a kernel that has memorised the
    outputs of every input draw of the given seeds, and outputs zeros for any other input
    (what a kernel written to pass one fixed test would do)."""

    name = "memorising"

    def __init__(self, workload, seeds):
        self.workload = workload
        self.memo = []
        for seed in seeds:
            case = tasks.all_checks(workload.ident, seed)
            self.memo.append((case.inputs, case.expected))
            self.memo += [(draw, out) for _, draw, out, _, _ in case.draws]

    def apply(self, point):
        from tvm import s_tir, tirx

        ins, (shape, dtype) = self.workload.io_specs()
        placeholders = [te.placeholder(s, d, name=f"in{n}") for n, (s, d) in enumerate(ins)]

        def value(i, j):
            out = tirx.const(0, dtype)
            for inputs, expected in self.memo:
                same = [placeholders[n][p] == tirx.const(float(v), d) for n, (a, (_, d)) in enumerate(zip(inputs, ins))
                        for p, v in np.ndenumerate(a)]
                memo = [[tirx.const(float(expected[r, c]), dtype) for c in range(shape[1])] for r in range(shape[0])]
                pick = tirx.Select(i == 0, tirx.Select(j == 0, memo[0][0], memo[0][1]),
                                   tirx.Select(j == 0, memo[1][0], memo[1][1]))
                out = tirx.Select(tirx.all(*same), pick, out)
            return out

        return s_tir.Schedule(te.create_prim_func([*placeholders, te.compute(shape, value, name="out")]))


def test_every_round_draws_fresh_inputs_so_a_memorised_test_fails_the_next_round():
    workload = get_workload("gemm", "M=2,N=2,K=2")
    config = MeasureConfig(threads=1, repeat=2, min_repeat_ms=1)
    space = MemorisingSpace(workload, seeds=range(config.seed, config.seed + 3))  # the first draws a run may use
    with Measurer(Target("cpu", {"kind": "llvm"}, 2), config) as measurer:
        first = measurer.measure(space, [{}])[0]
        later = [measurer.measure(space, [{}])[0] for _ in range(3)]
    assert first.ok, first.reason  # it passes the draws it memorised ...
    assert not any(r.ok for r in later)  # ... and none drawn afresh later


def test_a_timing_waits_while_another_process_times_on_the_cores():
    import fcntl
    import threading

    from tensortune.measure import cores

    workload = get_workload("gemm", "M=8,N=8,K=8")
    space = make_space("cpu-template", workload)
    config = MeasureConfig(threads=1, repeat=2, min_repeat_ms=1)
    results = []
    with Measurer(Target("cpu", {"kind": "llvm"}, 2), config) as measurer:
        assert measurer.measure(space, [space.named("naive")])[0].ok  # workers started: what follows takes a second
        with open(cores.LOCK, "a+") as other:  # as another process does while it times
            fcntl.flock(other, fcntl.LOCK_EX)
            waiting = threading.Thread(target=lambda: results.extend(measurer.measure(space, [space.named("hand")])))
            waiting.start()
            waiting.join(5)
            assert waiting.is_alive() and not results  # it waits its turn ...
            fcntl.flock(other, fcntl.LOCK_UN)
        waiting.join(120)
    assert results and results[0].ok  # ... and measures once the cores are free


def _phases(count):
    for _ in range(count):
        start_clock()  # a next phase: the limit starts again
        time.sleep(0.3)
    return "done"


def test_the_run_limit_covers_each_phase_of_a_task_not_all_of_them():
    """The pool side of per-phase limits: each start_clock() starts the limit again, so
    phases that together outlast it still finish (the next test checks that a kernel's run
    signals a phase per checked call and for the timing)."""
    with WorkerPool(1, _phases, self_timed=True) as pool:
        outcomes = pool.map([4], timeout_s=0.6)
    assert outcomes[0].value == "done"


def test_each_checked_call_and_the_timing_begin_a_phase(tmp_path, target_spec):
    workload = get_workload("gemm", "8,8,8")
    space = make_space("cpu-template", workload)
    path = str(tmp_path / "naive.so")
    tvm.compile(space.apply(space.named("naive")).mod, target=tvm.target.Target(target_spec)).export_library(path)
    case = tasks.all_checks(workload.ident, 0)
    phases = []
    result = runner.run_kernel(runner.load(path, "cpu"), "cpu", case, Timing(2, 1), phase=lambda: phases.append(1))
    assert result["status"] == "ok" and len(phases) == 1 + len(case.draws) + 1


def test_a_call_that_has_lost_on_its_first_run_is_timed_no_further():
    """An untuned all-TVM model takes seconds a call where the build calling torch takes
    milliseconds: past `lost_s`, its warm-up call is its timing (no repeats)."""
    calls = []

    def slow():
        calls.append(time.sleep(0.02))

    assert len(runner.time_on_cpu(slow, 7, 0.05, lost_s=0.01)) == 1 and len(calls) == 1
    assert len(runner.time_on_cpu(slow, 7, 0.05, lost_s=1.0)) >= 3 and len(calls) > 4
