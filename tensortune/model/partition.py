"""A PyTorch graph split into the regions TVM converts and what stays in PyTorch.

The module is captured by `torch.export` and decomposed to core ATen, as TVM's torch frontend
decomposes it before converting. A node goes to TVM where the frontend has a converter for
its operator, the user has not named the operator to stay in PyTorch (`torch_ops`, as
Torch-TensorRT's `torch_executed_ops`), and converting it has not failed; torch's own
capability-based partitioner then groups such nodes into the largest regions that keep the
graph acyclic. Each region is a GraphModule of its own (its weights come in as inputs); the
parent graph calls it where its nodes were and runs every other node in PyTorch.

A converter can still fail on a node it claims, and a converted kernel can fail to compile
(TVM's own converter kept GPT-2's cumsum over booleans boolean, which its LLVM code
generator refuses; model/importer.py now converts it as torch does). So each node TVM would
take is first tried alone, converted and its kernels compiled at their default schedules;
what a node alone gives is decided once per signature (operator, its inputs' shapes and
dtypes, its other arguments) for the process, so a model's repeated layers cost one try
each. The nodes are tried side by side, as independent calls in one graph, and only a graph
that fails is halved down to the nodes that fail alone: one conversion for the whole graph
where every node passes. A region that
still fails (nodes that fail only together) is cut in halves, in graph order, until the
failing node is found; it is refused and the graph partitioned again. Each kernel is compiled
once per kernel key.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import UserError
from ..target import Target


@dataclass
class Region:
    """One part of the graph TVM runs: `module` takes `inputs` (their example values)."""

    name: str  # the parent graph's attribute that calls it
    module: object  # torch.fx.GraphModule of core ATen operators
    inputs: tuple
    nodes: int  # operators in it


@dataclass
class Partitioned:
    """The parent graph (runs in PyTorch, calling each region) and its regions."""

    graph: object  # torch.fx.GraphModule
    regions: list[Region]
    in_torch: dict[str, int] = field(default_factory=dict)  # operator -> nodes left in PyTorch
    refused: dict[str, str] = field(default_factory=dict)  # operator -> why its conversion failed

    @property
    def share_in_tvm(self) -> float:
        """Of the graph's operators, the share TVM runs."""
        tvm = sum(r.nodes for r in self.regions)
        return tvm / max(1, tvm + sum(self.in_torch.values()))


def capture(module, example_inputs: tuple):
    """The module as an ATen graph (core ATen, weights as attributes), runnable in PyTorch."""
    from .importer import export

    return _plain(export("the graph", module, example_inputs).run_decompositions().module(), example_inputs)


def _plain(module, example_inputs: tuple):
    """`module` (torch.export's) as a plain GraphModule, without what export wraps it in: two
    forward pre-hooks and a forward hook (which also take nn.Module's slow call path), a call
    of its input guards (shape checks in Python that dynamo's guards or the build's own checks
    repeat) and, where its inputs and outputs are flat tuples of tensors, the pytree flattening
    around them: on a ~1 ms model (a 2-layer BERT's graph) they were a few percent of a call,
    enough to lose its race against eager."""
    import torch
    import torch.utils._pytree as pytree
    from torch.fx.graph import CodeGen

    graph = module.graph
    for node in list(graph.nodes):
        if node.op == "call_module" and node.target == "_guards_fn":
            graph.erase_node(node)
    info = getattr(graph._codegen, "pytree_info", None)
    output = next(node for node in graph.nodes if node.op == "output").args[0]
    if info is not None and isinstance(output, (tuple, list)) \
            and info.in_spec == pytree.tree_structure((tuple(example_inputs), {})) \
            and info.out_spec == pytree.tree_structure(tuple(output)):
        graph._codegen = CodeGen()
    return torch.fx.GraphModule(module, graph)


SPENT = "the compile budget was spent"


