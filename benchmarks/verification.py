"""Mutation score of the verification layers: how many wrong kernels each layer catches.

For each workload, wrong kernels are made from its unscheduled TensorIR by editing its
TVMScript (a dropped reduction term, the last row left unwritten, a neighbour's element read,
an index mirrored, products rounded to float16, values clamped, small values flushed to zero,
a write into an input, a loop one past the end with no guard). Each is compiled and put through every layer separately: the timed
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
from datetime import datetime, timezone
from pathlib import Path

WORKLOADS = [("gemm", "M=24,N=32,K=20"), ("conv1d", "M=40,N=9"), ("dwconv2d", "1,2,12,12,3"),
             (str(Path(__file__).parent.parent / "tests/operators/batch_matmul.py:batch_matmul"), "B=2,M=8,N=8,K=4")]


def _grid_before(lines: list[str], block: int) -> int:
    return max(i for i in range(block) if "T.grid(" in lines[i] or "in range(" in lines[i])


def _reduction_block(lines: list[str]) -> int | None:
    return next((i for i, line in enumerate(lines) if re.search(r'T\.axis\.remap\("\w*R\w*"', line)), None)


def _update_line(lines: list[str]) -> int:
    """The last buffer store of the function: the output's update."""
    return max(i for i, line in enumerate(lines) if re.match(r"\s+\w+\[[^\]]*\] = ", line))


def _extents(line: str) -> list[str]:
    return [e.strip() for e in re.search(r"T\.grid\(([^)]*)\)", line).group(1).split(",")]


def _set_extent(line: str, position: int, delta: int) -> str:
    extents = _extents(line)
    extents[position] = str(int(extents[position]) + delta)
    return re.sub(r"T\.grid\([^)]*\)", "T.grid(" + ", ".join(extents) + ")", line)


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
    text = re.search(rf"{name}: T\.Buffer\(\(([^)]*)\)", "\n".join(lines)).group(1)
    return [int(x) for x in text.split(",") if x.strip()]


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
    out_dtype = re.findall(r'T\.Buffer\(\([^)]*\), "(\w+)"\)', "\n".join(lines))[-1]
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


MUTATIONS = {"dropped reduction term": dropped_term, "last row unwritten": last_row_unwritten,
             "loop one past the end, no guard": one_past_the_end, "neighbour element read": neighbour_read,
             "index mirrored": mirrored_index, "products rounded to float16": float16_products,
             "values clamped at 10": clamped, "small values flushed to 0": small_flushed,
             "write into an input": write_into_input}
LAYERS = ("uniform draw", "distinct draw", "large draw", "small draw", "exact draws",
          "NaN in the output (unwritten or overflowed)",
          "out-of-bounds write", "input changed")


def mutants(wl):
    """(name, compiled library path or the reason it could not be made) per mutation."""
    import tvm

    text = wl.prim_func().script()
    folder = Path(tempfile.mkdtemp(prefix="tensortune-mutants-"))
    for name, mutate in MUTATIONS.items():
        lines = mutate(text.splitlines())
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

    def __init__(self, wl):
        self.workload, self.text = wl, wl.prim_func().script()

    def apply(self, point):
        import tvm
        from tvm import s_tir

        lines = MUTATIONS[point["mutation"]](self.text.splitlines())
        return s_tir.Schedule(tvm.script.from_source("\n".join(lines)))


def through_evaluators(wl, names: list[str]) -> list[tuple[str, str]]:
    """(local status, batch status) of each named mutant, measured as candidates are."""
    from tensortune.measure.batch import BatchEvaluator
    from tensortune.measure.config import MeasureConfig
    from tensortune.measure.measurer import Measurer
    from tensortune.target import make_target

    target, space = make_target("cpu", 2), MutantSpace(wl)
    config = MeasureConfig(threads=2, repeat=1, min_repeat_ms=1, final_repeat=1, final_min_repeat_ms=1)
    points = [{"mutation": name} for name in names]
    with Measurer(target.spec, config) as local, BatchEvaluator(target, config) as batch:
        return [(a.status, b.status) for a, b in zip(local.measure(space, points), batch.measure(space, points))]


def caught_by(path: str, wl) -> set[str]:
    """The layers that each, alone, reject the kernel."""
    import numpy as np

    from tensortune.measure import runner, tasks

    case = tasks.all_checks(wl.ident, 0)
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

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, shape in WORKLOADS:
            wl = get_workload(name, shape)
            space = "sketch" if wl.family.source else "cpu-template"
            summary = tune(wl, make_target("cpu", 2), Database(f"{tmp}/v.db"), TuneConfig(trials=trials, space=space),
                           MeasureConfig(threads=2))
            out.append((wl.key, summary.trials, summary.failures.get("wrong", 0)))
    return out


def _revision() -> str:
    """The git commit the benchmark ran from, '+edits' when the working tree differed from it."""
    import subprocess

    def git(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=Path(__file__).parent).stdout.strip()

    return (git("rev-parse", "--short", "HEAD") or "unknown") + ("+edits" if git("status", "--porcelain", "--", "..") else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=256, help="tuning trials per workload for the false rejections")
    parser.add_argument("--out", help="also write the table to this file")
    args = parser.parse_args()
    from tensortune.target import cpu_model
    from tensortune.workloads import get_workload

    start = time.perf_counter()
    rows, totals, caught_any, made = [], {layer: 0 for layer in LAYERS}, 0, 0
    refused = {"local": 0, "batch": 0}
    for name, shape in WORKLOADS:
        wl = get_workload(name, shape)
        built = []
        for mutation, path, why in mutants(wl):
            if path is None:
                rows.append(f"  {wl.key:34} {mutation:34} {why}")
                continue
            layers = caught_by(path, wl)
            made += 1
            caught_any += bool(layers)
            for layer in layers:
                totals[layer] += 1
            built.append((mutation, ", ".join(sorted(layers)) or "NOT CAUGHT"))
        for (mutation, layers), (local, batch) in zip(built, through_evaluators(wl, [m for m, _ in built])):
            refused["local"] += local != "ok"
            refused["batch"] += batch != "ok"
            rows.append(f"  {wl.key:34} {mutation:34} {layers}   [local: {local}, batch: {batch}]")
    lines = [f"command: python benchmarks/verification.py {' '.join(sys.argv[1:])}   (code {_revision()}, run alone)",
             f"date {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, machine {cpu_model()}",
             "", "wrong kernels, the layers that catch each alone, [and its status through each evaluator]:", *rows, "",
             f"share caught, of {made} wrong kernels:"]
    lines += [f"  {layer:44} {totals[layer] / max(made, 1):6.0%}" for layer in LAYERS]
    lines += [f"  {'overall':44} {caught_any / max(made, 1):6.0%}", "",
              "refused as candidates, every layer together (status other than ok):"]
    lines += [f"  {'through the ' + path + ' evaluator':44} {n / max(made, 1):6.0%}" for path, n in refused.items()]
    lines += ["",
              f"correct kernels rejected while tuning ({args.trials} trials each):"]
    lines += [f"  {key:34} {rejected} of {measured}" for key, measured, rejected in false_rejections(args.trials)]
    lines.append(f"\n{time.perf_counter() - start:.0f} s")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
