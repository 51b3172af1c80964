"""--threads: the BLAS thread count of a command (minillm/blas.py does the setting)."""
from __future__ import annotations

from ..blas import threads
from .usage import UsageError


def blas_threads(n: int):
    """A context manager running the command's body with NumPy's BLAS on n threads."""
    if n < 1:
        raise UsageError(f"--threads: must be at least 1, got {n}")
    return threads(n)
