"""A steady-state genetic algorithm over measured points.

The population is the best `population` correct points measured so far (elitism: a good
point never leaves it until better ones arrive, and it is never measured again). Children
come from tournament-selected parents by uniform crossover, then mutation of a few knobs.
Until `warmup` points are known (measured, or warm-start evidence), proposals are random.
"""
from ..points import Point
from .base import Option, Strategy


class Evolutionary(Strategy):
    """A steady-state genetic algorithm: crossover and mutation of the best points measured."""
    name = "evolutionary"
    options = (Option("population", 24, "best measured points kept as parents", low=2),
               Option("warmup", 16, "random points before the first children", low=0),
               Option("tournament", 3, "members drawn per parent selection; the best wins", low=1),
               Option("crossover_rate", 0.5, "share of children made by crossing two parents", high=1))

    def propose(self) -> Point:
        ranked = self.ranked(with_prior=True)[: self.population]
        if len(self.history) + len(self.prior) < self.warmup or len(ranked) < 2:
            return self.space.sample(self.rng)
        parent = self._select(ranked)
        if self.rng.random() < self.crossover_rate:
            parent = self.space.crossover(parent, self._select(ranked), self.rng)
        return self.space.mutate(parent, self.rng, steps=self.rng.choice((1, 1, 2, 3)))

    def _select(self, ranked) -> Point:
        """Tournament: the best of a few random members (ranked is fastest first)."""
        return ranked[min(self.rng.sample(range(len(ranked)), min(self.tournament, len(ranked))))][0]
