"""Search strategies behind one ask/tell interface, one per module."""
from ..errors import UserError
from .base import Strategy
from .bo import BayesianOptimisation
from .evolutionary import Evolutionary
from .random_search import RandomSearch
from .tpe import TreeParzen

STRATEGIES: dict[str, type[Strategy]] = {s.name: s for s in (RandomSearch, Evolutionary, BayesianOptimisation,
                                                             TreeParzen)}
DEFAULT = Evolutionary.name


def strategy_class(name: str) -> type[Strategy]:
    if name not in STRATEGIES:
        raise UserError(f"unknown strategy '{name}'; known: {', '.join(STRATEGIES)}")
    return STRATEGIES[name]


def make_strategy(name: str, space, seed: int) -> Strategy:
    return strategy_class(name)(space, seed)


__all__ = ["DEFAULT", "STRATEGIES", "Strategy", "make_strategy", "strategy_class"]
