"""What a build worker and a run worker do with one candidate.

Build: scheduled module (as TVM JSON) -> compiled shared library on disk. Run: load the
library, check its output against the reference on random inputs (never timing a wrong
kernel), then time it. Both run inside WorkerPool processes, so a crash costs only the
candidate. Workers receive modules, not points, so they need no search space: a space
such as MetaSchedule's costs tens of seconds to set up and lives in the tuner process only.
"""
from __future__ import annotations

import hashlib
import math
import os
import time
from dataclasses import dataclass
from functools import lru_cache, wraps

import numpy as np

from ..target import compile_for, tvm_target
from ..workloads.ident import resolve
from . import checks, runner
from .config import Timing
from .pool import start_clock


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
    device: str = "cpu"  # or "cuda"


def build(task: BuildTask) -> float:
    """Compile the candidate into `task.path`; returns the build time in seconds. A CUDA
    kernel is compiled to a binary here too (nvcc), saved beside the library with the hash
    of its source, so the machine that runs it needs no compiler (see runner.load)."""
    import tvm

    start = time.perf_counter()
    cuda = task.target["kind"] == "cuda"
    target = tvm_target(task.target)
    lib = compile_for(tvm.ir.load_json(task.module), task.target)
    lib.export_library(task.path)
    if cuda:
        from tvm.support import nvcc

        source = lib.mod.imports[0].inspect_source()
        with target:  # nvcc's wrapper reads the compute version from the current target
            try:
                binary = nvcc.compile_cuda(source, target_format="fatbin", arch=task.target["arch"], compiler="nvcc")
            except RuntimeError as err:  # its message is the whole source, then nvcc's output
                errors = [line.split(": error: ", 1)[-1].strip() for line in str(err).splitlines() if ": error" in line]
                raise RuntimeError(f"nvcc rejected TVM's CUDA source: {'; '.join(errors[:2]) or 'no error line'}") from None
        base = os.path.splitext(task.path)[0]
        with open(base + ".fatbin", "wb") as f:
            f.write(binary)
        with open(base + ".sha256", "w") as f:
            f.write(hashlib.sha256(source.encode()).hexdigest())
    return time.perf_counter() - start


def draws_cache(make):
    """Cache `make(workload, seed)` in the run worker, the two latest seeds of each workload
    (a round's draw and the winners' re-check draw): each round of a workload with a NumPy
    reference brings a fresh seed (see measurer.DrawSeeds), and a model's tasks share one worker."""
    cache: dict[tuple, object] = {}

    @wraps(make)
    def cached(workload: tuple, seed: int):
        if (workload, seed) not in cache:
            older = [key for key in cache if key[0] == workload]
            for key in older[:-1]:  # the previous seed stays
                del cache[key]
            if len(cache) >= 64:  # many workloads: the oldest goes
                del cache[next(iter(cache))]
            cache[(workload, seed)] = make(workload, seed)
        return cache[(workload, seed)]

    return cached


def recipe(workload: tuple, seed: int) -> checks.Recipe:
    """What the workload's checks for `seed` are drawn from (see checks.Recipe): the part
    that needs TVM (the function's dtypes, reduction length and arithmetic)."""
    wl = resolve(workload)
    ins, (_, out_dtype) = wl.io_specs()
    length = reduction_length(wl.prim_func())
    # a sum written out term by term has signed coefficients: the operator on |inputs| is then
    # not the sum of its terms' sizes that a polynomial's error is measured against
    polynomial = (checks.exact_applies(wl.prim_func()) is None and runner.is_float(out_dtype)
                  and not written_terms(wl.prim_func()))
    return checks.Recipe(tuple(ins), out_dtype, seed, tolerance(out_dtype, length), polynomial,
                         checks.large_magnitude(out_dtype, length, polynomial),
                         _exact_magnitude(wl, ins, out_dtype, length) if polynomial else 0,
                         checks.written_inputs(wl.prim_func()))


@draws_cache
def all_checks(workload: tuple, seed: int) -> runner.Case:
    """Every check layer of a workload's kernels for one seed (the timed uniform draw, its
    expected output from the NumPy reference and tolerance, then the other draws of
    checks.py), as the runner takes them: made once per worker, not per candidate; the same
    here and, saved into a batch, on another machine."""
    wl = resolve(workload)
    return checks.make_case(recipe(workload, seed), lambda inputs: expected_output(wl, inputs))


