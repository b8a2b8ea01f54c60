"""Mutation score of the verification layers: how many wrong kernels each layer catches.

For each workload, wrong kernels are made from its unscheduled TensorIR by editing its
TVMScript (a dropped reduction term, the last row left unwritten, a neighbour's element read,
an index mirrored, products rounded to float16, values clamped, small values flushed to zero,
a write into an input, a loop one past the end with no guard, a transform coefficient off by
one). The workloads: four operators, and the three kernels a 3x3 convolution becomes in
Winograd F(4x4, 3x3) (model/winograd.py); its batch matmul also as a sketch point that packs
the transformed weight (a layout-rewrite block), with the packing's read mirrored. Each is compiled and put through every layer separately: the timed
uniform draw, the distinct-values, large and small draws, the exact integer draws, and the structural checks
(output written everywhere, nothing written outside it, inputs unchanged). The table gives
the share each layer catches alone and all of them together; then every wrong kernel goes
through two evaluators as a tuning candidate would: the local one (this machine's worker
processes) and the batch path (a batch folder run by the runtime-only runner a GPU host
uses), and the share each refuses is printed (both must be 100%). Then correct kernels: the
workloads are tuned and every candidate the layers rejected is counted (target: none).

    python benchmarks/verification.py [--trials 256] [--out benchmarks/results/verification.txt]
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from functools import lru_cache
from pathlib import Path

from provenance import header, publish

WORKLOADS = [("gemm", "M=24,N=32,K=20"), ("conv1d", "M=40,N=9"), ("dwconv2d", "1,2,12,12,3"),
             (str(Path(__file__).parent.parent / "tests/operators/batch_matmul.py:batch_matmul"), "B=2,M=8,N=8,K=4")]
WINOGRAD_KERNELS = ("winograd_input", "matmul", "fused_winograd_output")  # of a 3x3 convolution + ReLU


@lru_cache(maxsize=None)
def winograd_kernels() -> list:
    """The kernels a 3x3 convolution (16 channels, 6x6: two 4x4 tiles a side, cropped; then ReLU)
    becomes in F(4x4, 3x3) (small: a write one past the end of its output stays within the
    guard bytes around it, 4 KiB, and corrupts no memory of this process):
    the input transform, the batch matmul reading the transformed weight (layout-free, so that
    a sketch point packs it), the output transform with the ReLU."""
    import torch

    from tensortune.model import import_model
    from tensortune.target import make_target

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.ReLU()).eval()
    model = import_model("winograd", module, (torch.randn(1, 16, 6, 6),), make_target("cpu", 2), winograd=True)
    return [next(k.workload for k in model.kernels if k.name.startswith(prefix)) for prefix in WINOGRAD_KERNELS]


def packed_kernel(wl) -> str | None:
    """TVMScript of a sketch point of `wl` that packs a weight (a layout-rewrite block), or None."""
    import random

    from tensortune.space import make_space
    from tensortune.target import make_target

    space = make_space("sketch", wl, make_target("cpu", 2))
    for seed in range(32):
        script = space.apply(space.sample(random.Random(seed))).mod["main"].script()
        if "layout_rewrite_preproc" in script:
            return script
    return None


def _grid_before(lines: list[str], block: int) -> int:
    return max(i for i in range(block) if "T.grid(" in lines[i] or "in range(" in lines[i])


def _reduction_block(lines: list[str]) -> int | None:
    return next((i for i, line in enumerate(lines) if re.search(r'T\.axis\.remap\("\w*R\w*"', line)), None)


def _update_line(lines: list[str]) -> int:
    """The last buffer store of the function: the output's update."""
    return max(i for i, line in enumerate(lines) if re.match(r"\s+\w+\[[^\]]*\] = ", line))


GRID = r"T\.grid\(((?:[^()]|\([^()]*\))*)\)"  # its extents may be typed: T.grid(T.int64(36), 8)


def _extents(line: str) -> list[str]:
    return [e.strip() for e in re.search(GRID, line).group(1).split(",")]


def _set_extent(line: str, position: int, delta: int) -> str:
    extents = _extents(line)
    extents[position] = re.sub(r"\d+", lambda n: str(int(n.group(0)) + delta), extents[position].replace("int64", "INT"),
                               count=1).replace("INT", "int64")
    grid = re.search(GRID, line)
    return line[:grid.start()] + "T.grid(" + ", ".join(extents) + ")" + line[grid.end():]


