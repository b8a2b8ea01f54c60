"""Batches: kernels built here, checked and timed by the runtime-only runner somewhere else.

A batch folder holds manifest.json (the target, the timing, and each candidate's workload,
space, label and point), cases/*.npz (per workload a `runner.Case`: every check layer's draws,
expected outputs, bounds and tolerances, and which inputs it may write), kernels/ (libraries,
and for CUDA the binaries nvcc made here), and runner.py, checks.py and vendor.py copied from
this package. A workload whose tensors are large (a 4096^3 GEMM's case would be over 1 GB)
travels as its `checks.Recipe` in the manifest instead: the host draws the same inputs and
computes the expected outputs with the vendor implementation (torch, in float64) there. `python BATCH/runner.py BATCH` appends one line per kernel to results.jsonl (then a
line of vendor baselines), on a GPU host with TVM's runtime only, or here.

`BatchEvaluator` is that path as an evaluator (see evaluator.py): the points of each call go
into a batch, the copied runner runs it on this machine in its worker processes, and the
results come back; so the batch path is held to the same promises as the local one.
"""
from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from ..errors import UserError
from ..points import Point, point_key
from ..target import Target
from ..workloads import vendor
from . import checks, cores, runner, tasks
from .config import MeasureConfig, Timing
from .measurer import Measurer, build_failure
from ..result import Label, Result

MANIFEST, RESULTS = "manifest.json", "results.jsonl"
VENDOR = Path(vendor.__file__)  # torch's operators, for the host's baselines
# above this many bytes of inputs and output, a case travels as a recipe (with 5 draws, each
# with expected outputs and bounds, its arrays take about 10 times this); needs a vendor one
RECIPE_ABOVE_BYTES = 2 << 20


class BatchWriter:
    """A new batch folder, filled a space at a time (`add`); `close` writes the manifest and
    copies the runner. The builds are the `builder`'s (a Measurer's worker processes)."""

    def __init__(self, out: Path, target: Target, builder: Measurer, timing: Timing, model: dict | None = None):
        if (out / MANIFEST).exists():
            raise UserError(f"'{out}' already holds a batch; use a new folder", option="--out")
        (out / "kernels").mkdir(parents=True, exist_ok=True)
        (out / "cases").mkdir(exist_ok=True)
        self.out, self.builder = out, builder
        self.manifest = {"version": 2, "device": "cuda" if target.name == "cuda" else "cpu", "target": target.spec,
                         "target_name": target.name, "hardware": target.hardware, "threads": target.threads,
                         "timing": _plain(timing), "cases": {}, "candidates": [], "failed": [], "model": model}

    def add(self, space, labelled: list[tuple[Label, Point]], seed: int, floor: float = 0.0) -> list[str]:
        """Build the labelled points of `space` into the batch, with its workload's checks
        drawn from `seed` (once per workload); returns the candidates' ids, in order. A point
        that does not schedule or build is a failure with its reason, run nowhere."""
        case = self._case(space.workload, seed, floor)
        first = len(self.manifest["candidates"]) + len(self.manifest["failed"])
        ids = [f"{case}-{first + i:04d}" for i in range(len(labelled))]
        outcomes = self.builder.build(space, [p for _, p in labelled], [str(self.out / "kernels" / f"{i}.so") for i in ids])
        for cid, (label, point), built in zip(ids, labelled, outcomes):
            entry = {"id": cid, "case": case, "workload": space.workload.key, "space": space.name, "label": label,
                     "point": point}
            failure = build_failure(built)
            if failure is None:
                self.manifest["candidates"].append(entry | {"artifact": f"kernels/{cid}.so", "build_s": built.value})
            else:
                self.manifest["failed"].append(entry | {"status": failure.status, "reason": failure.reason})
        return ids

    def _case(self, wl, seed: int, floor: float) -> str:
        name = "".join(c if c.isalnum() else "_" for c in wl.key).strip("_")
        if name not in self.manifest["cases"]:
            spec = {"workload": wl.key, "family": wl.name, "kwargs": wl.kwargs, "flops": wl.flops, "floor_s": floor}
            if wl.bytes > RECIPE_ABOVE_BYTES and wl.name in vendor.TORCH:
                spec["recipe"] = asdict(tasks.recipe(wl.ident, seed))
            else:
                tasks.all_checks(wl.ident, seed).save(self.out / "cases" / f"{name}.npz")
            self.manifest["cases"][name] = spec
        return name

    def close(self) -> dict:
        for module in (runner.__file__, checks.__file__, VENDOR):
            shutil.copy(module, self.out)
        (self.out / MANIFEST).write_text(json.dumps(self.manifest, indent=1, default=list))
        return self.manifest