def partition(graph, example_inputs: tuple, target: Target, torch_ops: frozenset[str] = frozenset(),
              converts=None, deadline: float | None = None) -> Partitioned:
    """`graph` (from `capture`) split into TVM regions and PyTorch nodes. `torch_ops`: operator
    names (as `aten.gelu.default` or `gelu`) kept in PyTorch. `converts(module, inputs)` raises
    for a region TVM cannot take (default: Compiles for the target). Past `deadline` (on
    time.perf_counter's clock) every node not yet decided is left to PyTorch. A graph whose
    partitioning does not settle is a UserError."""
    import time

    converts = converts or Compiles(target)
    refused = _refused_alone(graph, torch_ops, converts, deadline)
    for _ in range(len(graph.graph.nodes) + 1):  # each pass refuses a node or ends
        fused = _fuse(graph, torch_ops, refused)
        regions = _regions(fused, example_inputs)
        if regions and deadline is not None and time.perf_counter() > deadline:
            refused.update(dict.fromkeys([n for r in regions for n in _operators(r.module)], SPENT))
            continue
        failed = next(((r, reason) for r in regions for reason in [_why_not(converts, r)] if reason), None)
        if failed is None:
            _bind_weights(fused)
            return Partitioned(fused, _regions(fused, example_inputs), _left_in_torch(fused),
                               {_op_name(n): why for n, why in refused.items()})
        node, reason = _culprit(failed[0], converts, failed[1])
        if (_op_name(node), node.name) in {(_op_name(n), n.name) for n in refused}:  # not found by name: give up the region
            refused.update(dict.fromkeys(_operators(failed[0].module), failed[1]))
        else:
            refused[node] = reason
    raise UserError(f"partitioning did not settle: {failed[0].name} keeps failing ({failed[1]})")


def _refused_alone(graph, torch_ops: frozenset[str], converts, deadline: float | None) -> dict:
    """The nodes TVM would take that fail alone, with why: each distinct signature tried
    once, in the cache `converts` keeps (`probes`), else for this graph only; past `deadline`
    the nodes not yet tried are refused as such."""
    tried, known = getattr(converts, "probes", {}), supported_ops()
    signatures = {node: _signature(node) for node in graph.graph.nodes
                  if _takes(node, known, torch_ops) and node.target.__name__ != "getitem"
                  and _tensors(node.meta.get("val"))}  # not a tuple's part (its producer decides), nor an assertion
    first: dict[str, object] = {}  # each signature not tried before -> its first node
    for node, signature in signatures.items():
        if signature not in tried:
            first.setdefault(signature, node)
    lacking = {node: why for node in first.values() for why in [_missing_example(node)] if why}
    found = {**lacking, **_probe(graph, [n for n in first.values() if n not in lacking], converts, deadline)}
    tried.update({signatures[node]: why for node, why in found.items() if why != SPENT})  # cut short: tried again later
    reasons = {**tried, **{signatures[node]: why for node, why in found.items()}}
    return {node: reasons[signature] for node, signature in signatures.items() if reasons[signature]}


def _missing_example(node) -> str:
    """Why `node` cannot be tried alone ("" where it can): an input traced without a tensor."""
    import torch

    return next((f"no example value for {arg.name}" for arg in node.all_input_nodes
                 if arg.op != "get_attr" and not isinstance(arg.meta.get("val"), torch.Tensor)), "")


def _probe(owner, nodes: list, converts, deadline: float | None) -> dict:
    """Why each of `nodes` fails alone ("" where it does not). They are tried side by side, in
    one graph of independent calls (one conversion where all pass, as most do), and a failing
    graph is cut in halves down to the nodes that fail alone: the probes cost a conversion per
    failing node and level of halving instead of one per node (an export and an import each,
    most of a CNN's compile through the backend)."""
    import time

    if not nodes:
        return {}
    if deadline is not None and time.perf_counter() > deadline:
        return dict.fromkeys(nodes, SPENT)
    why = _why_not(converts, _side_by_side(owner, nodes))
    if not why or len(nodes) == 1:
        return dict.fromkeys(nodes, why)
    half = len(nodes) // 2
    return {**_probe(owner, nodes[:half], converts, deadline), **_probe(owner, nodes[half:], converts, deadline)}


def _tensors(value) -> bool:
    """Whether a node's traced value is a tensor, or a tuple of them."""
    import torch

    if isinstance(value, (tuple, list)):
        return bool(value) and all(isinstance(v, torch.Tensor) for v in value)
    return isinstance(value, torch.Tensor)


def _signature(node) -> str:
    """What TVM's conversion and kernels of a node depend on: its operator, its inputs' shapes
    and dtypes, its other arguments (as text: the records keep it, Compiles.store)."""
    import torch

    def describe(arg):
        if isinstance(arg, torch.fx.Node):
            value = arg.meta.get("val")
            return (tuple(value.shape), str(value.dtype)) if isinstance(value, torch.Tensor) else ("node", arg.name)
        if isinstance(arg, (list, tuple)):
            return tuple(describe(a) for a in arg)
        return repr(arg)

    return repr((_op_name(node), describe(node.args), describe(tuple(sorted(node.kwargs.items())))))


