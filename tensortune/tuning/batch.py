"""Batches for another machine: the candidates chosen and built here, their results brought
home through the tuning round (the batch format and the runner: measure/batch.py).

    tensortune batch export gemm-1024 conv1d-1024 --target cuda --count 256 --out BATCH
    python BATCH/runner.py BATCH            # on the GPU host: NumPy + TVM's runtime (+ torch)
    tensortune batch import BATCH           # back here: results into the records database

A model's kernels travel the same way (`batch export --model MODEL`): each kernel's default
(TVM's own schedule, the model's baseline) and candidates in the sketch space; imported, they
are the records `tune-model` would have stored, and it resumes from them.
"""
from __future__ import annotations

import itertools
import math
import random
from pathlib import Path

import numpy as np

from ..db import Database, Task
from ..errors import UserError
from ..measure.batch import BatchResults, BatchWriter, read_batch, result_of
from ..measure.config import MeasureConfig
from ..measure.measurer import Measurer
from ..result import Label
from ..measure.roofline import floor_s
from ..points import InvalidPoint, Point, point_key
from ..search.given import Given
from ..space import KnobSpace, default_space, make_space
from ..space.default import DefaultSpace
from ..target import Target, cuda_hardware
from ..workloads import Workload
from .round import TaskTuner, run_round

STAGING_KNOBS = ("cache.", "cache_at", "pack.")  # where operands are cached (GPU) or packed (CPU)


def choose_points(space: KnobSpace, count: int, seed: int) -> list[tuple[Label, Point]]:
    """naive and hand; every staging choice at hand's tiles (which operands to cache or pack,
    where, in which scope: on GPUs, whether shared memory or registers win is the lesson the
    table must show); then, up to `count` more than naive and hand, alternately the
    evolutionary strategy's local moves around hand (1-3 mutation steps; in the sketch space
    around its default) and random samples.
    With no timings yet to learn from, this is what a strategy can propose; the results then
    let strategies be replayed offline."""
    rng = random.Random(seed)
    chosen: dict[str, tuple[Label, Point]] = {}
    for name in (Label.NAIVE, Label.HAND):
        try:
            chosen.setdefault(point_key(space.named(name)), (name, space.named(name)))
        except InvalidPoint:  # hand has no recipe for this shape; the sketch space has neither
            pass
    limit = count + len(chosen)

    def add(label: Label, point: Point) -> None:
        if len(chosen) < limit:
            chosen.setdefault(point_key(point), (label, point))

    parent = list(chosen.values())[-1][1] if chosen else _design_default(space)
    if parent and not chosen:
        add(Label.SEARCH, parent)
    staging = [k for k in space.knobs if k.name.startswith(STAGING_KNOBS)]
    for values in itertools.product(*(k.values() for k in staging)) if parent else ():
        variant = space.canonical(parent | {k.name: v for k, v in zip(staging, values)})
        if space.check(variant) is None:
            add(Label.SEARCH, variant)
    for attempt in range(count * 50):
        if len(chosen) >= limit:
            break
        try:
            add(Label.SEARCH, space.mutate(parent, rng, steps=rng.choice((1, 2, 3))) if parent and attempt % 2 == 0
                else space.sample(rng))
        except RuntimeError:  # no valid random point in many tries (a large tensor-core sketch): moves only
            continue
    return list(chosen.values())


def _design_default(space: KnobSpace) -> Point | None:
    """The sketch space's own first sample of MetaSchedule's design space, the parent of the
    local moves where there is no hand schedule: random decisions for a large tensor-core
    GEMM mostly overflow shared memory."""
    try:
        point = space.named("default")
    except InvalidPoint:
        return None
    return point if space.check(point) is None else None


