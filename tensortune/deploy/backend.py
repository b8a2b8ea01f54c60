"""`torch.compile(model, backend="tensortune")`: the regions TVM converts run as TVM kernels
with the best verified schedules in the records, the rest in PyTorch.

Dynamo hands over each graph it captured (graph breaks, guards and recompiles are dynamo's).
The graph is captured again as core ATen and partitioned (model/partition.py); each region is
imported as `tune-model` imports a model, so its kernels have the same keys and a kernel tuned
before, alone or in any model, is reused. By default nothing is tuned and nothing measured:
each kernel gets its best verified schedule from the records where it beats TVM's default,
else the default. `mode="tune"` first tunes each region's kernels (a budget per region, as
`tune-model` shares one across a model's kernels). A region that fails to build or to match eager falls back to PyTorch
with one warning naming why; on its first call each region is compared with eager again, on
the user's own inputs.

    compiled = torch.compile(model, backend="tensortune")           # ./tensortune.db, this CPU
    compiled = torch.compile(model, backend=tensortune.backend(db="runs.db", mode="tune"))
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable

from ..errors import TensortuneWarning, UserError
from ..model.build import timed_now

MODES = ("default", "tune")
TIE = 0.02  # a compiled graph within this share of eager is kept: each of its regions already beat eager
# a build slower than eager by less than this share is timed again before it is refused: timings of
# one build move 5-7% between rounds on these shared 2-core machines (a loaded build 7% faster than
# eager was timed 6% slower at its compile, once, in another sitting)
CLOSE = 0.10


@dataclass(frozen=True)
class BackendConfig:
    """What the backend builds with; `tensortune.backend(...)` checks it before any compile."""

    db: str = "tensortune.db"
    target: str = "cpu"
    mode: str = "default"  # "tune": tune the regions' kernels first (trials, space)
    torch_ops: tuple[str, ...] = ()  # operators kept in PyTorch, as "aten.gelu.default" or "gelu"
    trials: int | None = None  # mode="tune": the budget per region (default: 32 per tunable kernel)
    space: str = "sketch"
    threads: int | None = None  # default: the cores this process may use
    progress: bool = True  # a line on standard error per stage of a compile past a few seconds (and per tuning round)
    compile_budget_s: float | None = None  # seconds a graph's compile may take; past them the rest runs in PyTorch

    def __post_init__(self):
        if self.mode not in MODES:
            raise UserError(f"unknown mode '{self.mode}'; known: {', '.join(MODES)}")
        if isinstance(self.torch_ops, str) or not all(isinstance(op, str) for op in self.torch_ops):
            raise UserError("torch_ops takes a list of operator names, as ['aten.gelu.default'] or ['gelu']")
        if self.trials is not None and self.trials < 1:
            raise UserError(f"trials must be at least 1, got {self.trials}")
        if self.compile_budget_s is not None and not self.compile_budget_s > 0:
            raise UserError(f"compile_budget_s must be a positive number of seconds, got {self.compile_budget_s}")


class Backend:
    """A torch.compile backend (call it as dynamo does: graph module, example inputs) that
    keeps what it compiled: `regions` (TVMRegion, each with its build and check), per graph
    the operators left in PyTorch (`in_torch`) and why TVM refused those it has converters for
    (`refused`), and the regions TVM converted but PyTorch runs, with why (`in_eager`: a
    failed build, or eager was faster) and their operators (`eager_operators`)."""

    # times a region's call and eager's, as model.build's Timer; tests inject theirs
    timer: Callable = staticmethod(timed_now)

    def __init__(self, config: BackendConfig):
        self.config = config
        self.regions: list = []
        self.in_torch: list[dict[str, int]] = []
        self.in_eager: dict[str, str] = {}
        self.eager_operators = 0
        self.refused: dict[str, str] = {}

    @property
    def share_in_tvm(self) -> float:
        """Of the operators of every graph compiled, the share that runs in a TVM region (as a
        TVM kernel or a vendor call from one)."""
        from ..model.partition import operator_count

        tvm = sum(operator_count(region.eager) for region in self.regions)
        torch = self.eager_operators + sum(sum(left.values()) for left in self.in_torch)
        return tvm / max(1, tvm + torch)

    def __call__(self, gm, example_inputs):
        """The graph with its TVM regions compiled; the graph itself (all PyTorch) where it
        cannot be captured with static shapes for inference."""
        from ..model.partition import SPENT

        refusal = _refusal(example_inputs)
        if refusal:
            _warn(refusal)
            return gm.forward
        # dynamo passes the module's parameters and buffers as inputs: they are frozen into the
        # graph (as Torch-TensorRT does), so TVM folds what depends on them alone once, at build
        # (a batch norm's statistics into the convolution's weight)
        weights = _frozen(gm, example_inputs)
        clock = Clock(f"graph {len(self.in_torch) + 1}", self.config.compile_budget_s, self.config.progress)
        try:
            target, parts = self._partition(gm, weights, example_inputs, clock)
        except Exception as err:  # TVM's and torch's assorted errors: the graph runs as it is, never breaks
            _warn(f"a graph runs in PyTorch: {err if isinstance(err, UserError) else type(err).__name__ + ': ' + str(err)[:300]}")
            return gm.forward
        self.in_torch.append(parts.in_torch)
        self.refused.update(parts.refused)
        if SPENT in parts.refused.values():
            _warn(f"graph {len(self.in_torch)} runs in PyTorch in part or whole: {clock.over() or SPENT}")
        kept = self._build_regions(parts, clock)
        if not kept:  # nothing runs in TVM: dynamo's graph runs faster than its decomposed, split copy
            clock.stage("done")
            return gm.forward
        graph = parts.graph
        compiled = graph if not weights else lambda *args: graph(*[x for i, x in enumerate(args) if i not in weights])
        return self._faster_or_eager(compiled, gm, example_inputs, kept, target.threads, clock)

    def _partition(self, gm, weights: dict, example_inputs, clock: Clock):
        """The target, and the graph (its weights bound) split into the regions TVM takes."""
        from ..db import Database
        from ..measure.config import MeasureConfig
        from ..model.partition import Compiles, bind_inputs, capture, partition
        from ..target import make_target, size_tvm_pool

        target = make_target(self.config.target, self.config.threads or MeasureConfig().threads)
        size_tvm_pool(target.threads)  # before the first kernel of this process runs
        inputs = tuple(x for i, x in enumerate(example_inputs) if i not in weights)
        frozen = bind_inputs(gm, weights, len(example_inputs)) if weights else gm
        clock.stage("capturing and partitioning")
        db = Database(self.config.db)
        try:  # what nodes tried alone gave is kept in the records: another process tries them no more
            converts = Compiles(target, db)
            parts = partition(capture(frozen, inputs), inputs, target, frozenset(self.config.torch_ops),
                              converts, deadline=clock.deadline)
            converts.store()
        finally:
            db.close()
        return target, parts

    def _build_regions(self, parts, clock: Clock) -> list:
        """Each region built into the split graph, or left to PyTorch (with a warning saying why);
        the regions built."""
        kept = []
        # a graph of one region is timed against eager as a whole (_faster_or_eager); timing its
        # region against its own graph first measured the same race twice, and each race within
        # the machine's noise of a tie threw a faster build away half the time
        race = len(parts.regions) > 1
        for number, region in enumerate(parts.regions):
            clock.stage(f"building {region.name} ({number + 1} of {len(parts.regions)}, {region.nodes} operators)")
            compiled = clock.over() or _region(region, self.config, self.timer, clock.deadline, race)
            if isinstance(compiled, str):  # it stays the region's own graph, run by PyTorch
                self.in_eager[f"{region.name} of graph {len(self.in_torch)}"] = compiled
                self.eager_operators += region.nodes
                _warn(f"{region.name} ({region.nodes} operators) runs in PyTorch: {compiled}")
            else:
                setattr(parts.graph, region.name, compiled)
                kept.append(compiled)
        return kept

    def _faster_or_eager(self, compiled, gm, example_inputs, kept: list, threads: int, clock: Clock):
        """`compiled` where it beats dynamo's own graph on the example inputs, else that graph
        (all PyTorch), with a warning."""
        from ..model.partition import operator_count

        clock.stage("timing the compiled graph against eager")
        slower = _slower_than_eager(compiled, gm, example_inputs, kept, self.timer, threads)
        clock.stage("done")
        if slower:  # its regions may beat theirs, and the rest still lose: decomposed, split, called through DLPack
            _warn(f"graph {len(self.in_torch)} runs in PyTorch: {slower}")
            self.in_eager.update({f"{r.name} of graph {len(self.in_torch)}": slower for r in kept})
            self.eager_operators += sum(operator_count(r.eager) for r in kept)
            return gm.forward
        self.regions += kept
        return _tag_guarded(compiled)


def _tag_guarded(compiled: Callable) -> Callable:
    """`compiled`, with dynamo's guards for this frame built to check the module's parameters by
    their dictionaries' tags (`torch._dynamo.config.use_recursive_dict_tags_for_guards`): a
    check per module instead of one per tensor. Dynamo builds a frame's guards after its backend
    returns and before the frame first runs, so the setting is made now and the user's own
    restored at the first call. The weights are frozen into the build already, so a tensor
    changed in place without its module's dictionary changing goes unseen either way. Without
    it, checking MobileNetV2's 263 parameters one by one, after each call's work had pushed
    them out of the caches, was most of what dynamo added to its tuned build (a perf profile;
    benchmarks/dynamo_cost.py measures what dynamo adds)."""
    import torch._dynamo.config as dynamo

    users = dynamo.use_recursive_dict_tags_for_guards
    dynamo.use_recursive_dict_tags_for_guards = True
    restored = False

    def call(*args):
        nonlocal restored
        if not restored:
            dynamo.use_recursive_dict_tags_for_guards, restored = users, True
        return compiled(*args)

    return call


def _refusal(example_inputs) -> str:
    """Why a graph runs in PyTorch without a try, if it must: dynamic shapes, or autograd."""
    import torch

    if not all(isinstance(x, torch.Tensor) for x in example_inputs):
        return "a graph with dynamic shapes runs in PyTorch (compile with dynamic=False to recompile per shape)"
    if torch.is_grad_enabled() and any(x.requires_grad for x in example_inputs):
        return ("a graph that autograd records runs in PyTorch: TVM's kernels have no gradients; "
                "call the compiled model under torch.no_grad() or torch.inference_mode()")
    return ""


def _slower_than_eager(compiled, gm, example_inputs, kept: list, timer: Callable, threads: int) -> str:
    """Why the compiled graph is not kept, if dynamo's own graph (what eager runs) is faster
    than it by more than TIE on the example inputs; "" otherwise. Each region is checked again
    on the user's first call, as if never called."""
    ours, eager = _against_eager(timer, "graph", lambda: compiled(*example_inputs), lambda: gm(*example_inputs),
                                 threads, TIE)
    for region in kept:
        region.checked = False
    if ours <= eager * (1 + TIE):
        return ""
    return f"compiled, it took {ours * 1e3:.3f} ms a call against eager's {eager * 1e3:.3f} ms"