def _side_by_side(owner, nodes: list) -> Region:
    """A graph calling each of `nodes` on inputs of its own, drawn like the values it was
    traced with (weights: the weights themselves), every output returned."""
    import operator

    import torch

    graph, places, values, outputs = torch.fx.Graph(), {}, [], []

    def place(arg):
        if arg not in places:
            places[arg] = graph.placeholder(f"input{len(places)}")
            value = _attribute(owner, arg.target) if arg.op == "get_attr" else _example(arg)
            places[arg].meta["val"] = value
            values.append(value)
        return places[arg]

    for node in nodes:
        call = graph.call_function(node.target, torch.fx.map_arg(node.args, place), torch.fx.map_arg(node.kwargs, place))
        value = node.meta["val"]
        outputs += ([graph.call_function(operator.getitem, (call, i)) for i in range(len(value))]
                    if isinstance(value, (tuple, list)) else [call])
    graph.output(tuple(outputs))
    return Region("probe", torch.fx.GraphModule(torch.nn.Module(), graph), tuple(values), len(nodes))


def supported_ops() -> frozenset[str]:
    """The core ATen operators TVM's torch frontend converts (by their overload names, e.g.
    'add.Tensor')."""
    from tvm.relax.frontend.torch.exported_program_translator import ExportedProgramImporter

    return frozenset(ExportedProgramImporter().convert_map)


def _fuse(graph, torch_ops: frozenset[str], refused: dict):
    import copy

    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase

    known = supported_ops()
    refused_names = {(_op_name(n), n.name) for n in refused}

    class TVMSupport(OperatorSupportBase):
        def is_node_supported(self, submodules, node) -> bool:
            return _takes(node, known, torch_ops) and (_op_name(node), node.name) not in refused_names

    partitioner = CapabilityBasedPartitioner(copy.deepcopy(graph), TVMSupport(), allows_single_node_partition=True)
    return partitioner.partition_and_fuse(prefix="tvm_region_")


def _takes(node, known: frozenset[str], torch_ops: frozenset[str]) -> bool:
    """Whether TVM's frontend has a converter for the node and the user left it to TVM."""
    name = _op_name(node)
    return (node.op == "call_function" and node.target.__name__ in known
            and not {name, name.split(".")[1] if name.count(".") > 1 else name} & torch_ops)


def _regions(fused, example_inputs: tuple) -> list[Region]:
    """Each region with the values it receives when the graph runs on the example inputs."""
    import torch

    seen: dict[str, tuple] = {}

    class Recorder(torch.fx.Interpreter):
        def call_module(self, target, args, kwargs):
            if target.startswith("tvm_region_"):
                seen.setdefault(target, tuple(args))
            return super().call_module(target, args, kwargs)

    with torch.no_grad():
        Recorder(fused).run(*example_inputs)
    return [Region(name, getattr(fused, name), seen[name], len(_operators(getattr(fused, name)))) for name in seen]


