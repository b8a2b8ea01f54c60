"""Train the packaged cost model on the whole corpus and save it in the package
(tensortune/costmodel/pretrained/KIND.ubj), with the machines, tasks and workload keys it
learned from (benchmarks/vs_metaschedule.py refuses to race on those keys without --seen).

The corpus: the leaderboard's tables and the training-only ones (corpus.TRAINING), and every
kernel benchmarks/grow_corpus.py measured, on every machine class it has a folder of
(benchmarks/corpus/grown/HARDWARE/). Each table is one ranking group; its points' features are
extracted for the CPU its table was measured on (the sketch space follows the target's
features), not this one. A table whose kernel the importer no longer makes as it was measured
is left out, and named.

    .venv/bin/python benchmarks/pretrain.py
"""
from __future__ import annotations

import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import corpus  # noqa: E402

from tensortune.costmodel import CostModel  # noqa: E402
from tensortune.costmodel.model import PRETRAINED, pretrained_path  # noqa: E402
from tensortune.measure.config import MeasureConfig  # noqa: E402
from tensortune.target import make_target  # noqa: E402


def tables() -> list[tuple[corpus.CorpusTask, Path]]:
    """Every corpus task with the folder its table is in."""
    grown = [(task, folder) for folder in sorted(corpus.GROWN.glob("*")) if folder.is_dir()
             for task in corpus.grown_tasks(folder.name)]
    return [*((task, corpus.TABLES) for task in corpus.TRAINING), *grown]


def learned(threads: int) -> tuple[list, dict, list[str]]:
    """The ranking groups of every table that still names its kernel, what the model will say it
    learned from (tasks, workload keys, machine classes), and the tables left out."""
    groups, names, keys, hardware, stale = [], [], set(), set(), []
    for task, folder in tables():
        table = corpus.load_table(task, folder)
        if table is None:
            stale.append(f"{task.name} (no table)")
            continue
        # the table's CPU as LLVM names it: the first part of its hardware class ("rocketlake-2t-...")
        target = make_target("cpu", threads, mcpu=table.hardware.split("-")[0])
        try:
            group = corpus.group(task, target, folder)
        except SystemExit:  # the importer names or builds the kernel otherwise now: its points mean something else
            stale.append(task.name)
            continue
        if group is not None:
            groups.append(group)
            names.append(task.name)
            keys.add(table.workload)
            hardware.add(table.hardware)
    return groups, {"tasks": names, "keys": sorted(keys), "hardware": ", ".join(sorted(hardware))}, stale


def main() -> None:
    threads = MeasureConfig().threads
    start = time.perf_counter()
    groups, info, stale = learned(threads)
    if not groups:
        raise SystemExit("error: no corpus table to learn from: run benchmarks/grow_corpus.py first")
    model = CostModel.train(groups, info | {"machine": corpus.machine(), "command": "benchmarks/pretrain.py",
                                            "date": f"{datetime.now(timezone.utc):%Y-%m-%d}"}, threads=threads)
    PRETRAINED.mkdir(exist_ok=True)
    path = pretrained_path(make_target("cpu", threads).kind)
    model.save(path)
    if stale:
        print(f"left out, their kernel no longer imported as measured: {', '.join(stale)}")
    print(f"{path}: {len(info['tasks'])} tasks ({info['hardware']}), {path.stat().st_size // 1024} KiB, "
          f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
