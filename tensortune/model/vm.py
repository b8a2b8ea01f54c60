"""A built model run in TVM's Relax VM: its outputs, and its seconds per call (and torch's, timed alike)."""
from __future__ import annotations

import contextlib
import statistics
from typing import Callable

import numpy as np

from ..measure.cores import share_with_torch, turn
from ..measure.runner import device_of, time_on_cpu
from ..target import Target

REPEATS = 7  # warm repeats of a whole model, each lasting at least MIN_REPEAT_S
MIN_REPEAT_S = 0.05


def run(executable, inputs: list[np.ndarray], kind: str = "llvm") -> list[np.ndarray]:
    """The built model's outputs for `inputs`, run on the target kind's device."""
    out = run_on(executable, inputs, kind)()
    return [o.numpy() for o in (out if not hasattr(out, "numpy") else [out])]


def run_on(executable, inputs: list[np.ndarray], kind: str = "llvm"):
    """A call that runs the built model once on `inputs`, copied to the device once, and
    returns when the device has finished (for timing)."""
    vm, dev, args = vm_on(executable, inputs, kind)
    main = vm["main"]

    def call():
        out = main(*args)
        dev.sync()
        return out

    return call


def vm_on(executable, inputs: list[np.ndarray], kind: str = "llvm"):
    """The built model's VM on the target kind's device, the device, and `inputs` copied there."""
    import tvm
    from tvm import relax

    share_with_torch()  # every build timed alike: one of them may call torch
    dev = device_of(kind)
    return relax.VirtualMachine(executable, dev), dev, [tvm.runtime.tensor(a, dev) for a in inputs]


def vm_seconds(executable, inputs, target: Target, lost_s: float = float("inf")) -> float:
    """Seconds per call of a built model in TVM's VM, inputs resident on its device; one cold
    call's where it took over `lost_s` (see time_on_cpu)."""
    call = run_on(executable, inputs, target.kind)
    with turn(alone=True):  # as a kernel's timing: while no other tensortune process builds or times
        return statistics.median(time_on_cpu(call, REPEATS, MIN_REPEAT_S, lost_s=lost_s))


ROUNDS = 3  # timings of each of two things compared, taken in turn


def in_turn(timer, first: tuple[str, Callable[[], float]], second: tuple[str, Callable[[float], float]],
            lost: float = float("inf")) -> tuple[float, float]:
    """Seconds per call of two things compared, each a (label, timing): medians of ROUNDS
    timings of each, taken in turn, each through `timer(label, timing)`, so that a drift of the
    shared machine's speed hits both alike (one timing of each, minutes apart, once kept the
    slower). The second's timing is given the seconds past which it may stop at one call (`lost`
    times the first's first timing), and it is timed no further once it took longer."""
    mine, theirs = rounds_in_turn(timer, first, second, lost)
    return statistics.median(mine), statistics.median(theirs)


def rounds_in_turn(timer, first: tuple[str, Callable[[], float]], second: tuple[str, Callable[[float], float]],
                   lost: float = float("inf")) -> tuple[list[float], list[float]]:
    """`in_turn`'s timings themselves, round by round: the first's and the second's."""
    mine, theirs = [], []
    for _ in range(ROUNDS):
        mine.append(timer(first[0], first[1]))
        theirs.append(timer(second[0], lambda: second[1](lost * mine[0])))
        if theirs[-1] > lost * mine[0]:
            break
    return mine, theirs


def torch_seconds(call, threads: int) -> float:
    """Seconds per call of `call()` (torch code, without autograd) with `threads` intra-op
    threads: the median of warm repeats."""
    import torch

    with torch_threads(threads), torch.no_grad():
        return statistics.median(time_on_cpu(call, REPEATS, MIN_REPEAT_S))


@contextlib.contextmanager
def torch_threads(threads: int):
    """Torch's intra-op threads set to `threads` inside, restored after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def eager_seconds(module, inputs: list[np.ndarray], threads: int) -> float:
    """torch eager's seconds per call of `module` on `inputs`, with `threads` intra-op threads."""
    import torch

    tensors = [torch.from_numpy(a) for a in inputs]
    return torch_seconds(lambda: module(*tensors), threads)
