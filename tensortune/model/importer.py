"""A PyTorch model in, its distinct kernels out.

`nn.Module` + example inputs -> `torch.export` -> TVM Relax (`from_exported_program`) -> TVM's
standard lowering and fusion (the passes `tvm.compile` runs for a CPU, after the inference
decompositions MetaSchedule's own model tuning applies: batch norm becomes arithmetic that fuses
into the convolution before it) -> the fused kernels (TensorIR functions), each with how many
times the model calls it. Every distinct kernel is one tuning task.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import operator
import warnings
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from ..errors import NotConvertible, UserError
from ..target import Target
from ..workloads.kernel import KernelWorkload
from .fast_math import fast_math
from .layout import TVM_WEIGHTS, channels_last, mark_layout_free
from .winograd import winograd as to_winograd
from .torch_ops import dispatch_to_torch


@dataclass(frozen=True)
class ModelKernel:
    """One fused kernel of a model: `name` is its function in the model's module."""

    name: str
    workload: KernelWorkload
    calls: int
    outputs: int  # tensors it writes; kernels writing several are not tuned (they keep TVM's default)

    @property
    def tunable(self) -> bool:
        return self.outputs == 1


@dataclass
class ImportedModel:
    name: str
    module: object  # the torch nn.Module, for the end-to-end check
    example_inputs: tuple
    mod: object  # the lowered and fused Relax IRModule
    kernels: list[ModelKernel]
    torch_ops: int = 0  # operations this build calls torch for (model.torch_ops), the rest in TVM's kernels
    source: object = None  # the Relax module before lowering, from which other builds are made
    kept_in_tvm: frozenset[int] = frozenset()  # operations torch could take that this build leaves in TVM
    # the same model with every operation torch implements called in torch (its kernels: what
    # remains around them), built too and kept where it is faster end to end; None if not made
    with_torch_ops: "ImportedModel | None" = None
    # checked on the example inputs themselves, not on fresh draws like them: a region of a
    # graph (model/partition.py) takes weights as inputs, which random draws make meaningless
    # (a batch norm's variance drawn negative)
    fixed_inputs: bool = False
    # the (number, FLOPs) of each operation torch could take (torch_ops.dispatch_to_torch), in
    # the build made by torch_build
    torch_sites: tuple[tuple[int, int], ...] = ()

    def all_kernels(self) -> list[ModelKernel]:
        """The kernels of this build and of `with_torch_ops`, each distinct kernel once: what
        tuning the model tunes."""
        kernels = {k.workload.key: k for k in self.kernels}
        for kernel in self.with_torch_ops.kernels if self.with_torch_ops else []:
            kernels.setdefault(kernel.workload.key, kernel)
        return list(kernels.values())

    @property
    def key(self) -> str:
        """The model's name and a digest of its kernels: a changed model is a new one."""
        text = "|".join(sorted(f"{k.workload.key}x{k.calls}" for k in self.kernels))
        return f"{self.name}#{hashlib.sha1(text.encode()).hexdigest()[:12]}"


    def kernel_rows(self) -> list[dict]:
        """What the records keep of each kernel (see Database.add_model), as plain data."""
        return [{"function": k.name, "key": k.workload.key, "name": k.workload.name, "source": k.workload.source,
                 "calls": k.calls, "outputs": k.outputs} for k in self.all_kernels()]


def load_factory(spec: str):
    """(module, example inputs) from 'FILE.py:FACTORY', or from a zoo model's name."""
    from . import zoo

    if spec in zoo.ZOO:
        return spec, zoo.ZOO[spec]()
    path, _, name = spec.partition(":")
    if not name or not Path(path).is_file():
        raise UserError(f"'{spec}' is neither a zoo model ({', '.join(zoo.ZOO)}) nor FILE.py:FACTORY with an existing file")
    module_spec = importlib.util.spec_from_file_location(f"tensortune_model_{Path(path).stem}", path)
    source = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(source)
        factory = getattr(source, name)
    except AttributeError:
        raise UserError(f"'{path}' has no function '{name}'") from None
    except Exception as err:
        raise UserError(f"cannot import '{path}': {type(err).__name__}: {first_message(err)}") from None
    try:
        made = factory()
    except Exception as err:
        raise UserError(f"the factory '{spec}' raised {type(err).__name__}: {first_message(err)}") from None
    return name, _check_made(spec, made)


