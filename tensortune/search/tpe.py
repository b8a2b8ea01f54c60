"""Tree-structured Parzen estimator (Optuna) as a second model-based baseline, and Optuna's
NSGA-II for the front of latency and build time (the same bridge, another sampler).

Every knob becomes an Optuna categorical distribution (a split's values are all of its valid
factorisations), so Optuna's ask/tell maps one to one onto ours. Failed candidates are told
as failed trials; a proposal we already measured is answered from the history at once.
"""
from __future__ import annotations

import json

from ..result import Result
from ..objectives import value
from ..points import Point, point_key
from .base import Option, Strategy


class TreeParzen(Strategy):
    """Optuna's tree-structured Parzen estimator over the knobs as categorical distributions."""
    name = "tpe"
    requires = ("optuna",)
    options = (Option("startup", 8, "random points before TPE models the space"),)

    def __init__(self, space, seed: int = 0, **options):
        super().__init__(space, seed, **options)
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.study = optuna.create_study(sampler=self.sampler(seed), directions=["minimize"] * len(self.objectives))
        self.distributions = {k.name: optuna.distributions.CategoricalDistribution(
            [json.dumps(v) for v in k.values()]) for k in space.knobs}
        self.open: dict[str, list] = {}  # point key -> Optuna trials awaiting a result
        self.known: dict[str, Result] = {}
        self.asked: set[str] = set()  # keys Optuna proposed itself

    def sampler(self, seed: int):
        import optuna

        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=self.startup, constant_liar=True, multivariate=True)

    def propose(self) -> Point:
        trial = self.study.ask(self.distributions)
        point = {name: _decode(text) for name, text in trial.params.items()}
        key = point_key(point)
        self.asked.add(key)
        if key in self.known:
            self._finish(trial, self.known[key])  # a repeat: Optuna learns it at no cost
        else:
            self.open.setdefault(key, []).append(trial)
        return point

    def tell(self, points: list[Point], results: list[Result]) -> None:
        super().tell(points, results)
        for point, result in zip(points, results):
            key = point_key(point)
            self.known[key] = result
            for trial in self.open.pop(key, []):
                self._finish(trial, result)
            if key not in self.asked:
                self._add(point, result)  # told without asking: a resumed run's records

    def warm_start(self, points: list[Point], results: list[Result]) -> None:
        super().warm_start(points, results)
        for point, result in zip(points, results):
            self._add(point, result)

    def _finish(self, trial, result: Result) -> None:
        import optuna

        if result.ok:
            self.study.tell(trial, self._values(result))
        else:
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)

    def _add(self, point: Point, result: Result) -> None:
        import optuna

        params = {name: json.dumps(list(v) if isinstance(v, tuple) else v) for name, v in point.items()}
        self.study.add_trial(optuna.trial.create_trial(
            params=params, distributions=self.distributions, values=self._values(result) if result.ok else None,
            state=optuna.trial.TrialState.COMPLETE if result.ok else optuna.trial.TrialState.FAIL))

    def _values(self, result: Result) -> list[float]:
        return [value(result, name) for name in self.objectives]


class NSGA2(TreeParzen):
    """Optuna's NSGA-II: a genetic search for the front of latency and build time (each
    generation's parents chosen by non-domination rank, then crowding distance)."""

    name = "nsga2"
    objectives = ("latency", "build_s")
    options = (Option("population", 16, "points per generation", low=2),)

    def sampler(self, seed: int):
        import optuna

        return optuna.samplers.NSGAIISampler(population_size=self.population, seed=seed)


def _decode(text: str):
    value = json.loads(text)
    return tuple(value) if isinstance(value, list) else value
