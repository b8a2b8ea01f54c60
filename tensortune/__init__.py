"""tensortune: search schedules for tensor kernels, verify them, time them, keep the fastest."""

__version__ = "0.1.0"
