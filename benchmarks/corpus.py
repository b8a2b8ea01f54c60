"""The corpus of tuning tasks the leaderboard replays and the cost model learns from.

21 tasks in six families: the seed operators at several shapes in the CPU template space
(gemm, conv1d, dwconv2d, dwsep_conv2d), and kernels extracted from two zoo models in
MetaSchedule's sketch space (MobileNetV2's 1x1 projections; a BERT layer's batch matmul,
softmax and layer norm; its GELU has a single point in that space, nothing to search). Shapes
are kept small enough that a point costs a fraction of a second to build, check and time.
The cost model also learns from training-only tasks (EXTRA: more zoo models' kernels, tables
of random points), which the leaderboard does not replay.

Each task has a replay table in `benchmarks/corpus/tables/TASK.json.gz`: every point any
strategy proposed, with what it measured (status and median latency), the workload key and
the hardware it was measured on, and the commands that measured it. A table only grows:
a point not in it is measured (on the same hardware class only) and added.
"""
from __future__ import annotations

import gzip
import json
import os
import platform
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from tensortune.result import Result
from tensortune.space import make_space

TABLES = Path(__file__).parent / "corpus" / "tables"
GROWN = Path(__file__).parent / "corpus" / "grown"  # grow_corpus.py's tables: GROWN/HARDWARE/TASK.json.gz
COVERAGE = "coverage."  # 'coverage.NAME:KERNEL': a kernel of a model of benchmarks/coverage.py's corpus


@dataclass(frozen=True)
class CorpusTask:
    name: str
    family: str  # what a held-out evaluation leaves out together
    workload: str  # a preset, 'family:shape', or 'model:kernel function'
    space: str


def _operator(family: str, shape: str, preset: str = "") -> CorpusTask:
    name = preset or f"{family}-" + "-".join(v.split("=")[1] for v in shape.split(","))
    return CorpusTask(name, family, preset or f"{family}:{shape}", "cpu-template")


def _kernel(model: str, function: str, short: str) -> CorpusTask:
    return CorpusTask(f"{model}-{short}", model, f"{model}:{function}", "sketch")


def grown_task(source: str, function: str) -> CorpusTask:
    """A kernel of a zoo or coverage model as grow_corpus.py names it; its model is its family."""
    return CorpusTask(f"{source}-{function}", source, f"{source}:{function}", "sketch")


def grown_tasks(hardware: str) -> list[CorpusTask]:
    """The kernels grow_corpus.py has tables of for this machine class."""
    return [grown_task(*path.name.removesuffix(".json.gz").split("-", 1))
            for path in sorted((GROWN / hardware).glob("*.json.gz"))]


