"""Taking turns on this machine's cores with other tensortune processes.

A timing is honest only when nothing else runs on the cores it uses. Within one process the
measurer never builds while it times; across processes (two `tune` runs of different tasks,
a model and an operator) one lock file per machine sees to it: timing holds it alone,
building shares it. So one process's timing waits until the other's builds or timing are
done, and its builds wait while the other times. The system releases the lock when a
process ends, however it ends.
"""
from __future__ import annotations

import fcntl
import tempfile
from contextlib import contextmanager
from pathlib import Path

LOCK = Path(tempfile.gettempdir()) / "tensortune-cores.lock"


@contextmanager
def turn(alone: bool):
    """Hold the cores: `alone` to time on them, else shared with other builders."""
    with open(LOCK, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
