"""Uniform random sampling of the space: the baseline every strategy must beat."""
from ..points import Point
from .base import Strategy


class RandomSearch(Strategy):
    """Uniform random sampling of the space: the baseline every strategy must beat."""
    name = "random"

    def propose(self) -> Point:
        return self.space.sample(self.rng)