CORPUS = (
    _operator("gemm", "M=256,N=256,K=256"), _operator("gemm", "M=128,N=512,K=256"),
    _operator("gemm", "M=64,N=768,K=256"), _operator("gemm", "M=512,N=64,K=512"),
    _operator("conv1d", "", "conv1d-1024"), _operator("conv1d", "M=4096,N=64"),
    _operator("conv1d", "M=2048,N=512"), _operator("conv1d", "M=16000,N=101"),
    _operator("dwconv2d", "", "dwconv2d-seed"), _operator("dwconv2d", "B=1,C=32,H=56,W=56,K=3"),
    _operator("dwconv2d", "B=1,C=16,H=64,W=64,K=5"), _operator("dwconv2d", "B=1,C=64,H=28,W=28,K=3"),
    _operator("dwsep_conv2d", "", "dwsep-seed"), _operator("dwsep_conv2d", "B=1,C=32,H=28,W=28,K=3,C_out=64"),
    _kernel("mobilenet_v2", "fused_conv2d2_subtract1_divide1_multiply1_add3", "project2"),
    _kernel("mobilenet_v2", "fused_conv2d5_subtract4_divide4_multiply4_add8", "project5"),
    _kernel("mobilenet_v2", "fused_conv2d10_subtract7_divide7_multiply7_add13", "project10"),
    _kernel("mobilenet_v2", "fused_conv2d15_subtract10_divide10_multiply10_add19", "project15"),
    _kernel("bert_layer", "matmul1", "scores"),
    _kernel("bert_layer", "fused_fast_softmax_broadcast_to2", "softmax"),
    _kernel("bert_layer", "layer_norm", "layernorm"),
)
FAMILIES = tuple(dict.fromkeys(t.family for t in CORPUS))
# Training-only tasks: more zoo models' kernels in the sketch space (ResNet-18 and -50, a ViT
# block, a GPT block, MobileNetV2's depthwise convolutions; their GELUs have a single point in
# that space, as BERT's), so that the packaged cost model has seen models like the ones users
# bring (issue 24's item 3). Their tables hold random
# points (`leaderboard.py --strategies random --seeds 2 --tasks ...` measures them): the
# leaderboard does not replay them, as a table of random points cannot tell strategies apart.
# None is a kernel benchmarks/vs_metaschedule.py compares on (HELD_OUT there): those stay
# unseen.
EXTRA = (
    _kernel("resnet18", "fused_conv2d2_subtract2_divide2_multiply2_add5_relu2", "conv2"),
    _kernel("resnet18", "fused_conv2d4_subtract2_divide2_multiply2_add5", "downsample4"),
    _kernel("resnet18", "fused_matmul_add13", "fc"), _kernel("resnet18", "max_pool2d", "maxpool"),
    _kernel("resnet50", "fused_conv2d1_subtract1_divide1_multiply1_add2_relu1", "conv1"),
    _kernel("resnet50", "fused_conv2d3_subtract2_divide2_multiply2_add4", "conv3"),
    _kernel("mobilenet_v2", "fused_conv2d4_subtract3_divide3_multiply3_add6_tir_clip2", "dw4"),
    _kernel("mobilenet_v2", "fused_conv2d12_subtract8_divide8_multiply8_add15_tir_clip5", "dw12"),
    _kernel("mobilenet_v2", "fused_conv2d17_subtract11_divide11_multiply11_add21_tir_clip7", "dw17"),
    _kernel("mobilenet_v2", "fused_conv2d21_subtract13_divide13_multiply13_add25_tir_clip8", "dw21"),
    _kernel("vit_block", "matmul1", "scores"), _kernel("vit_block", "fused_fast_softmax_broadcast_to2", "softmax"),
    _kernel("gpt_block", "matmul1", "scores"),
)
TRAINING = CORPUS + EXTRA
OPERATOR_FAMILIES = tuple(dict.fromkeys(t.family for t in TRAINING if t.space != "sketch"))


def get_task(name: str) -> CorpusTask:
    by_name = {t.name: t for t in TRAINING}
    if name not in by_name:
        raise SystemExit(f"error: unknown corpus task '{name}'; known: {', '.join(by_name)}")
    return by_name[name]


def resolve(text: str, target):
    """The workload 'MODEL:KERNEL' (a kernel, by its function name, of a zoo model or of
    'coverage.NAME', a model of benchmarks/coverage.py), 'PRESET' or 'FAMILY:SHAPE' names."""
    from tensortune.model.zoo import ZOO
    from tensortune.workloads import get_workload

    source, _, detail = text.partition(":")
    if source not in ZOO and not source.startswith(COVERAGE):
        return get_workload(source, detail or None)
    kernels = model_kernels(source, target)
    if detail not in kernels:
        raise SystemExit(f"error: {source} has no kernel '{detail}'; its kernels: {', '.join(kernels)}")
    return kernels[detail]


def trained_on(target) -> set[str]:
    """The workload keys the packaged cost model for the target's kind learned from (pretrain.py
    stores them with it): a comparison on one of them measures recall, not search."""
    from tensortune.costmodel import pretrained

    model = pretrained(target.kind)
    return set(model.info.get("keys", [])) if model else set()


_KERNELS: dict[tuple[str, str], dict] = {}  # (model, target) -> its kernels, imported once per process


def model_kernels(model: str, target) -> dict:
    key = (model, json.dumps(target.spec, sort_keys=True))
    if key not in _KERNELS:
        _KERNELS[key] = _imported_kernels(model, target)
    return _KERNELS[key]


def _imported_kernels(model: str, target) -> dict:
    from tensortune.model.importer import import_model, load_factory

    factory = f"{Path(__file__).parent / 'coverage.py'}:{model[len(COVERAGE):]}" if model.startswith(COVERAGE) else model
    name, (module, inputs) = load_factory(factory)
    imported = import_model(name, module, inputs, target)
    return {k.name: k.workload for k in imported.kernels}


def space_of(task: CorpusTask, target):
    return make_space(task.space, resolve(task.workload, target), target)


