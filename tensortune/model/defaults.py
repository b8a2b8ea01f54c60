"""A model kernel's default, TVM's own schedule of it (space.DefaultSpace): where it is stored
and read back. The scheduler measures it once; the build keeps it where tuning did not beat it."""
from __future__ import annotations

from ..db import Database, Task
from ..result import Label, Result
from ..space.default import DefaultSpace
from ..target import Target


def default_task(key: str, target: Target) -> Task:
    """Where a kernel's default is stored: its task in the default space (TVM's own schedule)."""
    return Task(key, target.name, target.hardware, DefaultSpace.name)


def stored_default(db: Database, key: str, target: Target) -> Result | None:
    """The kernel's default (TVM's untuned kernel) as last measured on this hardware, or None."""
    stored = db.records(default_task(key, target), (Label.DEFAULT,))
    return stored[-1].result if stored else None
