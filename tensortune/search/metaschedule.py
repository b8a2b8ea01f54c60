"""TVM's own tuner (MetaSchedule) as a peer strategy, run under its own loop.

MetaSchedule does not fit ask/tell: `tune_tir` owns its loop (evolutionary search guided by
an XGBoost cost model, its own builder and runner). We run it with the same trial budget and
thread count, then read its records in measurement order. The tuner re-verifies and re-times
every one of them with our measurement, so both tuners are compared with one yardstick.
"""
from __future__ import annotations

import json
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

NAME = "metaschedule"
TRIALS_PER_ROUND = 32
# Each round MetaSchedule starts fresh build workers that import TVM's tensor intrinsics
# (about 26 s here); its default 30 s build timeout then fails every candidate.
BUILD_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class PeerRun:
    traces: list[str]  # trace JSON text, in measurement order
    own_latency_s: list[float]  # MetaSchedule's own timing of each (1e10 for its failures)
    wall_s: float


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


def run_metaschedule(workload, target_spec: dict, trials: int, threads: int, work_dir: str, seed: int) -> PeerRun:
    import tvm
    from tvm.s_tir import meta_schedule as ms

    os.environ["TVM_NUM_THREADS"] = str(threads)  # its runner processes inherit this
    start = time.perf_counter()
    with _stdout_to_stderr():
        ms.tune_tir(tvm.IRModule({"main": workload.prim_func()}), tvm.target.Target(target_spec), work_dir,
                    max_trials_global=trials, num_trials_per_iter=TRIALS_PER_ROUND, seed=max(seed, 1),
                    builder=ms.builder.LocalBuilder(max_workers=threads, timeout_sec=BUILD_TIMEOUT_S),
                    runner=ms.runner.LocalRunner(timeout_sec=60), num_tuning_cores=threads)
    wall_s = time.perf_counter() - start
    traces, own = [], []
    with open(Path(work_dir) / "database_tuning_record.json") as records:
        for line in records:  # one record per line, in measurement order
            _, (trace, run_secs, *_) = json.loads(line)
            traces.append(json.dumps(trace))
            own.append(sum(run_secs) / len(run_secs) if run_secs else 1e10)
    return PeerRun(traces, own, wall_s)
