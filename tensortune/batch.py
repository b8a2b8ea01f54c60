"""Batches: kernels built here, run on another machine, results brought back.

The way to a GPU host that has no compiler and no network (or to any machine, CPU included):

    tensortune batch export gemm-1024 conv1d-1024 --target cuda --count 256 --out BATCH
    python BATCH/runner.py BATCH            # on the GPU host: NumPy + TVM's runtime (+ torch)
    tensortune batch import BATCH           # back here: results into the records database

A model's kernels travel the same way (`batch export --model MODEL`): each kernel's default
(TVM's own schedule, the model's baseline) and candidates in the sketch space; imported, they
are the records `tune-model` would have stored, and it resumes from them.

A batch directory holds manifest.json (each candidate's workload, space, point and label),
cases/*.npz (inputs, the expected output from the NumPy reference, the tolerance), kernels/
(libraries, and for CUDA the binaries nvcc made here), and runner.py and vendor.py, copied
from this package. The runner appends to results.jsonl, one line per kernel, then a line of
vendor baselines.
"""
from __future__ import annotations

import itertools
import json
import math
import random
import shutil
from dataclasses import asdict
from pathlib import Path

import numpy as np

from .db import Database, Task
from .errors import UserError
from .measure import MeasureConfig, Measurer, Result
from .measure import runner, tasks
from .measure.config import Timing
from .measure.measurer import build_failure
from .space import TEMPLATES, DefaultSpace, InvalidPoint, KnobSpace, Point, make_space, point_key
from .target import Target, cuda_hardware
from .workloads import Workload

MANIFEST, RESULTS = "manifest.json", "results.jsonl"
STAGING_KNOBS = ("cache.", "cache_at", "pack.")  # where operands are cached (GPU) or packed (CPU)


def choose_points(space: KnobSpace, count: int, seed: int) -> list[tuple[str, Point]]:
    """naive and hand; every staging choice at hand's tiles (which operands to cache or pack,
    where, in which scope: on GPUs, whether shared memory or registers win is the lesson the
    table must show); then, up to `count` more than naive and hand, alternately the
    evolutionary strategy's local moves around hand (1-3 mutation steps) and random samples.
    With no timings yet to learn from, this is what a strategy can propose; the results then
    let strategies be replayed offline."""
    rng = random.Random(seed)
    chosen: dict[str, tuple[str, Point]] = {}
    for name in ("naive", "hand"):
        try:
            chosen.setdefault(point_key(space.named(name)), (name, space.named(name)))
        except InvalidPoint:  # hand has no recipe for this shape; the sketch space has neither
            pass
    limit = count + len(chosen)

    def add(label: str, point: Point) -> None:
        if len(chosen) < limit:
            chosen.setdefault(point_key(point), (label, point))

    parent = list(chosen.values())[-1][1] if chosen else None
    staging = [k for k in space.knobs if k.name.startswith(STAGING_KNOBS)]
    for values in itertools.product(*(k.values() for k in staging)) if parent else ():
        variant = space.canonical(parent | {k.name: v for k, v in zip(staging, values)})
        if space.check(variant) is None:
            add("search", variant)
    for attempt in range(count * 50):
        if len(chosen) >= limit:
            break
        add("search", space.mutate(parent, rng, steps=rng.choice((1, 2, 3))) if parent and attempt % 2 == 0
            else space.sample(rng))
    return list(chosen.values())


def export_batch(workloads: list[Workload], target: Target, out: Path, count: int, seed: int = 0,
                 config: MeasureConfig | None = None, progress=lambda *_: None, space: str | None = None,
                 defaults: list[Workload] = (), model: dict | None = None) -> dict:
    """Build naive, hand (where the space has them) and `count` candidates per workload, in
    `space` (default: the target's template), into a batch directory; and for each of
    `defaults` (a model's kernels) its default, TVM's own schedule, the model's baseline.
    `model` (name, key and kernel rows, see ImportedModel.kernel_rows) is stored on import,
    so that `show MODEL` knows the model's kernels."""
    if (out / MANIFEST).exists():
        raise UserError(f"'{out}' already holds a batch; pass a new --out folder")
    config = config or MeasureConfig()
    (out / "kernels").mkdir(parents=True, exist_ok=True)
    (out / "cases").mkdir(exist_ok=True)
    manifest = {"version": 1, "device": "cuda" if target.name == "cuda" else "cpu", "target": target.spec,
                "target_name": target.name, "hardware": target.hardware, "threads": target.threads,
                "timing": _timing(config), "cases": {}, "candidates": [], "failed": [], "model": model}
    space = space or TEMPLATES[target.spec["kind"]]
    tuned, baselines = {wl.key for wl in workloads}, {wl.key for wl in defaults}
    with Measurer(None, target.spec, config) as measurer:
        for wl in {wl.key: wl for wl in [*defaults, *workloads]}.values():
            case = _add_case(manifest, out, wl, config.seed)
            batches = ([(DefaultSpace(wl, target.spec), [("default", {})])] if wl.key in baselines else [])
            if wl.key in tuned:
                knobs = make_space(space, wl, target.spec)
                batches.append((knobs, choose_points(knobs, count, seed)))
            for knob_space, labelled in batches:
                _build_entries(manifest, out, case, knob_space, labelled, measurer)
            progress(wl, sum(len(labelled) for _, labelled in batches))
    for module in (runner.__file__, Path(__file__).with_name("vendor.py")):
        shutil.copy(module, out)
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1, default=list))
    return manifest


