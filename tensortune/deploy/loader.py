"""Tuned models and kernels back into PyTorch.

`load(folder)` takes what `tensortune tune-model --out` or `tensortune export` wrote and
returns a callable on torch tensors: inputs go to TVM zero-copy through DLPack, outputs come
back the same way. Kernels assume contiguous data aligned to 64 bytes (vectorised loads); a
non-contiguous or misaligned tensor is copied into an aligned one first, never passed on to
crash. A kernel can also be registered as a torch custom op, so that it works inside
`torch.compile`d code.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from ..errors import UserError
from ..target import size_tvm_pool

ALIGNMENT = 64  # bytes: TVM's kernels assume it


def load(folder: str | os.PathLike):
    """A TunedModel (from tune-model's folder) or a TunedKernel (from export's folder)."""
    folder = Path(folder)
    if (folder / "model.json").is_file():
        return TunedModel(folder)
    if (folder / "record.json").is_file():
        return TunedKernel(folder)
    if (folder / "dispatch.json").is_file():
        return DispatchedKernel(folder)
    raise UserError(f"'{folder}' holds no tuned model (model.json), kernel (record.json) or dispatch table "
                    "(dispatch.json); write one with 'tensortune tune-model --out', 'tensortune export' or "
                    "'tensortune tune FAMILY --shapes ... --out'")


def _read(path: Path) -> dict:
    """The folder's description; a file that is not one is a UserError naming it."""
    try:
        meta = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(f"'{path}' cannot be read ({type(err).__name__}: {err}); write the folder again with "
                        "the command that made it") from None
    if not isinstance(meta, dict):
        raise UserError(f"'{path}' is not an object of tensortune's; write the folder again with the command that made it")
    return meta


def _prepared(tensor, spec: dict, what: str, device: str):
    """The tensor as a kernel may read it: checked against the expected shape, dtype and
    device ("cpu" or "cuda"), contiguous and aligned (copied when it is not)."""
    import torch

    dtype = getattr(torch, spec["dtype"])
    if not isinstance(tensor, torch.Tensor):
        raise UserError(f"{what}: expected a torch tensor, got {type(tensor).__name__}")
    if list(tensor.shape) != list(spec["shape"]) or tensor.dtype != dtype:
        raise UserError(f"{what}: expected shape {tuple(spec['shape'])} {spec['dtype']}, "
                        f"got {tuple(tensor.shape)} {str(tensor.dtype).removeprefix('torch.')}")
    if tensor.device.type != device:
        raise UserError(f"{what}: expected a tensor on {device} (the device its kernels were built for), "
                        f"got one on {tensor.device}; move it with .to('{device}')")
    return aligned(tensor)


def aligned(tensor):
    """The tensor, detached, or a contiguous, aligned copy where a kernel could not read it
    in place."""
    import torch

    if tensor.requires_grad:
        tensor = tensor.detach()
    if not tensor.is_contiguous() or tensor.data_ptr() % ALIGNMENT:
        tensor = tensor.clone(memory_format=torch.contiguous_format)  # a fresh, aligned allocation
    return tensor


def torch_outputs(out) -> list:
    """A VM call's outputs as a list of torch tensors. Called with torch tensors, TVM's FFI
    converts them in C (DLPack's exchange API) and returns torch tensors: 2.6 us a call less
    than tvm.runtime.from_dlpack and torch.from_dlpack on each (benchmarks/call_overhead.py)."""
    import torch

    return [out] if isinstance(out, torch.Tensor) else list(out)


def _device(meta: dict) -> str:
    """Where the kernels run, as torch names it: "cuda" for a GPU target, else "cpu"."""
    return "cuda" if meta["target"]["kind"] == "cuda" else "cpu"


class TunedModel:
    """A tuned model: call it with the model's inputs (torch tensors) as the module is called."""

    def __init__(self, folder: Path):
        self.meta = _read(folder / "model.json")
        size_tvm_pool(self.meta["threads"])
        import tvm
        from tvm import relax

        from ..measure.runner import device_of

        self.device = _device(self.meta)
        if self.meta.get("torch_ops"):  # the build calls torch's operators by name
            from ..measure.cores import share_with_torch
            from ..model.torch_ops import register

            share_with_torch()  # as it was timed when chosen (model/vm.py)
            register()
        self._vm = relax.VirtualMachine(tvm.runtime.load_module(str(folder / "model.so")), device_of(self.device))
        self._main = self._vm["main"]

    def __call__(self, *inputs):
        specs = self.meta["inputs"]
        if len(inputs) != len(specs):
            raise UserError(f"{self.meta['model']} takes {len(specs)} inputs, got {len(inputs)}")
        outs = torch_outputs(self._main(*[_prepared(t, s, f"input {i}", self.device)
                                          for i, (t, s) in enumerate(zip(inputs, specs))]))
        return outs[0] if len(outs) == 1 else tuple(outs)


class TunedKernel:
    """One exported kernel: call it with its inputs; the output is allocated and returned."""

    def __init__(self, folder: Path):
        self.meta = _read(folder / "record.json")
        size_tvm_pool(self.meta.get("threads", 1))
        import tvm

        self.device = _device(self.meta)
        self._main = tvm.runtime.load_module(str(folder / "kernel.so"))[self.meta["entry"]]

    def __call__(self, *inputs):
        import torch

        specs, out = self.meta["inputs"], self.meta["output"]
        if len(inputs) != len(specs):
            raise UserError(f"{self.meta['workload']} takes {len(specs)} inputs, got {len(inputs)}")
        prepared = [_prepared(t, s, f"input {i}", self.device) for i, (t, s) in enumerate(zip(inputs, specs))]
        result = torch.empty(out["shape"], dtype=getattr(torch, out["dtype"]), device=self.device)
        self._main(*prepared, result)
        return result

    def as_custom_op(self, name: str):
        """Register the kernel as the torch custom op `tensortune::<name>` (with a fake
        implementation giving the output's shape and dtype, so torch.compile can trace it);
        returns the op."""
        import torch

        out = self.meta["output"]
        names = [f"x{i}" for i in range(len(self.meta["inputs"]))]
        schema = "(" + ", ".join(f"Tensor {n}" for n in names) + ") -> Tensor"
        op = torch.library.custom_op(f"tensortune::{name}", lambda *inputs: self(*inputs), mutates_args=(),
                                     schema=schema)
        op.register_fake(lambda *inputs: inputs[0].new_empty(out["shape"], dtype=getattr(torch, out["dtype"])))
        return op


class DispatchedKernel:
    """One operator at several shapes (`tensortune tune FAMILY --shapes ... --out`): a call
    goes to the kernel built for its inputs' shapes."""

    def __init__(self, folder: Path):
        table = _read(folder / "dispatch.json")
        self.kernels = {}
        for entry in table["kernels"]:
            kernel = TunedKernel(folder / entry["folder"])
            self.kernels[tuple(tuple(spec["shape"]) for spec in kernel.meta["inputs"])] = kernel

    def __call__(self, *inputs):
        shapes = tuple(tuple(getattr(t, "shape", ())) for t in inputs)
        kernel = self.kernels.get(shapes)
        if kernel is None:
            raise UserError(f"no kernel for inputs of shapes {list(shapes)}; this table has "
                            + "; ".join(str(list(k)) for k in self.kernels))
        return kernel(*inputs)