def dropped_term(lines):
    block = _reduction_block(lines)
    if block is None:
        return None
    kinds = re.search(r'remap\("(\w+)"', lines[block]).group(1)
    grid = _grid_before(lines, block)
    lines[grid] = _set_extent(lines[grid], kinds.index("R"), -1)
    return lines


def last_row_unwritten(lines):
    grid = _grid_before(lines, _update_line(lines))
    lines[grid] = _set_extent(lines[grid], 0, -1)
    return lines


def one_past_the_end(lines):
    grid = _grid_before(lines, _update_line(lines))
    lines[grid] = _set_extent(lines[grid], 0, +1)
    return lines


def _first_input_access(lines, update):
    """(buffer, index text) of the first read of a function parameter in the update line."""
    params = re.findall(r"(\w+): T\.Buffer", "\n".join(lines))
    rhs = lines[update].split(" = ", 1)[1]
    for name in params[:-1]:
        found = re.search(rf"\b{name}\[([^\]]*)\]", rhs)
        if found:
            return name, found.group(1)
    return None


def _buffer_shape(lines, name) -> list[int]:
    text = re.search(rf"{name}: T\.Buffer\(\(((?:[^()]|\([^()]*\))*)\)", "\n".join(lines)).group(1)
    return [int(re.search(r"\d+", x).group(0)) for x in text.split(",") if x.strip()]


def _edit_last_index(lines, how):
    update = _update_line(lines)
    access = _first_input_access(lines, update)
    if access is None:
        return None
    name, index = access
    parts = [p.strip() for p in index.split(",")]
    extent = _buffer_shape(lines, name)[-1]
    parts[-1] = how(parts[-1], extent)
    lines[update] = lines[update].replace(f"{name}[{index}]", f"{name}[{', '.join(parts)}]", 1)
    return lines


def neighbour_read(lines):
    return _edit_last_index(lines, lambda i, n: f"T.min({i} + 1, {n - 1})")


def mirrored_index(lines):
    return _edit_last_index(lines, lambda i, n: f"{n - 1} - {i}")


def float16_products(lines):
    update = _update_line(lines)
    target, rhs = lines[update].split(" = ", 1)
    out_dtype = re.findall(r'T\.Buffer\(\((?:[^()]|\([^()]*\))*\), "(\w+)"\)', "\n".join(lines))[-1]
    own = target.strip()
    if not rhs.startswith(own + " + "):
        return None
    term = rhs[len(own) + 3:]
    lines[update] = f'{target} = {own} + T.Cast("{out_dtype}", T.Cast("float16", {term}))'
    return lines


def _wrap_update(lines, wrap):
    """The output's update line with its value wrapped by `wrap` (value text -> text)."""
    update = _update_line(lines)
    target, value = lines[update].split(" = ", 1)
    lines[update] = f"{target} = {wrap(value)}"
    return lines


def clamped(lines):
    return _wrap_update(lines, lambda v: f"T.min({v}, T.float32(10))")


def small_flushed(lines):
    return _wrap_update(lines, lambda v: f"T.if_then_else(T.fabs({v}) < T.float32(1e-3), T.float32(0), {v})")


def write_into_input(lines):
    update = _update_line(lines)
    access = _first_input_access(lines, update)
    if access is None:
        return None
    name, index = access
    indent = re.match(r"\s*", lines[update]).group(0)
    lines[update] += f"\n{indent}{name}[{index}] = {name}[{index}] * T.float32(0.5)"
    writes = max(i for i in range(update) if "T.writes(" in lines[i])  # declared, or TVM refuses to build it
    lines[writes] = lines[writes].replace("T.writes(", f"T.writes({name}[{index}], ", 1)
    return lines


def transform_coefficient(lines):
    """A Winograd transform's coefficient off by one: the first constant other than 0 and 1
    that a store multiplies by."""
    for i, line in enumerate(lines):
        if not re.match(r"\s+\w+\[[^\]]*\] = ", line):
            continue
        found = next((c for c in re.finditer(r"T\.float32\((-?[\d.]+)\)", line) if float(c.group(1)) not in (0.0, 1.0)), None)
        if found is not None:
            lines[i] = line[:found.start()] + f"T.float32({float(found.group(1)) + 1})" + line[found.end():]
            return lines
    return None


