"""How many threads NumPy's BLAS runs: `minillm.threads(n)`, the setting behind `--threads`.

Every matrix product of minillm runs in NumPy's BLAS, which starts as many threads as the
machine has cores. The matrices of small models gain nothing from a second thread, and BLAS
threads wait on one another whenever another process keeps a core busy: a step then costs many
times what it costs on one thread. The command line runs one thread unless told otherwise, and
so does a Python program once it loads a model (`settle_threads`), unless it chose first: with
`threads(n)`, or with a BLAS variable in the environment (OPENBLAS_NUM_THREADS, ...). A choice
of more threads than there are free cores is warned of, once.

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
    global _chosen
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"threads: n must be a whole number of at least 1, got {n!r}")
    _chosen = True  # loading a model leaves the count alone from now on (settle_threads)
    return set_threads(n, stacklevel=3)


def set_threads(n: int, stacklevel: int | None = 2) -> contextlib.ExitStack:
    """threads(n) without marking the count as the program's choice; a BLAS it cannot set is
    warned of at `stacklevel` (None: silently left alone)."""
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
        if stacklevel is not None:
            warnings.warn(f"threads({n}) not applied: NumPy's BLAS is not its own OpenBLAS; "
                          "install threadpoolctl to set it", RuntimeWarning,
                          stacklevel=stacklevel)
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
_chosen = False  # the program called threads(n)
_settled = False  # settle_threads set one thread (once a process)
# The environment variables through which BLAS libraries take their thread count at start.
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS", "BLIS_NUM_THREADS")


def chosen() -> bool:
    """Whether the program chose a thread count: threads(n), or a variable of the environment."""
    return _chosen or any(os.environ.get(name) for name in THREAD_VARIABLES)


def settle_threads(stacklevel: int = 2) -> None:
    """What loading a model does to the thread count: one thread, as the command line runs,
    when the program chose none (once a process: a count set since, by any means, stays);
    otherwise the choice stays, warned of once if it outnumbers the free cores."""
    global _settled
    if chosen():
        return warn_if_oversubscribed(stacklevel + 1)
    if not _settled:
        _settled = True
        set_threads(1, stacklevel=None)  # a BLAS it does not know is left as it is


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
