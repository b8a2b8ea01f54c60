"""What a call across TVM's FFI costs a model, per call: the fused oneDNN layers a TVM build
calls back into torch (model/onednn.py), and a whole region called from torch (the backend's
and `tensortune.load`'s calls), each measured the ways it can cross:

- python: the layer called from Python with torch tensors, no FFI (the floor);
- from_dlpack: through the FFI with TVM tensors, converted in Python by `torch.from_dlpack`
  (tensortune's callbacks before tvm_ffi's conversion);
- exchange: through the FFI, converted in C by tvm_ffi (`convert_func(..., tensor_cls=torch.Tensor)`,
  DLPack's exchange API), as model/torch_ops.register registers them now;
- noop: the same crossing with a callback that does nothing (what the crossing alone costs).

For a region: a two-input, two-output Relax function called with `tvm.runtime.from_dlpack` on
each input and `torch.from_dlpack` on each output (before), and with torch tensors in and out
(tvm_ffi converts them; now). Every path's output is checked against the floor's.

Run alone on the machine:
    .venv/bin/python benchmarks/call_overhead.py [--out benchmarks/results/call_overhead.txt]
"""
from __future__ import annotations

import argparse
import os

from provenance import header, publish

from tensortune.model.vm import torch_seconds

THREADS = len(os.sched_getaffinity(0))


def layers() -> list[tuple[str, object, tuple]]:
    """(what, the onednn function, its arguments as a TVM build passes them, torch tensors)."""
    import torch

    from tensortune.model import onednn

    torch.manual_seed(0)
    cases = []
    for site, (rows, k, n) in enumerate([(64, 128, 128), (128, 768, 768)], start=1):
        x, w, b = torch.randn(rows, k), torch.randn(n, k) / k ** 0.5, torch.randn(n)
        cases.append((f"linear {rows}x{k}x{n}", onednn.linear, (x, w, b, site, "none", "", rows, n, 2)))
    x, w, b = torch.randn(1, 56, 56, 64), torch.randn(64, 64, 3, 3) / 24, torch.randn(64)
    cases.append(("conv2d 3x3 56x56x64 relu", onednn.conv2d, (x, w, b, 3, 1, 1, 1, 1, 1, 1, 1, "relu", "")))
    return cases


def crossings(func, args: tuple) -> dict[str, float]:
    """Seconds per call of `func(*args)` each way (the module docstring's)."""
    import torch
    import tvm
    import tvm_ffi

    as_tvm = [tvm.runtime.from_dlpack(a) if isinstance(a, torch.Tensor) else a for a in args]

    def converted_in_python(*values):
        return func(*[torch.from_dlpack(v) if isinstance(v, tvm.runtime.Tensor) else v for v in values])

    calls = {"python": lambda: func(*args),
             "from_dlpack": lambda f=tvm_ffi.convert_func(converted_in_python): f(*as_tvm),
             "exchange": lambda f=tvm_ffi.convert_func(func, tensor_cls=torch.Tensor): f(*as_tvm),
             "noop": lambda f=tvm_ffi.convert_func(lambda *values: values[0], tensor_cls=torch.Tensor): f(*as_tvm)}
    expected = func(*args)
    for name in ("from_dlpack", "exchange"):
        if not torch.equal(torch.from_dlpack(calls[name]()), expected):
            raise SystemExit(f"error: the {name} call's output differs from the direct call's")
    return {name: torch_seconds(call, THREADS) for name, call in calls.items()}


def region() -> dict[str, float]:
    """Seconds per call of a small Relax function called from torch, before and now."""
    import torch
    import tvm
    from tvm import relax
    from tvm.script import relax as R

    @tvm.script.ir_module
    class Region:
        @R.function
        def main(x: R.Tensor((1, 64), "float32"), y: R.Tensor((1, 64), "float32")):
            with R.dataflow():
                a = R.add(x, y)
                b = R.multiply(x, y)
                R.output(a, b)
            return (a, b)

    main = relax.VirtualMachine(tvm.compile(Region, target="llvm"), tvm.cpu())["main"]
    x, y = torch.randn(1, 64), torch.randn(1, 64)
    calls = {"from_dlpack": lambda: [torch.from_dlpack(o) for o in main(*[tvm.runtime.from_dlpack(t) for t in (x, y)])],
             "exchange": lambda: list(main(x, y))}
    if not all(torch.equal(a, b) for a, b in zip(calls["from_dlpack"](), calls["exchange"]())):
        raise SystemExit("error: the region's outputs differ between the two ways to call it")
    return {name: torch_seconds(call, THREADS) for name, call in calls.items()}


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the table to this file")
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    ways = ("python", "from_dlpack", "exchange", "noop")
    lines = [*header(THREADS), "us per call (median, warm); over python: what the FFI crossing adds to the direct call", "",
             f"{'call':28}" + "".join(f"{w:>13}" for w in ways) + f"{'from_dlpack+':>14}{'exchange+':>11}"]
    for what, func, call_args in layers():
        t = crossings(func, call_args)
        lines.append(f"{what:28}" + "".join(f"{t[w] * 1e6:13.1f}" for w in ways)
                     + f"{(t['from_dlpack'] - t['python']) * 1e6:14.1f}{(t['exchange'] - t['python']) * 1e6:11.1f}")
        print(lines[-1], flush=True)
    t = region()
    lines += ["", f"a region (2 inputs, 2 outputs) called from torch: from_dlpack {t['from_dlpack'] * 1e6:.1f} us, "
                  f"exchange {t['exchange'] * 1e6:.1f} us ({(t['from_dlpack'] - t['exchange']) * 1e6:.1f} us less a call)"]
    publish("\n".join(lines), args.out)


if __name__ == "__main__":
    main()