def packed_read_mirrored(lines):
    """The packing block (a layout rewrite) copying the weight's last axis mirrored: every
    value packed, in the wrong place."""
    start = next((i for i, line in enumerate(lines) if "layout_rewrite_preproc" in line), None)
    if start is None:
        return None
    store = next(i for i in range(start, len(lines)) if re.match(r"\s+\w+\[[^\]]*\] = ", lines[i]))
    read = re.search(r"= (\w+)\[([^\]]*)\]", lines[store])
    name, index = read.groups()
    parts = [p.strip() for p in index.split(",")]
    parts[-1] = f"{_buffer_shape(lines, name)[-1] - 1} - {parts[-1]}"
    lines[store] = lines[store].replace(f"{name}[{index}]", f"{name}[{', '.join(parts)}]", 1)
    return lines


MUTATIONS = {"dropped reduction term": dropped_term, "last row unwritten": last_row_unwritten,
             "loop one past the end, no guard": one_past_the_end, "neighbour element read": neighbour_read,
             "index mirrored": mirrored_index, "products rounded to float16": float16_products,
             "values clamped at 10": clamped, "small values flushed to 0": small_flushed,
             "write into an input": write_into_input, "transform coefficient off by one": transform_coefficient,
             "packed weight read mirrored": packed_read_mirrored}
LAYERS = ("crash of the checking process", "uniform draw", "distinct draw", "large draw", "small draw", "exact draws",
          "NaN in the output (unwritten or overflowed)",
          "out-of-bounds write", "input changed")


def mutants(text: str, names):
    """(name, compiled library path or the reason it could not be made) per mutation named,
    each an edit of the kernel `text` (TVMScript)."""
    import tvm

    folder = Path(tempfile.mkdtemp(prefix="tensortune-mutants-"))
    for name in names:
        lines = MUTATIONS[name](text.splitlines())
        if lines is None:
            yield name, None, "does not apply"
            continue
        try:
            func = tvm.script.from_source("\n".join(lines))
            path = folder / f"{len(list(folder.iterdir()))}.so"
            tvm.compile(func, target={"kind": "llvm"}).export_library(str(path))
        except Exception as err:  # a mutant TVM refuses to build is not a kernel anyone could report
            yield name, None, f"not buildable: {str(err).strip().splitlines()[0][:80]}"
            continue
        yield name, str(path), ""


class MutantSpace:
    """Points {"mutation": NAME}: the workload's TVMScript with that edit, so that the wrong
    kernels go through the evaluators (measure/evaluator.py) like any candidate."""

    name = "mutants"

    def __init__(self, wl, text: str):
        self.workload, self.text = wl, text

    def apply(self, point):
        import tvm
        from tvm import s_tir

        lines = MUTATIONS[point["mutation"]](self.text.splitlines())
        return s_tir.Schedule(tvm.script.from_source("\n".join(lines)))


def through_evaluators(wl, text: str, names: list[str]) -> list[tuple[str, str]]:
    """(local status, batch status) of each named mutant of `text`, measured as candidates are."""
    from tensortune.measure.batch import BatchEvaluator
    from tensortune.measure.config import MeasureConfig
    from tensortune.measure.measurer import Measurer
    from tensortune.target import make_target

    target, space = make_target("cpu", 2), MutantSpace(wl, text)
    config = MeasureConfig(threads=2, repeat=1, min_repeat_ms=1, final_repeat=1, final_min_repeat_ms=1)
    points = [{"mutation": name} for name in names]
    with Measurer(target, config) as local, BatchEvaluator(target, config) as batch:
        return [(a.status, b.status) for a, b in zip(local.measure(space, points), batch.measure(space, points))]


