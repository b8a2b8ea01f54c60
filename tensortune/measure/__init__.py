"""Build (isolated worker processes), verify (every check layer) and time candidates, behind
one evaluator interface (evaluator.py) with backends: local (measurer.py), replay (replay.py)
and batch (batch.py). Import from the modules: this package loads nothing, so the records
can read results (result.py) without TVM."""