@dataclass
class Table:
    """A task's replay table as stored: point key -> Result (status, and the median latency as
    its one run), plus where it came from."""

    task: str
    workload: str
    space: str
    hardware: str
    results: dict[str, Result]
    made_by: list[dict]

    @property
    def best(self) -> float:
        return min((r.latency for r in self.results.values()), default=float("inf"))


def load_table(task: CorpusTask, tables: Path = TABLES) -> Table | None:
    path = tables / f"{task.name}.json.gz"
    if not path.exists():
        return None
    data = json.loads(gzip.decompress(path.read_bytes()))
    results = {key: Result(status, runs=(latency,) if latency is not None else ()) for key, status, latency in data["points"]}
    return Table(data["task"], data["workload"], data["space"], data["hardware"], results, data["made_by"])


def save_table(table: Table, command: str, measured: int, tables: Path = TABLES) -> None:
    """Write the table (sorted, so a re-save with nothing new is byte-identical) with a line
    saying which command added how many points, when and where."""
    table.made_by.append({"command": command, "measured": measured, "machine": machine(),
                          "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")})
    points = [[k, r.status, r.latency if r.ok else None] for k, r in sorted(table.results.items())]
    data = {"task": table.task, "workload": table.workload, "space": table.space, "hardware": table.hardware,
            "made_by": table.made_by, "points": points}
    tables.mkdir(parents=True, exist_ok=True)
    (tables / f"{table.task}.json.gz").write_bytes(gzip.compress(json.dumps(data).encode(), mtime=0))


def machine() -> str:
    from tensortune.target import cpu_model

    return f"{cpu_model()}, {len(os.sched_getaffinity(0))} cores, {platform.node()}"


# what the packaged model (pretrain.py) and the leaderboard's held-out models learn from: in
# benchmarks/results/transfer.txt the absolute features' top 8 beat random picks about as often
# as the changes' (16 and 17 of 20 tasks held out by model, 11 of 14 by family, both) and came
# closer to the tables' best (median 1.13x against 1.26x by model), the two together less often (12 of 20)
FEATURES = "absolute"


def train_cost_model(tasks: list[CorpusTask], target, tables: Path = TABLES, only: dict[str, set] | None = None,
                     threads: int = 1, features: str = FEATURES):
    """The cost model trained on these tasks' tables (each task one ranking group), on the
    points `only` names per task if given (a task it does not name is left out), with
    XGBoost on `threads` threads, from the columns FEATURE_SETS[features] names; None when no
    task has points to learn from."""
    from tensortune.costmodel import CostModel

    groups = [group(task, target, tables, None if only is None else only.get(task.name, set())) for task in tasks]
    groups = [g for g in groups if g is not None]
    if not groups:
        return None
    return CostModel.train(groups, {"hardware": target.hardware, "machine": machine(), "tasks": [t.name for t in tasks]},
                           threads=threads, features=features)


def group(task: CorpusTask, target, tables: Path = TABLES, only: set | None = None):
    """(features, relevance) of a task's table points (those in `only`, if given) that
    schedule; None when there are none."""
    import numpy as np

    from tensortune.costmodel import relevance

    table = load_table(task, tables)
    if table is None:
        return None
    key = resolve(task.workload, target).key
    if table.workload != key:  # the kernel changed since (TVM, the importer): its points mean something else
        raise SystemExit(f"error: {task.name}'s table is for {table.workload}, this TVM and corpus give {key}: "
                         f"measure its table again (leaderboard.py --tasks {task.name})")
    keys = [k for k in table.results if only is None or k in only]
    vectors = _features(task, target, keys)
    kept = [i for i, v in enumerate(vectors) if v is not None]
    if not kept:
        return None
    return (np.stack([vectors[i] for i in kept]), relevance([table.results[keys[i]] for i in kept]))


_FEATURES: dict[tuple[CorpusTask, str], dict] = {}  # (task, target) -> point key -> features (None: no schedule)


def _features(task: CorpusTask, target, keys: list[str]) -> list:
    """Each point's features, extracted once per process (5-10 ms a point)."""
    from tensortune.costmodel import FeatureExtractor
    from tensortune.points import point_from_json

    known = _FEATURES.setdefault((task, json.dumps(target.spec, sort_keys=True)), {})
    missing = [k for k in keys if k not in known]
    if missing:
        extract = FeatureExtractor(space_of(task, target))
        known.update(zip(missing, extract([point_from_json(k) for k in missing])))
    return [known[k] for k in keys]
