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

from ..target import tvm_target
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
    lib = tvm.compile(tvm.ir.load_json(task.module), target=target)
    lib.export_library(task.path)
    if cuda:
        from tvm.support import nvcc

        source = lib.mod.imports[0].inspect_source()
        with target:  # nvcc's wrapper reads the compute version from the current target
            binary = nvcc.compile_cuda(source, target_format="fatbin", arch=task.target["arch"], compiler="nvcc")
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


@draws_cache
def case(workload: tuple, seed: int) -> tuple[list[np.ndarray], np.ndarray, float]:
    """Random inputs (uniform in [-1, 1]), the expected output (the NumPy reference, or
    without one the unscheduled kernel's output) and the tolerance: made once per worker,
    not per candidate. The draw every candidate is timed on (see `layers` for the others)."""
    wl = resolve(workload)
    rng = np.random.default_rng(seed)
    ins, (out_shape, out_dtype) = wl.io_specs()
    inputs = random_input(rng, ins)
    return inputs, expected_output(wl, inputs), tolerance(out_dtype, reduction_length(wl.prim_func()))


@draws_cache
def layers(workload: tuple, seed: int) -> tuple[np.ndarray | None, list[tuple], tuple[int, ...]]:
    """The other checks (see checks.py): (the per-element error bound of the timed draw, or
    None, the other draws as (layer, inputs, expected, tolerance, bound), and the inputs the
    kernel may write: a model kernel's other outputs). Made once per worker, like `case`."""
    wl = resolve(workload)
    inputs, expected, limit = case(workload, seed)
    ins, (_, out_dtype) = wl.io_specs()
    polynomial = checks.exact_applies(wl.prim_func()) is None and runner.is_float(out_dtype)
    length = reduction_length(wl.prim_func())
    rng = np.random.default_rng(seed + 1)
    differential = [("distinct", checks.distinct_draw(ins)),
                    ("large", checks.large_draw(rng, ins, checks.large_magnitude(out_dtype, length, polynomial))),
                    ("small", checks.small_draw(rng, ins))]
    draws = []
    for name, draw in differential:
        draw_expected = expected_output(wl, draw)
        draws.append((name, draw, draw_expected, limit, error_bound(wl, draw, draw_expected, polynomial, limit)))
    magnitude = _exact_magnitude(wl, ins, out_dtype, length) if polynomial else 0
    for n in range(checks.EXACT_DRAWS if magnitude else 0):
        draw = checks.integer_draw(rng, ins, magnitude)
        draws.append((f"exact-{n + 1}", draw, expected_output(wl, draw), 0.0, None))
    return error_bound(wl, inputs, expected, polynomial, limit), draws, checks.written_inputs(wl.prim_func())


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


PERTURBATION_CAP = 1e-3  # the relative input perturbation that probes an element's conditioning
PROBES = 2


def error_bound(wl, draw: list[np.ndarray], expected: np.ndarray, polynomial: bool, tolerance: float) -> np.ndarray | None:
    """Per output element, what its error is measured against (runner.verify), or None for
    max |expected| everywhere. A polynomial's element: the sum of the absolute values of its
    terms (the operator run on |inputs|, what its rounding error grows with), at most max
    |expected|. Any other element: max |expected|, raised where the element is
    ill-conditioned, so that moving it as far as the inputs rounded by `tolerance` (relative,
    random signs) move it is accepted: a batch norm after a convolution on large inputs
    subtracts nearly equal numbers, and a clip to [0, 6] then leaves outputs far smaller than
    the sums whose rounding they carry; a wrong element is off by its own size, not by that."""
    top = runner.largest(expected)
    if polynomial:
        return np.minimum(np.abs(expected_output(wl, [np.abs(a) for a in draw]).astype(np.float64)), top)
    if tolerance == 0:
        return None
    rng = np.random.default_rng(0)
    size = min(tolerance, PERTURBATION_CAP)
    moved = np.zeros(expected.shape)
    for _ in range(PROBES):  # random signs can cancel at an element: the larger of two moves
        rounded = [(a * (1 + size * rng.choice((-1.0, 1.0), a.shape))).astype(a.dtype) if runner.is_float(a.dtype)
                   else a for a in draw]
        with np.errstate(invalid="ignore"):
            move = np.abs(expected_output(wl, rounded).astype(np.float64) - expected.astype(np.float64))
        moved = np.maximum(moved, np.nan_to_num(move, nan=0.0, posinf=0.0))
    return np.maximum(top, moved / tolerance)


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


def random_input(rng: np.random.Generator, specs) -> list[np.ndarray]:
    """Uniform in [-1, 1] for floats; 0, 1 or 2 for integers (small enough to be a valid
    index of most gathers), random for booleans."""
    return checks.draw(specs, lambda shape, _: rng.uniform(-1, 1, shape), rng)


def reduction_length(func) -> int:
    """Terms summed into one output element, across chained reductions (for the tolerance)."""
    from tvm import s_tir
    from tvm.tirx import IterVar

    sch = s_tir.Schedule(func)
    per_block = [[int(iv.dom.extent) for iv in sch.get(b).iter_vars if int(iv.iter_type) == IterVar.CommReduce]
                 for b in sch.get_child_blocks(sch.get_sblock("root"))]
    return max(1, sum(math.prod(extents) for extents in per_block if extents))


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


def all_checks(workload: tuple, seed: int) -> runner.Case:
    """Every check layer of a workload's kernels for one seed (`case` and `layers`), as the
    runner takes them: the same here and, saved into a batch, on another machine."""
    inputs, expected, limit = case(workload, seed)
    bound, draws, written = layers(workload, seed)
    return runner.Case(inputs, expected, limit, bound, tuple(draws), written)


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