def _exact_magnitude(wl, ins, out_dtype: str, length: int) -> int:
    """The exact draws' magnitude for a polynomial operator, from its terms and degree as the
    reference shows them: on all-ones inputs an output element is its number of terms, and
    doubling the inputs multiplies it by 2^degree. A chained reduction (a depthwise then a
    pointwise conv) has more terms of higher degree than one reduction of `length`: sized for
    that, its exact draws were not exact and every kernel failed them. Where subtraction
    hides the count (ones cancel), one reduction of `length` is assumed."""
    ones = np.abs(expected_output(wl, checks.draw(ins, lambda shape, _: np.ones(shape))).astype(np.float64)).max()
    if not ones >= 1:
        return checks.exact_magnitude(out_dtype, length)
    twos = np.abs(expected_output(wl, checks.draw(ins, lambda shape, _: np.full(shape, 2.0))).astype(np.float64)).max()
    degree = max(1, math.ceil(math.log2(max(twos / ones, 2.0)) - 1e-9))
    return checks.exact_magnitude(out_dtype, int(ones), degree)


def expected_output(wl, inputs: list[np.ndarray]) -> np.ndarray:
    """The NumPy reference run in float64 (its own rounding then negligible) and rounded
    once to the output's dtype; without one, the unscheduled kernel's output."""
    import tvm

    _, (out_shape, out_dtype) = wl.io_specs()
    expected = wl.reference(*[a.astype(np.float64) if runner.is_float(a.dtype) else a for a in inputs])
    if expected is not None:
        return np.asarray(expected).astype(runner.numpy_dtype(out_dtype))
    out = tvm.runtime.tensor(np.zeros(out_shape, runner.numpy_dtype(out_dtype)))
    _unscheduled(wl.ident)(*[tvm.runtime.tensor(a) for a in inputs], out)
    return out.numpy()


@lru_cache(maxsize=8)
def _unscheduled(ident: tuple):
    """The workload's unscheduled kernel, compiled once per worker: the reference of kernels
    without a NumPy one."""
    import tvm

    return tvm.compile(resolve(ident).prim_func(), target={"kind": "llvm"})


def reduction_length(func) -> int:
    """Terms summed into one output element, across chained reductions (for the tolerance)."""
    from tvm import s_tir
    from tvm.tirx import IterVar

    sch = s_tir.Schedule(func)
    per_block = [[int(iv.dom.extent) for iv in sch.get(b).iter_vars if int(iv.iter_type) == IterVar.CommReduce]
                 for b in sch.get_child_blocks(sch.get_sblock("root"))]
    return max(1, sum(math.prod(extents) for extents in per_block if extents) + written_terms(func))


def written_terms(func) -> int:
    """Terms of the sums written out one by one rather than as reductions, as their blocks'
    annotation says (model/winograd.py's transforms); 0 where there are none."""
    from tvm import s_tir

    sch = s_tir.Schedule(func)
    blocks = [sch.get(b) for b in sch.get_child_blocks(sch.get_sblock("root"))]
    return sum(int(block.annotations[SUMMED_TERMS]) for block in blocks if SUMMED_TERMS in block.annotations)


SUMMED_TERMS = "tensortune.summed_terms"  # a block annotation (model/winograd.TERMS)
TOLERANCE_CAP = 0.25  # a kernel a quarter of its terms' size off has dropped or zeroed some


def tolerance(dtype: str, reduction_length: int) -> float:
    """Largest accepted error relative to the reference (see runner.verify): rounding grows
    at most linearly with the reduction length, so 4 * eps * length cannot reject a correct
    kernel, and dropping or doubling a single term of a sum is still far above it. Capped:
    for a long float16 sum that bound reaches 1, which an all-zeros output meets (random
    terms' rounding grows with the root of the length: a few percent at 4096)."""
    if not runner.is_float(dtype):
        return 0.0  # integers and booleans are exact
    return min(max(4 * checks.epsilon(dtype) * reduction_length, 1e-6), TOLERANCE_CAP)


def run(task: RunTask) -> dict:
    """Verify, then time (see runner.run_kernel). Returns a dict with status 'ok' or 'wrong'."""
    lib = runner.load(task.path, task.device)
    # the time limit covers each call of the kernel (with its check) and then its timing, not
    # this worker's set-up: checking a large output on every draw can outlast one limit
    return runner.run_kernel(lib, task.device, all_checks(task.workload, task.seed), task.timing,
                             phase=start_clock) | {"threads": _threads()}


def _threads() -> int:
    """The threads TVM's pool runs parallel loops on, as the runtime reports them (not the
    variable we set: TVM caps it at the cores available, and reads it once at start)."""
    import tvm

    return int(tvm.get_global_func("runtime.NumThreads")())
