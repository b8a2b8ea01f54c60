"""Build (isolated worker processes), verify (every check layer) and time candidates, behind
one evaluator interface (evaluator.py) with backends: local (measurer.py), replay (replay.py),
batch (batch.py) and a Ray cluster (cluster.py). Import from the modules: this package loads nothing, so the records
can read results (result.py) without TVM."""


def make_evaluator(target, config):
    """The evaluator a tuning run measures with: the local Measurer, or with `config.cluster`
    the RayEvaluator timing on the cluster's devices of the target's hardware class (Ray is
    imported only then)."""
    if config.cluster:
        from .cluster import RayEvaluator

        return RayEvaluator(target, config, target.hardware)
    from .measurer import Measurer

    return Measurer(target, config)
