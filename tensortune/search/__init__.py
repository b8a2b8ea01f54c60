"""Search strategies behind one ask/tell interface, one per module."""
import importlib.util

from ..errors import UserError
from . import metaschedule
from .base import Strategy
from .bo import BayesianOptimisation
from .bo_prior import ModelPriorBO
from .evolutionary import Evolutionary
from .lfbo import ClassifierGuided
from .llm import LLMGuided
from .mobo import MultiObjectiveBO
from .model_guided import ModelGuided
from .random_search import RandomSearch
from .rl import PolicyGradient
from .tpe import NSGA2, TreeParzen

STRATEGIES: dict[str, type[Strategy]] = {s.name: s for s in (RandomSearch, Evolutionary, BayesianOptimisation,
                                                             TreeParzen, ClassifierGuided, ModelGuided,
                                                             PolicyGradient, LLMGuided, MultiObjectiveBO, NSGA2,
                                                             ModelPriorBO)}
REPLAYABLE = [name for name, s in STRATEGIES.items() if s.replayable]  # what benchmarks replay offline
DEFAULT = Evolutionary.name


def strategy_class(name: str) -> type[Strategy] | None:
    """The ask/tell class for `name`; None for 'metaschedule', which runs under its own loop."""
    if name == metaschedule.NAME:
        return None
    if name not in STRATEGIES:
        raise UserError(f"unknown strategy '{name}'; known: {', '.join([*STRATEGIES, metaschedule.NAME])}")
    missing = [m for m in STRATEGIES[name].requires if importlib.util.find_spec(m) is None]
    if missing:
        raise UserError(f"strategy '{name}' needs {', '.join(missing)}: pip install -e '.[search]'")
    STRATEGIES[name].preflight()
    return STRATEGIES[name]


def make_strategy(name: str, space, seed: int, options: dict | None = None) -> Strategy:
    """The strategy `name` over `space`, with some of its declared options set."""
    cls = strategy_class(name)
    if cls is None:
        raise UserError(f"'{name}' runs under its own loop, not ask/tell: use tensortune.tune")
    return cls(space, seed, **(options or {}))


def check_options(name: str, options: dict) -> None:
    """A UserError for an option `name` does not declare or a value it refuses, before any work."""
    cls = strategy_class(name)
    if cls is None:
        if options:
            raise UserError(f"'{name}' takes no options: it is TVM's own tuner")
        return
    cls.parse_options(options)


__all__ = ["DEFAULT", "REPLAYABLE", "STRATEGIES", "Strategy", "check_options", "make_strategy", "strategy_class"]