def _against_eager(timer: Callable, label: str, ours: Callable, eager: Callable, threads: int,
                   margin: float) -> tuple[float, float]:
    """Seconds per call of `ours` and of `eager`, timed in turn (`_in_turn`); where ours came out
    slower than eager by more than `margin` but less than CLOSE, both are timed as many times
    again and the means of both timings decide."""
    mine, theirs = _in_turn(timer, label, ours, eager, threads)
    if theirs * (1 + margin) < mine <= theirs * (1 + CLOSE):
        again = _in_turn(timer, label, ours, eager, threads)
        mine, theirs = (mine + again[0]) / 2, (theirs + again[1]) / 2
    return mine, theirs


def _in_turn(timer: Callable, label: str, ours: Callable, eager: Callable, threads: int) -> tuple[float, float]:
    """Seconds per call of `ours` (timed as `label`) and of `eager` (as "eager"), called from
    torch, timed in turn (model/vm.py: in_turn)."""
    from ..model.vm import in_turn, torch_seconds

    return in_turn(timer, (label, lambda: torch_seconds(ours, threads)), ("eager", lambda _: torch_seconds(eager, threads)))


def _frozen(gm, example_inputs) -> dict:
    """The inputs that are the module's parameters, or buffers the graph does not write (a
    batch norm's running statistics), by position."""
    import torch

    places = [node for node in gm.graph.nodes if node.op == "placeholder"]
    frozen = {}
    for i, (node, x) in enumerate(zip(places, example_inputs)):
        source = getattr(node.meta.get("grapharg"), "source", None)
        buffer = source is not None and "._buffers[" in (source.name() if callable(source.name) else source.name)
        written = any(str(getattr(user.target, "__name__", user.target)).endswith("_") for user in node.users)
        if isinstance(x, torch.nn.Parameter) or (buffer and not written):
            frozen[i] = x
    return frozen