def _check_made(spec: str, made):
    import torch

    if not (isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], torch.nn.Module)):
        raise UserError(f"the factory '{spec}' must return (nn.Module, example inputs), got {type(made).__name__}")
    module, inputs = made
    inputs = inputs if isinstance(inputs, (tuple, list)) else (inputs,)
    if not all(isinstance(t, torch.Tensor) for t in inputs):
        raise UserError(f"the factory '{spec}': example inputs must be torch tensors")
    return module.eval(), tuple(inputs)


def import_model(name: str, module, example_inputs: tuple, target: Target, torch_ops: bool = False,
                 fixed_inputs: bool = False, winograd: bool = False) -> ImportedModel:
    """Export, convert, lower and fuse; a model that cannot make the way is a UserError that
    names the step and the cause. With `torch_ops` (CPU targets), also the build that calls
    torch for the operations it implements (model.torch_ops), where the model has any. With
    `fixed_inputs`, builds are checked on the example inputs (see ImportedModel). With
    `winograd` (CPU targets), TVM's 3x3 convolutions are Winograd's (model/winograd.py): off
    by default, as tuned at 16 trials a kernel they are slower than the direct ones
    (benchmarks/results/all_tvm.txt)."""
    relax_mod = to_relax(name, module, example_inputs)
    cpu = target.kind == "llvm"  # TVM's own kernels there read NHWC activations and HWIO weights
    if cpu:
        nhwc = channels_last(relax_mod, TVM_WEIGHTS)
        mod = lower_and_fuse(to_winograd(nhwc) if winograd else nhwc, target)
    else:
        mod = lower_and_fuse(relax_mod, target)
    model = ImportedModel(name, module, tuple(example_inputs), mod, _kernels(mod), source=relax_mod,
                          fixed_inputs=fixed_inputs)
    if torch_ops and cpu:
        model.with_torch_ops = torch_build(model, target)
    return model


def torch_build(model: ImportedModel, target: Target, keep: frozenset[int] = frozenset()) -> ImportedModel | None:
    """The model calling torch for each operation torch implements but those numbered in
    `keep` (model.torch_ops.dispatch_to_torch), lowered and fused; None if that is none."""
    dispatched, met = dispatch_to_torch(model.source, keep)
    count = len(met) - len(keep)
    if not count:
        return None
    mod = lower_and_fuse(dispatched, target)
    return ImportedModel(model.name, model.module, model.example_inputs, mod, _kernels(mod), count, model.source, keep,
                         fixed_inputs=model.fixed_inputs, torch_sites=tuple(met))


def export(name: str, module, example_inputs: tuple):
    """torch.export's program of the module; a model it cannot capture is a UserError."""
    import torch

    try:
        # torch logs the graph it failed on, and warns about its own deprecations, on stderr:
        # the error below says what went wrong in one line
        with torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            return torch.export.export(module, tuple(example_inputs))
    except Exception as err:
        raise UserError(f"torch.export cannot capture {name}: {type(err).__name__}: {first_message(err)}") from None


def to_relax(name: str, module, example_inputs: tuple):
    """The model as a Relax module in inference form (batch norm decomposed into arithmetic),
    before lowering: what MetaSchedule's own model tuning starts from."""
    from tvm import relax

    exported = export(name, module, example_inputs)
    try:
        from tvm.relax.frontend.torch import from_exported_program

        with warnings.catch_warnings():  # torch's deprecation notices, raised inside TVM's frontend
            warnings.simplefilter("ignore")
            mod = from_exported_program(exported, custom_convert_map=CONVERTERS,
                                        run_ep_decomposition=not _core_aten(exported))
    except Exception as err:
        raise NotConvertible(f"TVM's torch frontend cannot convert {name}: {type(err).__name__}: {first_message(err)}") from None
    return relax.transform.CanonicalizeBindings()(relax.transform.DecomposeOpsForInference()(mod))