def bind_inputs(module, weights: dict, arity: int):
    """`module` (taking `arity` inputs) with the inputs at the positions of `weights` held as
    its buffers: called with the other inputs only. Its `graph` is the module's."""
    import torch

    class Bound(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner, self.arity, self.places = module, arity, sorted(weights)
            for i in self.places:
                self.register_buffer(f"weight{i}", weights[i].detach())

        @property
        def graph(self):
            return self.inner.graph

        def forward(self, *inputs):
            rest = iter(inputs)
            return self.inner(*[getattr(self, f"weight{i}") if i in self.places else next(rest)
                                for i in range(self.arity)])

    return Bound()


def _bind_weights(fused) -> None:
    """Each region's weights (the parent's attributes it reads) become constants of the
    region instead of inputs, so TVM folds what is computed from them alone (a linear
    layer's transposed weight) once, at build, instead of every call, and a region's kernels
    are those `tune-model` finds in the whole model (the same keys)."""
    import torch

    for node in fused.graph.nodes:
        if node.op != "call_module" or not node.target.startswith("tvm_region_"):
            continue
        weights = {i: _attribute(fused, arg.target) for i, arg in enumerate(node.args)
                   if isinstance(arg, torch.fx.Node) and arg.op == "get_attr"}
        if weights and len(weights) < len(node.args):
            setattr(fused, node.target, bind_inputs(getattr(fused, node.target), weights, len(node.args)))
            node.args = tuple(a for i, a in enumerate(node.args) if i not in weights)
    fused.graph.eliminate_dead_code()
    fused.recompile()


def _attribute(module, path: str):
    for name in path.split("."):
        module = getattr(module, name)
    return module


def _why_not(converts, region: Region) -> str:
    """Why the region cannot go to TVM ("" if it can): TVM's lowering reports failures as
    assorted exception types, each a reason to leave the region's culprit to PyTorch."""
    try:
        converts(region.module, region.inputs)
    except Exception as err:
        return str(err) if isinstance(err, UserError) else f"{type(err).__name__}: {str(err).strip()[:300]}"
    return ""


def _culprit(region: Region, converts, reason: str):
    """The node of `region` whose conversion fails: the region's nodes are cut in halves (in
    graph order: each half is a graph of its own) until one alone fails. It is refused by its
    operator and name (each partitioning starts from a fresh copy of the graph).
    """
    from torch.fx.passes.utils.fuser_utils import fuse_as_graphmodule

    nodes, values = _operators(region.module), _recorded(region.module, region.inputs)
    while len(nodes) > 1:
        half = nodes[: len(nodes) // 2]
        module, inputs, _ = fuse_as_graphmodule(region.module, half, "half")
        reason_half = _why_not(converts, Region("half", module, tuple(values[n] for n in inputs), len(half)))
        nodes, reason = (half, reason_half) if reason_half else (nodes[len(nodes) // 2:], reason)
    return nodes[0], reason


def _operators(module) -> list:
    return [n for n in module.graph.nodes if n.op == "call_function"]


def operator_count(module) -> int:
    """The operators a region's graph calls."""
    return len(_operators(module))


def _recorded(module, inputs: tuple) -> dict:
    """Every node's value when the graph runs on `inputs`."""
    import torch

    values = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, node):
            values[node] = super().run_node(node)
            return values[node]

    with torch.no_grad():
        Recorder(module).run(*inputs)
    return values


def _example(node):
    """A value like the one `node` was traced with (a tensor: `_missing_example`): floats
    drawn, integers zero (valid indices)."""
    import torch

    value = node.meta["val"]
    return (torch.randn(value.shape).to(value.dtype) if value.is_floating_point()
            else torch.zeros(value.shape, dtype=value.dtype))


def _left_in_torch(fused) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in fused.graph.nodes:
        if node.op == "call_function" and _op_name(node) not in ("getitem",):
            counts[_op_name(node)] = counts.get(_op_name(node), 0) + 1
    return counts


def _op_name(node) -> str:
    """'aten.gelu.default' for an ATen operator; the function's name otherwise."""
    target = node.target
    return str(target) if hasattr(target, "_schema") else getattr(target, "__name__", str(target))


class Compiles:
    """The check a region passes: imported as tune-model imports a model, each of its
    kernels compiled at its default schedule (a kernel seen before is not compiled again).
    With `db`, what nodes tried alone gave is read from the records and `store` keeps what
    this process found there, for this target and this version of the converting code."""

    # per target, for the process: kernel key -> why it does not compile ("" if it does), and
    # a node's signature -> why it does not convert and compile alone
    _failed: dict[str, dict] = {}
    _probes: dict[str, dict] = {}

    def __init__(self, target: Target, db=None):
        import json

        self.target, self.db = target, db
        self.key = json.dumps(target.spec, sort_keys=True)
        self.failed = self._failed.setdefault(self.key, {})
        self.probes = self._probes.setdefault(self.key, {})
        self.versions = _code_versions() if db is not None else ""
        self.stored = db.conversions(self.key, self.versions) if db is not None else {}
        for signature, why in self.stored.items():
            self.probes.setdefault(signature, why)

    def store(self) -> None:
        """What this process found of nodes tried alone, and the records lack, into the records."""
        new = {signature: why for signature, why in self.probes.items() if self.stored.get(signature) != why}
        if self.db is not None and new:
            self.db.add_conversions(self.key, self.versions, new)
            self.stored.update(new)

    def __call__(self, module, inputs: tuple) -> None:
        from .importer import import_model

        for kernel in import_model("region", module, inputs, self.target).kernels:
            key = kernel.workload.key
            if key not in self.failed:
                self.failed[key] = self._compile(kernel.workload)
            if self.failed[key]:
                raise UserError(f"kernel {kernel.name} does not compile: {self.failed[key]}")

    def _compile(self, workload) -> str:
        import tvm

        from ..space.base import first_line
        from ..space.default import DefaultSpace
        from ..target import tvm_target

        try:
            func = DefaultSpace(workload, self.target).apply({}).mod["main"]
            tvm.compile(tvm.IRModule({"main": func}), target=tvm_target(self.target.spec))
        except Exception as err:  # TVM reports codegen failures as assorted exception types
            return f"{type(err).__name__}: {first_line(err)}"
        return ""


def _code_versions() -> str:
    """The versions what a node tried alone gives depends on: Python's, ours, TVM's and torch's
    (db.versions), and a digest of our converters' code (model/importer.py), which changes
    between releases while a fix is made."""
    import hashlib
    import json
    from pathlib import Path

    from ..db import versions

    importer = hashlib.sha1((Path(__file__).parent / "importer.py").read_bytes()).hexdigest()[:12]
    return json.dumps({**versions(), "importer": importer}, sort_keys=True)
