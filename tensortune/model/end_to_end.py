"""A model end to end, in one sitting: torch eager, TVM's default build and the tuned build.

Each is the median of warm repeated calls (at least 50 ms a repeat, `runner.time_on_cpu`), in
this process, with the same threads: torch's intra-op pool set to the target's threads, TVM's
pool sized by TVM_NUM_THREADS (which the caller sets before TVM starts). The three are timed
one after the other on the same inputs, so their ratios hold even where absolute times drift.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

from ..target import Target
from .build import BuiltModel, build_checked, fresh_case
from .importer import ImportedModel
from .vm import MIN_REPEAT_S, REPEATS, vm_seconds


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
    eager = eager_seconds(model, target.threads, inputs)
    return EndToEnd(eager, vm_seconds(default.executable, inputs, target), vm_seconds(built.executable, inputs, target),
                    target.threads, time.time())


def eager_seconds(model: ImportedModel, threads: int, inputs) -> float:
    """torch eager's seconds per call of the model's module, with `threads` intra-op threads."""
    import torch

    tensors = [torch.from_numpy(a) for a in inputs]
    return torch_seconds(lambda: model.module(*tensors), threads)


def torch_seconds(call, threads: int) -> float:
    """Seconds per call of `call()` (torch code, without autograd) with `threads` intra-op
    threads: the median of warm repeats."""
    import torch

    from ..measure.runner import time_on_cpu

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            return statistics.median(time_on_cpu(call, REPEATS, MIN_REPEAT_S))
    finally:
        torch.set_num_threads(before)