def caught_by(path: str, wl) -> set[str]:
    """The layers that each, alone, reject the kernel, found in a process of its own: a kernel
    writing far past its output's guard bytes corrupts the memory of the process calling it
    (its crash counts as caught: no result comes of it)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["tvm"])
    try:
        with ProcessPoolExecutor(1, mp_context=context) as alone:
            return alone.submit(_caught_by, path, wl.ident).result()
    except BrokenProcessPool:
        return {"crash of the checking process"}


def _caught_by(path: str, ident: tuple) -> set[str]:
    import numpy as np

    from tensortune.measure import runner, tasks

    case = tasks.all_checks(ident, 0)
    lib = runner.load(path, "cpu")
    dev = runner.device_of("cpu")
    caught = set()
    for layer, ins, exp, tol, sc in [("uniform draw", case.inputs, case.expected, case.tolerance, case.bound),
                                     *case.draws]:
        args, _, error, wrong = runner._checked_call(lib, dev, ins, exp, tol, sc)
        if wrong == "it wrote into an input":
            caught.add("input changed")
        elif wrong == "it wrote outside its output":
            caught.add("out-of-bounds write")
        elif wrong and np.isnan(args[-1].numpy()).any() and not np.isnan(exp).any():
            caught.add("NaN in the output (unwritten or overflowed)")
        elif wrong:
            caught.add("exact draws" if layer.startswith("exact") else layer if layer == "uniform draw" else f"{layer} draw")
    return caught


def false_rejections(trials: int) -> list[tuple[str, int, int]]:
    """(workload, candidates measured, rejected as wrong) for a tune of each workload."""
    from tensortune.db import Database
    from tensortune.measure.config import MeasureConfig
    from tensortune.target import make_target
    from tensortune.tuning.tuner import TuneConfig, tune
    from tensortune.workloads import get_workload
    from tensortune.workloads.kernel import KernelWorkload

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for wl in [get_workload(name, shape) for name, shape in WORKLOADS] + winograd_kernels():
            space = "sketch" if isinstance(wl, KernelWorkload) or wl.family.source else "cpu-template"
            summary = tune(wl, make_target("cpu", 2), Database(f"{tmp}/v.db"), TuneConfig(trials=trials, space=space),
                           MeasureConfig(threads=2))
            out.append((wl.key, summary.trials, summary.failures.get("wrong", 0)))
    return out


PACKED = ("packed weight read mirrored",)  # the mutations of a sketch point that packs a weight


def kernels_to_mutate():
    """(workload, label, TVMScript, mutation names): each workload's unscheduled kernel with
    every mutation but the packed one; a sketch point of the Winograd matmul that packs its
    weight, with that one."""
    from tensortune.workloads import get_workload

    plain = [name for name in MUTATIONS if name not in PACKED]
    for wl in [get_workload(name, shape) for name, shape in WORKLOADS] + winograd_kernels():
        yield wl, wl.key, wl.prim_func().script(), plain
        packed = packed_kernel(wl) if wl.name == "matmul" else None
        if packed is not None:
            yield wl, f"{wl.key} (packed)", packed, list(PACKED)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=256, help="tuning trials per workload for the false rejections")
    parser.add_argument("--out", help="also write the table to this file")
    args = parser.parse_args()
    head, start = header(2), time.perf_counter()  # the revision now: the code that measures
    rows, totals, caught_any, made = [], {layer: 0 for layer in LAYERS}, 0, 0
    refused = {"local": 0, "batch": 0}
    for wl, label, text, names in kernels_to_mutate():
        built = []
        for mutation, path, why in mutants(text, names):
            if path is None:
                rows.append(f"  {label:34} {mutation:34} {why}")
                continue
            layers = caught_by(path, wl)
            made += 1
            caught_any += bool(layers)
            for layer in layers:
                totals[layer] += 1
            built.append((mutation, ", ".join(sorted(layers)) or "NOT CAUGHT"))
        for (mutation, layers), (local, batch) in zip(built, through_evaluators(wl, text, [m for m, _ in built])):
            refused["local"] += local != "ok"
            refused["batch"] += batch != "ok"
            rows.append(f"  {label:34} {mutation:34} {layers}   [local: {local}, batch: {batch}]")
    lines = [*head, "", "wrong kernels, the layers that catch each alone, [and its status through each evaluator]:", *rows, "",
             f"share caught, of {made} wrong kernels:"]
    lines += [f"  {layer:44} {totals[layer] / max(made, 1):6.0%}" for layer in LAYERS]
    lines += [f"  {'overall':44} {caught_any / max(made, 1):6.0%}", "",
              "refused as candidates, every layer together (status other than ok):"]
    lines += [f"  {'through the ' + path + ' evaluator':44} {n / max(made, 1):6.0%}" for path, n in refused.items()]
    lines += ["",
              f"correct kernels rejected while tuning ({args.trials} trials each):"]
    lines += [f"  {key:34} {rejected} of {measured}" for key, measured, rejected in false_rejections(args.trials)]
    lines.append(f"\n{time.perf_counter() - start:.0f} s")
    publish("\n".join(lines), args.out)


if __name__ == "__main__":
    sys.exit(main())