def _core_aten(exported) -> bool:
    """Whether every operator of the program is already core ATen (a region of a partitioned
    graph, or a node alone): decomposing it again changes nothing and costs torch a retrace
    (0.4 s a region or probe, most of the backend's partitioning)."""
    import torch

    return all(node.target is operator.getitem or torch.Tag.core in getattr(node.target, "tags", ())
               for node in exported.graph.nodes if node.op == "call_function")


def _cumsum(node, importer):
    """torch's cumsum: over booleans and integers it sums in int64 (TVM's converter keeps the
    input's dtype, and LLVM's code generator refuses an add of booleans: GPT-2's mask)."""
    from tvm import relax

    x = importer.env[node.args[0]]
    dim = node.args[1] if len(node.args) > 1 else node.kwargs["dim"]
    dtype = node.kwargs.get("dtype")
    if dtype is not None:
        dtype = importer._convert_data_type(str(dtype), importer.env)
    elif not str(x.ty.dtype).startswith(("float", "bfloat")):
        dtype = "int64"
    return importer.block_builder.emit(relax.op.cumsum(x, dim, dtype))


def _squeeze(node, importer):
    """torch's squeeze: of the dimensions named (all, if none is), those of size 1 go, counted
    from the front (TVM's layout conversion runs out of memory on a negative axis: DeBERTa's
    attention; its converter would squeeze every size-1 dimension where none named is 1)."""
    from tvm import relax

    x = importer.env[node.args[0]]
    shape = [int(d) for d in x.ty.shape]
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dims", node.kwargs.get("dim", range(len(shape))))
    axes = sorted({d % len(shape) for d in ([dims] if isinstance(dims, int) else dims) if shape[d] == 1})
    return importer.block_builder.emit(relax.op.squeeze(x, axes)) if axes else x


# our converters where TVM's differ from torch
CONVERTERS = {"cumsum.default": _cumsum, **dict.fromkeys(("squeeze.default", "squeeze.dim", "squeeze.dims"), _squeeze)}


def lower_and_fuse(mod, target: Target):
    """Fast math (model/fast_math.py), then TVM's lowering to TensorIR and fusion for the
    target (the passes tvm.compile runs), leaving every kernel unscheduled: for a GPU, TVM's own
    legalisation would also give each kernel its default schedule (DLight), and a scheduled
    kernel is no longer a search space. On a CPU each kernel's weights are marked layout-free
    (model/layout.py), so that a tuned kernel reads them prepacked."""
    import tvm
    from tvm import relax

    tvm_target = tvm.target.Target(target.spec)
    passes = [*relax.pipeline.library_dispatch_passes(tvm_target),
              *relax.backend.cpu_generic.pipeline.legalize_passes(tvm_target)]
    with tvm_target:
        mod = tvm.transform.Sequential(passes)(fast_math(mod))
    return mark_layout_free(mod) if target.kind == "llvm" else mod


def _kernels(mod) -> list[ModelKernel]:
    import tvm
    from tvm import relax

    calls: dict[str, int] = {}
    outputs: dict[str, int] = {}
    call_tir = tvm.ir.Op.get("relax.call_tir")
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and value.op.same_as(call_tir):
                name = value.args[0].name_hint
                calls[name] = calls.get(name, 0) + 1
                outputs[name] = len(value.ty.fields) if isinstance(value.ty, relax.TupleType) else 1
    funcs = {gv.name_hint: f for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
    return [ModelKernel(name, KernelWorkload.from_func(name, funcs[name]), count, outputs[name])
            for name, count in calls.items()]


def first_message(err: Exception) -> str:
    """The first line of an exception's message (torch's carry a page of context after it)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return (lines[0] if lines else "")[:300]
