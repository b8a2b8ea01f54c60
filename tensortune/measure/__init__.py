"""Build (isolated worker processes), verify (against the reference) and time candidates."""
from .config import MeasureConfig
from .measurer import Measurer
from .result import FAILURES, OK, Result

__all__ = ["FAILURES", "OK", "MeasureConfig", "Measurer", "Result"]
