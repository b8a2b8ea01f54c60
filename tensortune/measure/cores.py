"""Taking turns on this machine's cores with other tensortune processes.

A timing is honest only when nothing else runs on the cores it uses. Within one process the
measurer never builds while it times; across processes (two `tune` runs of different tasks,
a model and an operator) one lock file per machine sees to it: timing holds it alone,
building shares it. So one process's timing waits until the other's builds or timing are
done, and its builds wait while the other times. The system releases the lock when a
process ends, however it ends. Processes pinned to cores of their own may take turns apart:
TENSORTUNE_CORES_LOCK names another lock file (the test suite gives each pytest worker one).
"""
from __future__ import annotations

import fcntl
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

LOCK = Path(os.environ.get("TENSORTUNE_CORES_LOCK") or Path(tempfile.gettempdir()) / "tensortune-cores.lock")
SPIN = "TVM_THREAD_POOL_SPIN_COUNT"  # how long TVM's pool threads poll for work before they sleep
KERNEL_SPIN = os.environ.get(SPIN, "300000")  # kernels are timed with TVM's default, or the user's own


@contextmanager
def turn(alone: bool):
    """Hold the cores: `alone` to time on them, else shared with other builders."""
    with open(LOCK, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def share_with_torch() -> None:
    """Let TVM's pool threads sleep as soon as a kernel is done, in a process that runs whole
    models. By default they poll 300,000 times first; in a model that also calls torch's
    operators they then take the cores from torch's threads, and the build calling torch loses
    the end-to-end comparison it would otherwise win. TVM reads the setting once, when its pool
    first runs: call this before any kernel runs in the process. A user's own setting stays."""
    os.environ.setdefault(SPIN, "0")
