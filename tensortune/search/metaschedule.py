"""TVM's own tuner (MetaSchedule) as a peer strategy, run under its own loop.

MetaSchedule does not fit ask/tell: `tune_tir` owns its loop (evolutionary search guided by
an XGBoost cost model, its own builder and runner). We run it with the same trial budget and
thread count, then read its records in measurement order. The tuner re-verifies and re-times
every one of them with our measurement, so both tuners are compared with one yardstick.
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from ..target import Target

NAME = "metaschedule"
# the level of what MetaSchedule prints on the console (its task tables are INFO); its work
# directory's logs/ keep everything whatever this is. The CLI lowers it to WARNING unless --verbose.
CONSOLE_LEVEL = logging.INFO
TRIALS_PER_ROUND = 32
# Each round MetaSchedule starts fresh build workers; its default build imports every target's
# tensor intrinsics (about 20 s a worker here), and its default
# 30 s build timeout then failed every candidate.
BUILD_TIMEOUT_S = 180.0


@contextmanager
def _stdout_to_stderr():
    """MetaSchedule logs to standard output, at the C++ level too; our stdout carries results
    (`tune --json`), so its chatter goes to standard error."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def work_dir(db_path: str, task) -> Path:
    """Where MetaSchedule keeps its own records of a task: beside our database, so that an
    interrupted run resumes from them (its search starts from its best measured schedules)."""
    digest = hashlib.sha1("|".join((task.workload, task.target, task.hardware)).encode()).hexdigest()[:12]
    return Path(db_path).with_name(Path(db_path).name + ".metaschedule") / digest


def run_metaschedule(workload, target: Target, trials: int, threads: int, folder: Path, seed: int) -> float:
    """`trials` more of MetaSchedule's own trials, recorded in `folder`; returns its wall seconds."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from ..target import load_intrinsics

    # here and, first thing, in each build worker: its default build then imports no other
    # target's intrinsics (the builds are of scheduled modules; nothing looks them up)
    load_intrinsics(target.kind)
    os.environ["TVM_NUM_THREADS"] = str(threads)  # its runner processes inherit this
    folder.mkdir(parents=True, exist_ok=True)
    # tune_tir sets its console handler to its logger's level, and that logger to DEBUG after
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(CONSOLE_LEVEL)
    start = time.perf_counter()
    with _stdout_to_stderr():
        ms.tune_tir(tvm.IRModule({"main": workload.prim_func()}), tvm.target.Target(target.spec), str(folder),
                    max_trials_global=trials, num_trials_per_iter=TRIALS_PER_ROUND, seed=seed + 1,  # 0: unseeded
                    builder=ms.builder.LocalBuilder(max_workers=threads, timeout_sec=BUILD_TIMEOUT_S,
                                                    initializer=functools.partial(load_intrinsics, target.kind)),
                    runner=ms.runner.LocalRunner(timeout_sec=60), num_tuning_cores=threads)
    return time.perf_counter() - start


def recorded_traces(folder: Path) -> list[str]:
    """The traces (JSON text) MetaSchedule measured in `folder`, in measurement order."""
    path = folder / "database_tuning_record.json"
    if not path.is_file():
        return []
    with open(path) as records:  # one record per line
        return [json.dumps(json.loads(line)[1][0]) for line in records if line.strip()]