def _plain(timing: Timing) -> dict:
    return asdict(timing) | {"cutoff_s": min(timing.cutoff_s, 1e9)}  # JSON has no infinity


def read_batch(batch: Path) -> tuple[dict, dict]:
    """(the manifest, the results by candidate id) of a batch that has run to the end."""
    if not (batch / MANIFEST).is_file():
        raise UserError(f"'{batch}' is not a batch (no {MANIFEST}); make one with 'tensortune batch export'")
    if not (batch / RESULTS).is_file():
        raise UserError(f"'{batch}' has no {RESULTS} yet; run it first: python {batch}/runner.py {batch}")
    manifest = json.loads((batch / MANIFEST).read_text())
    results = runner.read_results(batch / RESULTS)
    missing = [c["id"] for c in manifest["candidates"] if c["id"] not in results]
    if missing:
        raise UserError(f"{len(missing)} kernels of '{batch}' have no result (first: {missing[0]}); "
                        f"run the batch again to finish it: python {batch}/runner.py {batch}")
    return manifest, results


def result_of(entry: dict, results: dict, manifest: dict) -> Result:
    """A candidate's Result: its failure here, or the runner's answer there."""
    if "status" in entry:  # failed to schedule or build here
        return Result(entry["status"], entry["reason"])
    threads = manifest["threads"] if manifest["device"] == "cpu" else 0
    return Result.from_run(results[entry["id"]], entry["build_s"], threads)


def run_here(batch: Path, timeout_s: float, threads: int, baselines: bool = True, quiet: bool = False) -> None:
    """Run a batch's own runner on this machine, as a host would (`python BATCH/runner.py`),
    with TVM's thread pool at `threads`, alone on the cores (measure/cores.py)."""
    runner_py = batch / "runner.py"
    if not runner_py.is_file():
        raise UserError(f"'{batch}' is not a batch (no runner.py); make one with 'tensortune batch export'")
    env = dict(os.environ, TVM_NUM_THREADS=str(threads))
    command = [sys.executable, str(runner_py), str(batch), "--timeout", str(timeout_s)]
    with cores.turn(alone=True):
        done = subprocess.run(command + ([] if baselines else ["--no-baselines"]), env=env, text=True,
                              capture_output=quiet)
    if done.returncode != 0:
        last = (done.stderr or "").strip().splitlines()[-1:] if quiet else []
        raise UserError(f"the batch runner failed (exit code {done.returncode}){': ' + last[0] if last else ''}")


class BatchEvaluator:
    """The batch path as an evaluator: each call's points are built into a new batch folder,
    which the runtime-only runner then checks and times on this machine; its results are the
    answers. Slower than the local Measurer (a runner process per call), the same checks."""

    def __init__(self, target: Target, config: MeasureConfig, timeout_s: float = 60.0):
        self.target, self.config, self.timeout_s = target, config, timeout_s
        self.builder = Measurer(target, config)  # its build workers, and its draw seeds
        self.tmp = tempfile.TemporaryDirectory(prefix="tensortune-batches-")
        self.calls = itertools.count()

    def measure(self, space, points: list[Point], cutoff_s: float = float("inf"),
                final: bool = False) -> list[Result]:
        cfg = self.config
        timing = cfg.timing(final, cutoff_s)
        folder = Path(self.tmp.name) / str(next(self.calls))
        writer = BatchWriter(folder, self.target, self.builder, timing)
        ids = writer.add(space, [(Label.SEARCH, p) for p in points], self.builder.draws.seed(space.workload, final))
        writer.close()
        run_here(folder, self.timeout_s, cfg.threads, baselines=False, quiet=True)
        manifest, results = read_batch(folder)
        entries = {e["id"]: e for e in manifest["candidates"] + manifest["failed"]}
        return [result_of(entries[i], results, manifest) for i in ids]

    def close(self) -> None:
        self.builder.close()
        self.tmp.cleanup()

    def __enter__(self) -> "BatchEvaluator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class BatchResults:
    """An evaluator that answers from a batch's results (by point): how kernels run elsewhere
    come home through the tuning round. It cannot run a kernel again, so a re-check gets the
    host's own careful timing back, and one below the roofline floor is refused."""

    def __init__(self, answers: dict[str, Result]):
        self.answers = answers

    def measure(self, space, points: list[Point], cutoff_s: float = float("inf"),
                final: bool = False) -> list[Result]:
        return [self.answers[point_key(p)] for p in points]
