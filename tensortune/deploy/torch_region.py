"""A region of a PyTorch graph run by TVM: torch tensors in and out through DLPack, no copy.

On its first call the region is also run in PyTorch on the same inputs and the two are
compared (the tolerance `tune-model` uses for a whole model); if they differ it says so once
and runs in PyTorch from then on: a wrong kernel is never what the model computes with.
"""
from __future__ import annotations

import warnings

import torch
from torch import nn

from ..errors import TensortuneWarning
from .loader import aligned, torch_outputs


class TVMRegion(nn.Module):
    """Called like the region's GraphModule (`eager`): same inputs, same outputs."""

    def __init__(self, built, eager, kind: str = "llvm"):
        """`built`: the region as model.build_model built it; `eager`: its GraphModule."""
        from tvm import relax

        from ..measure.cores import share_with_torch
        from ..measure.runner import device_of

        super().__init__()
        share_with_torch()  # TVM's pool threads would otherwise poll through torch's operators
        self.name, self.built, self.eager = built.model.name, built, eager
        output = next(n for n in eager.graph.nodes if n.op == "output")  # its structure, without running it again
        self.returns_tuple = isinstance(output.args[0], (tuple, list))
        self._main = relax.VirtualMachine(built.executable, device_of(kind))["main"]
        self.checked = False
        self.in_torch = ""  # why the region runs in PyTorch, once its check failed

    def forward(self, *inputs):
        if self.in_torch:
            return self.eager(*inputs)
        outs = self._tvm(inputs)
        if not self.checked:
            self.checked = True
            expected = self._check(inputs, outs)
            if self.in_torch:
                return expected
        return tuple(outs) if self.returns_tuple else outs[0]

    def _tvm(self, inputs) -> list:
        return torch_outputs(self._main(*[aligned(t) for t in inputs]))

    def _check(self, inputs, outs: list):
        """Eager's outputs for `inputs`; where TVM's differ, the region goes to PyTorch."""
        from ..model.build import compare, tolerance

        with torch.no_grad():
            expected = self.eager(*inputs)
        flat = list(expected) if isinstance(expected, (tuple, list)) else [expected]
        error = compare([o.numpy() for o in outs], [e.detach().numpy() for e in flat])
        limit = tolerance(flat[0].detach().numpy().dtype)
        if error > limit:
            self.in_torch = f"differs from eager by {error:.1e} (relative) on its first call (tolerance {limit:.1e})"
            warnings.warn(f"tensortune: {self.name} runs in PyTorch: it {self.in_torch}", TensortuneWarning, stacklevel=4)
        return expected
