"""How many threads NumPy's BLAS uses while a command runs, set with no optional package.

NumPy's wheels carry their own OpenBLAS, whose C library has a getter and a setter for its
thread count; ctypes calls them (the library is already loaded, so this finds the same copy
NumPy uses). Other BLAS builds (MKL, Accelerate, a system OpenBLAS) are left alone unless
threadpoolctl is installed, which knows them all.
"""
from __future__ import annotations

import contextlib
import ctypes
import sys
from pathlib import Path

from .usage import UsageError

# (getter, setter) names in the OpenBLAS builds NumPy ships or links: scipy-openblas (NumPy 2
# wheels, 64-bit integers), plain OpenBLAS with and without the 64-bit suffix.
FUNCTIONS = (("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
             ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads"),
             ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
             ("openblas_get_num_threads", "openblas_set_num_threads"))


def numpy_openblas():
    """(get, set) functions of the OpenBLAS that NumPy loaded, or None when none is found."""
    import numpy

    here = Path(numpy.__file__).parent
    for path in sorted(here.parent.glob("numpy.libs/*openblas*")) + sorted(
            here.glob(".dylibs/*openblas*")):
        try:
            library = ctypes.CDLL(str(path))
        except OSError:
            continue
        for get, set_ in FUNCTIONS:
            if hasattr(library, get) and hasattr(library, set_):
                return getattr(library, get), getattr(library, set_)
    return None


@contextlib.contextmanager
def blas_threads(n: int):
    """Run the body with NumPy's BLAS on n threads, then restore the previous count."""
    if n < 1:
        raise UsageError(f"--threads: must be at least 1, got {n}")
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        threadpool_limits = None
    if threadpool_limits is not None:
        with threadpool_limits(limits=n, user_api="blas"):
            yield
        return
    openblas = numpy_openblas()
    if openblas is None:
        print(f"minillm: warning: --threads {n} not applied: NumPy's BLAS is not its own "
              "OpenBLAS; install threadpoolctl to set it", file=sys.stderr)
        yield
        return
    get, set_ = openblas
    before = get()
    set_(n)
    try:
        yield
    finally:
        set_(before)