def backend(**options) -> Backend:
    """A torch.compile backend with these options (BackendConfig's fields). A bad option, a
    database that cannot be opened or a target that cannot run here is a UserError now, at
    `torch.compile` time, not at the first call."""
    return Backend(_checked(options))


def compile_graph(gm, example_inputs, options: dict | None = None):
    """The backend registered as "tensortune" (package entry point torch_dynamo_backends);
    `torch.compile(..., options={...})` passes BackendConfig's fields."""
    return backend(**(options or {}))(gm, example_inputs)


def _checked(options: dict) -> BackendConfig:
    from ..db import Database
    from ..measure.config import MeasureConfig
    from ..space import check_fits
    from ..target import check_runnable, make_target

    known = set(BackendConfig.__dataclass_fields__)
    unknown = sorted(set(options) - known)
    if unknown:
        raise UserError(f"the tensortune backend has no option {', '.join(unknown)}; its options: {', '.join(sorted(known))}")
    config = BackendConfig(**options)
    target = make_target(config.target, config.threads or MeasureConfig().threads)
    check_runnable(target)
    check_fits(config.space, target)
    Database(config.db).close()
    return config


class Clock:
    """A graph's compile: its budget (`deadline`, on time.perf_counter's clock) and its progress,
    a line on standard error per stage once the compile has taken a few seconds."""

    QUIET_S = 3.0  # a compile shorter than this says nothing

    def __init__(self, name: str, budget_s: float | None, progress: bool):
        import time

        self.name, self.budget_s, self.progress = name, budget_s, progress
        self.start = time.perf_counter()
        self.deadline = None if budget_s is None else self.start + budget_s

    def elapsed(self) -> float:
        import time

        return time.perf_counter() - self.start

    def stage(self, what: str) -> None:
        import sys

        if self.progress and self.elapsed() > self.QUIET_S:
            print(f"tensortune: {self.name}: {what} ({self.elapsed():.0f} s)", file=sys.stderr, flush=True)

    def over(self) -> str:
        """Why nothing more is compiled ("" while within the budget)."""
        if self.budget_s is None or self.elapsed() <= self.budget_s:
            return ""
        return f"the compile budget of {self.budget_s:g} s (compile_budget_s) was spent"