def export_batch(workloads: list[Workload], target: Target, out: Path, count: int, seed: int = 0,
                 config: MeasureConfig | None = None, progress=lambda *_: None, space: str | None = None,
                 defaults: list[Workload] = (), model: dict | None = None, counts: dict[str, int] | None = None) -> dict:
    """Build naive, hand (where the space has them) and `count` candidates per workload, in
    `space` (default: each workload's `default_space`), into a batch directory; and for each of
    `defaults` (a model's kernels) its default, TVM's own schedule, the model's baseline.
    `model` (name, key and kernel rows, see ImportedModel.kernel_rows) is stored on import,
    so that `show MODEL` knows the model's kernels; `counts` overrides `count` by workload key. The host times every kernel carefully
    (the final timing) after every check layer this machine would run."""
    config = config or MeasureConfig()
    tuned, baselines = {wl.key for wl in workloads}, {wl.key for wl in defaults}
    with Measurer(target, config) as measurer:
        writer = BatchWriter(out, target, measurer, config.timing(final=True), model)
        for wl in {wl.key: wl for wl in [*defaults, *workloads]}.values():
            batches = ([(DefaultSpace(wl, target), [(Label.DEFAULT, {})])] if wl.key in baselines else [])
            if wl.key in tuned:
                knobs = make_space(space or default_space(wl, target), wl, target)
                batches.append((knobs, choose_points(knobs, (counts or {}).get(wl.key, count), seed)))
            for knob_space, labelled in batches:
                writer.add(knob_space, labelled, config.seed, floor_s(wl, target))
            progress(wl, sum(len(labelled) for _, labelled in batches))
        return writer.close()


def export_model_batch(model, target: Target, out: Path, count: int, seed: int = 0, space: str = "sketch",
                       config: MeasureConfig | None = None, progress=lambda *_: None) -> dict:
    """A model's kernels (model.ImportedModel) as a batch: every kernel's default, and `count`
    candidates in `space` for each tunable one. Imported, the results are the model's records,
    as a `tune-model` run would have stored them (it resumes from them)."""
    tunable = [k.workload for k in model.kernels if k.tunable]
    return export_batch(tunable, target, out, count, seed, config, progress, space,
                        defaults=[k.workload for k in model.kernels],
                        model={"name": model.name, "key": model.key, "kernels": model.kernel_rows()})


def import_batch(batch: Path, db: Database) -> list[dict]:
    """Every candidate's outcome into the database, through the tuning round: one round per
    task and label (each one transaction; the roofline re-check refuses a timing below the
    floor), the points already stored skipped, so an interrupted import resumes. Per workload
    a summary: naive, hand, best and torch seconds."""
    manifest, results = read_batch(batch)
    info = results.get("baselines", {})
    hardware = (cuda_hardware(manifest["target"]["arch"], info.get("device_name", ""))
                if manifest["device"] == "cuda" else manifest["hardware"])
    groups: dict[tuple, list[dict]] = {}
    for entry in manifest["candidates"] + manifest["failed"]:
        groups.setdefault((entry["workload"], entry["space"], entry["label"], entry["case"]), []).append(entry)
    rows, stored = [], 0
    for (workload, space, label, case), entries in groups.items():
        answers = {point_key(e["point"]): result_of(e, results, manifest) for e in entries}
        tuner = TaskTuner(Task(workload, manifest["target_name"], hardware, space), None,
                          Given(None, [e["point"] for e in entries]), db,
                          floor=manifest["cases"][case].get("floor_s", 0.0), label=Label(label))
        stored += len(run_round(tuner, BatchResults(answers), len(entries)))
        rows += [(workload, label, r) for r in answers.values()]
    if rows and not stored:
        raise UserError(f"'{batch}' was already imported into '{db.path}'; importing it again would add nothing")
    if manifest.get("model"):
        db.add_model(**manifest["model"])
    return [_summary(case, spec, rows, info) for case, spec in manifest["cases"].items()]


def _summary(case: str, spec: dict, rows: list, info: dict) -> dict:
    mine = [(label, result) for workload, label, result in rows if workload == spec["workload"]]
    best = {}
    for label, result in mine:
        best[label] = min(best.get(label, math.inf), result.latency)
    torch = info.get("torch", {}).get(case)
    return {"workload": spec["workload"], "naive": best.get("naive", math.inf), "hand": best.get("hand", math.inf),
            "best": min(best.values(), default=math.inf), "candidates": len(mine),
            "correct": sum(r.ok for _, r in mine), "flops": spec["flops"],
            "torch": float(np.median(torch["runs"])) if torch and not torch["wrong"] else math.inf}