def export_model_batch(model, target: Target, out: Path, count: int, seed: int = 0, space: str = "sketch",
                       config: MeasureConfig | None = None, progress=lambda *_: None) -> dict:
    """A model's kernels (model.ImportedModel) as a batch: every kernel's default, and `count`
    candidates in `space` for each tunable one. Imported, the results are the model's records,
    as a `tune-model` run would have stored them (it resumes from them)."""
    tunable = [k.workload for k in model.kernels if k.tunable]
    return export_batch(tunable, target, out, count, seed, config, progress, space,
                        defaults=[k.workload for k in model.kernels],
                        model={"name": model.name, "key": model.key, "kernels": model.kernel_rows()})


def _add_case(manifest: dict, out: Path, wl: Workload, seed: int) -> str:
    """The workload's inputs, expected output and tolerance, saved for the runner."""
    case = _case_name(wl)
    inputs, expected, tolerance = tasks.case(wl.ident, seed)
    np.savez(out / "cases" / f"{case}.npz", **{f"input{i}": a for i, a in enumerate(inputs)},
             expected=expected, tolerance=np.float64(tolerance))
    manifest["cases"][case] = {"workload": wl.key, "family": wl.name, "kwargs": wl.kwargs, "flops": wl.flops}
    return case


def _build_entries(manifest: dict, out: Path, case: str, space: KnobSpace, labelled: list, measurer: Measurer) -> None:
    """Build the labelled points of one space; each is a candidate, or a failure with its reason."""
    first = sum(c["case"] == case for c in manifest["candidates"] + manifest["failed"])
    ids = [f"{case}-{first + i:04d}" for i in range(len(labelled))]
    outcomes = measurer.build([p for _, p in labelled], [str(out / "kernels" / f"{i}.so") for i in ids], space)
    for cid, (label, point), built in zip(ids, labelled, outcomes):
        entry = {"id": cid, "case": case, "workload": space.workload.key, "space": space.name, "label": label,
                 "point": point}
        failure = build_failure(built)
        if failure is None:
            manifest["candidates"].append(entry | {"artifact": f"kernels/{cid}.so", "build_s": built.value})
        else:
            manifest["failed"].append(entry | {"status": failure.status, "reason": failure.reason})


def _timing(config: MeasureConfig) -> dict:
    timing = asdict(Timing(config.final_repeat, config.final_min_repeat_ms))
    return timing | {"cutoff_s": 1e9}  # JSON has no infinity


def _case_name(wl: Workload) -> str:
    return "".join(c if c.isalnum() else "_" for c in wl.key).strip("_")


def import_batch(batch: Path, db: Database) -> list[dict]:
    """Every candidate's outcome into the database (one transaction); per workload a summary:
    naive, hand, best and torch seconds."""
    manifest, results = read_batch(batch)
    marker = batch / "imported-into"
    imported = marker.read_text().split("\n") if marker.exists() else []
    if str(Path(db.path).resolve()) in imported:
        raise UserError(f"'{batch}' was already imported into '{db.path}'; importing it again would count it twice")
    info = results.get("baselines", {})
    hardware = (cuda_hardware(manifest["target"]["arch"], info.get("device_name", ""))
                if manifest["device"] == "cuda" else manifest["hardware"])
    rows = []
    for entry in manifest["candidates"] + manifest["failed"]:
        task = Task(entry["workload"], manifest["target_name"], hardware, entry["space"])
        rows.append((task, entry["label"], entry["point"], _result(entry, results, manifest)))
    db.add_many(rows)
    if manifest.get("model"):
        db.add_model(**manifest["model"])
    with open(marker, "a") as f:
        f.write(str(Path(db.path).resolve()) + "\n")
    return [_summary(case, spec, rows, info) for case, spec in manifest["cases"].items()]


def read_batch(batch: Path) -> tuple[dict, dict]:
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


def _result(entry: dict, results: dict, manifest: dict) -> Result:
    if "status" in entry:  # failed to schedule or build here
        return Result(entry["status"], entry["reason"])
    threads = manifest["threads"] if manifest["device"] == "cpu" else 0
    return Result.from_run(results[entry["id"]], entry["build_s"], threads)


def _summary(case: str, spec: dict, rows: list, info: dict) -> dict:
    mine = [(label, result) for task, label, _, result in rows if task.workload == spec["workload"]]
    best = {}
    for label, result in mine:
        best[label] = min(best.get(label, math.inf), result.latency)
    torch = info.get("torch", {}).get(case)
    return {"workload": spec["workload"], "naive": best.get("naive", math.inf), "hand": best.get("hand", math.inf),
            "best": min(best.values(), default=math.inf), "candidates": len(mine),
            "correct": sum(r.ok for _, r in mine), "flops": spec["flops"],
            "torch": float(np.median(torch["runs"])) if torch and not torch["wrong"] else math.inf}

