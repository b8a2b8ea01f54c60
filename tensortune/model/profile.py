"""Where a built model's time goes: the seconds of each function its VM calls (a TVM kernel,
a packed oneDNN layer, torch's attention, a VM builtin), by symbol, and each one's share of a
call. It names the kernels that hold a model back against torch."""
from __future__ import annotations

import time
from collections import defaultdict

import numpy as np

CALLS = 10  # profiled calls of the model, after one warm call


def seconds_by_function(executable, inputs: list[np.ndarray], kind: str = "llvm",
                        calls: int = CALLS) -> dict[str, float]:
    """Seconds per model call spent in each function the VM calls, by its symbol (a function
    called twice a model call counts twice), measured with the VM's instrument hook on the
    target kind's device: each span ends when the function returns, so on a GPU it is the
    launch's time, not the kernel's. The hook's own cost (a Python call per function) is in
    the spans: compare shares, not sums with an unprofiled timing."""
    from tvm import relax

    from .vm import vm_on

    vm, dev, args = vm_on(executable, inputs, kind)
    vm["main"](*args)  # warm: the first call allocates and packs
    totals: dict[str, float] = defaultdict(float)
    started: list[float] = []

    def instrument(func, symbol, before_run, ret_value, *_):
        if before_run:
            started.append(time.perf_counter())
        else:
            totals[symbol] += time.perf_counter() - started.pop()
        return relax.VMInstrumentReturnKind.NO_OP

    vm.set_instrument(instrument)
    for _ in range(calls):
        vm["main"](*args)
    dev.sync()
    return {symbol: seconds / calls for symbol, seconds in totals.items()}


def top_functions(seconds: dict[str, float], count: int = 5) -> list[tuple[str, float, float]]:
    """The `count` functions taking most time: (symbol, seconds per model call, share of the
    profiled total)."""
    total = sum(seconds.values()) or 1.0
    ranked = sorted(seconds.items(), key=lambda item: -item[1])[:count]
    return [(symbol, s, s / total) for symbol, s in ranked]
