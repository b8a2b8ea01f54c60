"""A model end to end, in one sitting: torch eager, TVM's default build and the tuned build.

Each is the median of warm repeated calls (at least 50 ms a repeat, `runner.time_on_cpu`), in
this process, with the same threads: torch's intra-op pool set to the target's threads, TVM's
pool sized by TVM_NUM_THREADS (which the caller sets before TVM starts). The three are timed
one after the other on the same inputs, so their ratios hold even where absolute times drift.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from ..target import Target
from .build import BuiltModel, build_checked, fresh_case
from .vm import eager_seconds, vm_seconds


@dataclass(frozen=True)
class EndToEnd:
    """Seconds per call of the whole model, each the median of warm repeats."""

    eager_s: float  # torch eager, the module as the user gave it
    default_s: float  # TVM's build with every kernel at its default
    tuned_s: float  # TVM's build with the tuned kernels
    threads: int
    measured: float  # when (time.time())

    @property
    def vs_eager(self) -> float:
        """How many times faster the tuned model is than torch eager (below 1: slower)."""
        return self.eager_s / self.tuned_s

    @property
    def vs_default(self) -> float:
        return self.default_s / self.tuned_s

    def as_dict(self) -> dict:
        return {**asdict(self), "tuned_vs_eager": self.vs_eager, "tuned_vs_default": self.vs_default}


def measure_end_to_end(built: BuiltModel, target: Target) -> EndToEnd:
    """torch eager, the default build and `built`, timed now on the same fresh inputs."""
    model = built.model
    inputs, _ = fresh_case(model, seed=2)
    default = build_checked(model, target, {}, {}, seed=1)
    eager = eager_seconds(model.module, inputs, target.threads)
    return EndToEnd(eager, vm_seconds(default.executable, inputs, target), vm_seconds(built.executable, inputs, target),
                    target.threads, time.time())