def _region(region, config: BackendConfig, timer: Callable, deadline: float | None = None, race: bool = True):
    """A region as a TVMRegion, or why PyTorch runs it instead: it cannot be built or checked,
    or (where `race`) it was slower than eager (`_kept_or_why`)."""
    from ..db import Database
    from ..measure.config import MeasureConfig
    from ..model import build_model, import_model
    from ..model.build import tuned_before
    from ..space.base import first_line
    from ..target import make_target

    measure = MeasureConfig() if config.threads is None else MeasureConfig(threads=config.threads)
    target = make_target(config.target, measure.threads)
    db = Database(config.db)
    try:
        # as tune-model: on a CPU also the build calling torch's matmuls and convolutions, the faster kept
        model = import_model(region.name, region.module, region.inputs, target, torch_ops=True, fixed_inputs=True)
        if config.mode == "tune":
            _tune(model, region.name, config, target, db, measure)
        # times eager on the region's own inputs too; operations tried back in TVM one by one only where tuned
        built = build_model(model, target, db, timer=timer, deadline=deadline,
                            mix=config.mode == "tune" or tuned_before(model, target, db))
        return _kept_or_why(built, region, timer, measure.threads, race)
    except Exception as err:  # any failure of TVM's: the region stays in PyTorch, said once
        return f"{type(err).__name__}: {first_line(err)}"
    finally:
        db.close()


def _tune(model, name: str, config: BackendConfig, target, db, measure) -> None:
    """The region's kernels tuned (mode "tune") with `config.trials`, or the default budget."""
    from ..model import tune_model
    from ..model.scheduler import default_trials
    from ..tuning.tuner import TuneConfig

    trials = config.trials or default_trials(model)
    tune_model(model, target, db, TuneConfig(trials=trials, space=config.space, strategy="model"), measure,
               _progress(name) if config.progress else lambda *_: None)


def _kept_or_why(built, region, timer: Callable, threads: int, race: bool = True):
    """The built region as a TVMRegion, or why PyTorch runs it instead: its check failed, or
    (where `race`) it was slower than eager, both called as the compiled graph calls them (torch
    tensors in and out: the VM's call and DLPack's wrapping count, which a small region feels)
    and timed in turn."""
    import torch

    from .torch_region import TVMRegion

    compiled = TVMRegion(built, region.module)
    if race:
        ours, eager = _against_eager(timer, "region", lambda: compiled(*region.inputs),
                                     lambda: region.module(*region.inputs), threads, 0.0)
    else:  # only its check, made on the first call
        with torch.no_grad():
            compiled(*region.inputs)
    if compiled.in_torch:  # its check, on the first of those calls, failed
        return compiled.in_torch
    compiled.checked = False  # checked again on the user's own inputs, at their first call
    if race and eager < ours:
        refused = f" (the build calling torch was refused: {built.refused})" if built.refused else ""
        return f"TVM took {ours * 1e3:.3f} ms a call against eager's {eager * 1e3:.3f} ms{refused}"
    return compiled


def _progress(name: str):
    import sys

    def show(states, done: int, total: int) -> None:
        print(f"tensortune: tuning {name}: {done}/{total} trials", file=sys.stderr, flush=True)

    return show


def _warn(message: str) -> None:
    warnings.warn(f"tensortune: {message}", TensortuneWarning, stacklevel=3)
