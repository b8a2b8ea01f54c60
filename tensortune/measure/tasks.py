"""What a build worker and a run worker do with one candidate.

Build: scheduled module (as TVM JSON) -> compiled shared library on disk. Run: load the
library, check its output against the reference on random inputs (never timing a wrong
kernel), then time it. Both run inside WorkerPool processes, so a crash costs only the
candidate. Workers receive modules, not points, so they need no search space: a space
such as MetaSchedule's costs tens of seconds to set up and lives in the tuner process only.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .config import Timing


@dataclass(frozen=True)
class BuildTask:
    module: str  # tvm.ir.save_json of the scheduled IRModule
    target: dict
    path: str


@dataclass(frozen=True)
class RunTask:
    workload: tuple  # (family, shape): rebuilt in the worker, which cannot receive TE objects
    path: str
    timing: Timing
    seed: int


def build(task: BuildTask) -> float:
    """Compile the candidate into `task.path`; returns the build time in seconds."""
    import tvm

    start = time.perf_counter()
    lib = tvm.compile(tvm.ir.load_json(task.module), target=tvm.target.Target(task.target))
    lib.export_library(task.path)
    return time.perf_counter() - start


@lru_cache(maxsize=4)
def _case(workload: tuple, seed: int):
    """Random inputs (uniform in [-1, 1]), the expected output (the NumPy reference, or
    without one the unscheduled kernel's output) and the tolerance: made once per worker,
    not per candidate."""
    from ..workloads.registry import resolve

    wl = resolve(*workload)
    rng = np.random.default_rng(seed)
    ins, (out_shape, out_dtype) = wl.io_specs()
    inputs = [rng.uniform(-1, 1, shape).astype(dtype) for shape, dtype in ins]
    expected = wl.reference(*inputs)
    if expected is None:
        expected = _naive_output(wl, inputs, out_shape, out_dtype)
    return inputs, expected, (out_shape, out_dtype), tolerance(out_dtype, reduction_length(wl.prim_func()))


def _naive_output(wl, inputs, out_shape, out_dtype) -> np.ndarray:
    import tvm

    lib = tvm.compile(wl.prim_func(), target={"kind": "llvm"})
    out = tvm.runtime.tensor(np.zeros(out_shape, out_dtype))
    lib(*[tvm.runtime.tensor(a) for a in inputs], out)
    return out.numpy()


def reduction_length(func) -> int:
    """Terms summed into one output element, across chained reductions (for the tolerance)."""
    from tvm import s_tir
    from tvm.tirx import IterVar

    sch = s_tir.Schedule(func)
    per_block = [[int(iv.dom.extent) for iv in sch.get(b).iter_vars if int(iv.iter_type) == IterVar.CommReduce]
                 for b in sch.get_child_blocks(sch.get_sblock("root"))]
    return max(1, sum(math.prod(extents) for extents in per_block if extents))


def tolerance(dtype: str, reduction_length: int) -> float:
    """Largest accepted max-abs error relative to max |reference|: rounding grows at most
    linearly with the reduction length, so 4 * eps * length cannot reject a correct kernel;
    dropping or doubling a single term of a sum is still far above it."""
    return max(4 * float(np.finfo(dtype).eps) * reduction_length, 1e-6)


def run(task: RunTask) -> dict:
    """Verify, then time. Returns a dict with status 'ok' or 'wrong' and the details."""
    import tvm

    inputs, expected, (out_shape, out_dtype), limit = _case(task.workload, task.seed)
    dev = tvm.cpu()
    lib = tvm.runtime.load_module(task.path)
    args = [tvm.runtime.tensor(a, dev) for a in inputs]
    args.append(tvm.runtime.tensor(np.full(out_shape, np.nan, out_dtype), dev))
    start = time.perf_counter()
    lib["main"](*args)  # the warm-up call; NaN-filled output catches a kernel that skips writes
    once = time.perf_counter() - start
    got = args[-1].numpy()
    scale = float(np.abs(expected).max()) or 1.0
    error = float(np.nan_to_num(np.abs(got - expected), nan=np.inf).max()) / scale
    if not error <= limit:
        return {"status": "wrong", "reason": f"max relative error {error:.2e} exceeds {limit:.1e}"}
    if once > task.timing.cutoff_s:  # hopeless: timing it carefully would only cost search time
        return {"status": "ok", "runs": [once], "error": error, "threads": _threads(),
                "note": f"timed once: slower than the cutoff {task.timing.cutoff_s * 1e3:.3g} ms"}
    # a very slow kernel (a naive GEMM takes seconds) gets fewer repeats, never under 3
    repeat = max(3, min(task.timing.repeat, int(task.timing.budget_s / once)))
    timer = lib.time_evaluator("main", dev, number=1, repeat=repeat, min_repeat_ms=task.timing.min_repeat_ms)
    runs = [float(r) for r in timer(*args).results]
    return {"status": "ok", "runs": runs, "error": error, "threads": _threads()}


def _threads() -> int:
    return int(os.environ.get("TVM_NUM_THREADS", 1))
