"""How many threads NumPy's BLAS runs: `minillm.threads(n)`, the setting behind `--threads`.

Every matrix product of minillm runs in NumPy's BLAS, which starts as many threads as the
machine has cores. The matrices of small models gain nothing from a second thread, and BLAS
threads wait on one another whenever another process keeps a core busy: a step then costs many
times what it costs on one thread. The command line runs one thread unless told otherwise; a
Python program chooses with `threads(n)`.

NumPy's wheels carry their own OpenBLAS, whose C library has a getter and a setter for its
thread count; ctypes calls them (the library is already loaded, so this finds the same copy
NumPy uses). Other BLAS builds (MKL, Accelerate, a system OpenBLAS) are left alone unless
threadpoolctl is installed, which knows them all.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import warnings
from pathlib import Path

# (getter, setter) names in the OpenBLAS builds NumPy ships or links: scipy-openblas (NumPy 2
# wheels, 64-bit integers), plain OpenBLAS with and without the 64-bit suffix.
FUNCTIONS = (("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
             ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads"),
             ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
             ("openblas_get_num_threads", "openblas_set_num_threads"))


@functools.cache
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


def threads(n: int) -> contextlib.ExitStack:
    """Run NumPy's BLAS on n threads from now on; in a `with`, only for the block.

        minillm.threads(1)             # a setter: every later product runs on one thread
        with minillm.threads(2):       # a context manager: the previous count comes back after
            ...

    The count is set at the call; the returned object, closed by the `with`, restores the
    count that was there before.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"threads: n must be a whole number of at least 1, got {n!r}")
    restore = contextlib.ExitStack()
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        threadpool_limits = None
    if threadpool_limits is not None:  # it sets at construction and restores at its exit
        restore.enter_context(threadpool_limits(limits=n, user_api="blas"))
        return restore
    openblas = numpy_openblas()
    if openblas is None:
        warnings.warn(f"threads({n}) not applied: NumPy's BLAS is not its own OpenBLAS; "
                      "install threadpoolctl to set it", RuntimeWarning, stacklevel=2)
        return restore
    get, set_ = openblas
    restore.callback(set_, get())
    set_(n)
    return restore


def blas_thread_count() -> int | None:
    """The threads NumPy's BLAS runs now, or None when no known BLAS answers."""
    openblas = numpy_openblas()
    if openblas is not None:
        return int(openblas[0]())
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    counts = [info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"]
    return max(counts) if counts else None


def free_cores() -> int:
    """Cores this process may run on, less those the last minute's load average kept busy
    (whole cores only, at least one)."""
    if hasattr(os, "sched_getaffinity"):
        cores = len(os.sched_getaffinity(0))
    else:
        cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # not on every system
        load = 0.0
    return max(1, cores - int(load))


_warned = False  # the warning below is given once a process, however many models are loaded


def warn_if_oversubscribed(stacklevel: int = 2) -> None:
    """Warn, once, when NumPy's BLAS runs more threads than there are free cores."""
    global _warned
    if _warned:
        return
    count, free = blas_thread_count(), free_cores()
    if count is None or count <= free:
        return
    _warned = True
    warnings.warn(f"NumPy's BLAS runs {count} threads but {free} of this machine's cores "
                  f"{'is' if free == 1 else 'are'} free: its threads will wait on each other "
                  "and every step slows down; call minillm.threads(1) (on the command line: "
                  "--threads 1)",
                  RuntimeWarning, stacklevel=stacklevel + 1)
