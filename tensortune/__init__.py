"""tensortune: search schedules for tensor kernels, verify them, time them, keep the fastest.

The public API (imported lazily: `import tensortune` does not load TVM):

- `get_workload(name, shape)`, `workload(...)`: operators (see docs/own-operator.md).
- `tune(workload, target, db, TuneConfig, MeasureConfig)`: tune one operator (`TuneConfig(objectives=
  ("latency", "build_s"))`: the summary's `front` is its Pareto front); `tune_shapes(workloads, ...)`:
  one operator at several shapes, the one schedule and a dispatch table.
- `tune_model(module, example_inputs, target, db, TuneConfig, ...) -> TuneModelResult`: what the
  `tune-model` command does, in one call: import (split where TVM cannot take the model whole),
  tune every kernel with one budget, build, check against torch, time against eager, export.
  Its steps, for finer control: `load_factory(spec)`, `import_model(name, module,
  example_inputs, target, torch_ops)` (a model's kernels as tasks), `build_model(...)`,
  `export_model(...)` (the tuned model, checked against torch, the faster build kept).
- `load(folder)`: a tuned model, an exported kernel or a dispatch table as a callable on torch tensors.
- `backend(db=..., target=..., mode=..., torch_ops=...)`: a `torch.compile` backend (also
  registered as `backend="tensortune"`): TVM runs what its frontend converts, with the
  records' best schedules, PyTorch the rest.
- `Workbench(db, target, MeasureConfig, Budget)`: tuning driven from outside (an agent): tasks
  described, schedules (knob points, traces, Python) measured by `tune`'s round within
  budgets; `tensortune mcp` serves it over the Model Context Protocol.
- `Measurer`, `BatchEvaluator`, `ReplayTable`: the evaluators (local, batch, replay) behind
  one interface, `measure(space, points, cutoff_s, final) -> list[Result]`.
- `make_target(name, threads)`, `Database(path)`, `TuneConfig`, `MeasureConfig`, `Result`,
  `Status`, `Label`.
"""
from importlib import import_module

__version__ = "0.1.0"

_EXPORTS = {
    "get_workload": "workloads", "workload": "workloads", "tune": "tuning.tuner", "TuneConfig": "tuning.tuner",
    "tune_shapes": "tuning.shapes",
    "MeasureConfig": "measure.config", "Measurer": "measure.measurer", "BatchEvaluator": "measure.batch",
    "ReplayTable": "measure.replay", "Result": "result", "Status": "result",
    "Label": "result", "make_target": "target", "Database": "db", "load": "deploy.loader", "backend": "deploy.backend",
    "load_factory": "model", "import_model": "model", "tune_model": "deploy.pipeline",
    "TuneModelResult": "deploy.pipeline", "build_model": "model",
    "export_model": "model", "Workbench": "agents.workbench", "Budget": "agents.workbench",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tensortune' has no attribute '{name}'")
    return getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
