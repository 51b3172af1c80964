"""--threads sets the thread count that NumPy's BLAS itself reports, with or without
threadpoolctl installed, and restores it afterwards."""
import sys
import warnings

import pytest

threadpoolctl = pytest.importorskip("threadpoolctl", reason="reads the BLAS thread count")


def blas_thread_counts():
    return [info["num_threads"] for info in threadpoolctl.threadpool_info()
            if info["user_api"] == "blas"]


@pytest.mark.parametrize("hide_threadpoolctl", [True, False])
@pytest.mark.parametrize("n", [1, 2])
def test_the_blas_reports_the_threads_asked_for(n, hide_threadpoolctl, monkeypatch):
    from minillm.cli import COMMANDS, main

    before = blas_thread_counts()
    assert before, "no BLAS library found by threadpoolctl"
    seen = []
    monkeypatch.setattr(COMMANDS["inspect"], "run", lambda args: seen.append(
        blas_thread_counts()) or 0)
    if hide_threadpoolctl:  # as if it were not installed: minillm's own setter does the work
        monkeypatch.setitem(sys.modules, "threadpoolctl", None)
    assert main(["inspect", "weights/target.npz", "--threads", str(n)]) == 0
    assert seen == [[n] * len(before)]
    assert blas_thread_counts() == before


@pytest.mark.parametrize("hide_threadpoolctl", [True, False])
def test_minillm_threads_sets_and_restores_in_a_with(hide_threadpoolctl, monkeypatch):
    import minillm

    before = blas_thread_counts()
    if hide_threadpoolctl:  # minillm's own setter does the work (this file's import stays)
        monkeypatch.setitem(sys.modules, "threadpoolctl", None)
    other = 2 if before[0] == 1 else 1
    with minillm.threads(other):
        inside = blas_thread_counts()
    assert inside == [other] * len(before)
    assert blas_thread_counts() == before


@pytest.mark.parametrize("hide_threadpoolctl", [True, False])
def test_minillm_threads_is_a_setter_too(hide_threadpoolctl, monkeypatch):
    import minillm

    before = blas_thread_counts()
    try:
        if hide_threadpoolctl:
            monkeypatch.setitem(sys.modules, "threadpoolctl", None)
        other = 2 if before[0] == 1 else 1
        minillm.threads(other)
        assert blas_thread_counts() == [other] * len(before)
    finally:
        threadpoolctl.threadpool_limits(limits=before[0], user_api="blas")
    assert blas_thread_counts() == before


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_minillm_threads_refuses_a_count_that_is_not_a_positive_int(bad):
    import minillm

    with pytest.raises(ValueError, match="threads: n must be"):
        minillm.threads(bad)


def test_more_blas_threads_than_free_cores_warns_once(monkeypatch):
    from minillm.fast import blas

    monkeypatch.setattr(blas, "_warned", False)
    monkeypatch.setattr(blas, "free_cores", lambda: 1)
    with blas.threads(1):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            blas.warn_if_oversubscribed()  # one thread never exceeds one free core
    with blas.threads(2):
        with pytest.warns(RuntimeWarning, match="BLAS runs 2 threads but 1 of this machine's "
                                                "cores is free.*minillm.threads\\(1\\)"):
            blas.warn_if_oversubscribed()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            blas.warn_if_oversubscribed()  # said once already


def test_free_cores_counts_the_cores_left_by_the_load(monkeypatch):
    from minillm.fast import blas

    monkeypatch.setattr(blas.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    for load, free in [(0.0, 4), (0.9, 4), (1.2, 3), (3.5, 1), (9.0, 1)]:
        monkeypatch.setattr(blas.os, "getloadavg", lambda load=load: (load, load, load))
        assert blas.free_cores() == free


def test_loading_a_model_warns_when_blas_threads_outnumber_the_free_cores(monkeypatch):
    import minillm
    from minillm.fast import blas

    monkeypatch.setattr(blas, "_warned", False)
    monkeypatch.setattr(blas, "free_cores", lambda: 1)
    with minillm.threads(1), warnings.catch_warnings():
        warnings.simplefilter("error")
        minillm.load("weights/target.npz")
    with minillm.threads(2):
        with pytest.warns(RuntimeWarning, match="call minillm.threads\\(1\\)") as caught:
            minillm.load("weights/target.npz")
        assert caught[0].filename == __file__  # it points at the caller's line
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            minillm.load("weights/target.npz")  # once a process


SETTLE = """
import json, sys, warnings
import threadpoolctl
import minillm
from minillm.fast import blas

threadpoolctl.threadpool_limits(limits=2, user_api="blas")  # as NumPy starts on two cores
blas.free_cores = lambda: 1  # another process keeps a core busy
if sys.argv[1] == "chosen":
    minillm.threads(2)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    minillm.load("weights/target.npz", fast=sys.argv[2] == "fast")
    minillm.load("weights/target.npz")
print(json.dumps([blas.blas_thread_count(), [str(w.message) for w in caught]]))
"""


@pytest.mark.parametrize("fast", ["fast", "reference"])
@pytest.mark.parametrize("choice", ["none", "chosen", "environment"])
def test_loading_a_model_settles_blas_on_one_thread_unless_the_program_chose(choice, fast):
    """A first script (load, generate) runs one BLAS thread as the command line does, with no
    warning; a count the program chose (minillm.threads(n), OPENBLAS_NUM_THREADS) stays, and
    one outnumbering the free cores is warned of, once. Each in a fresh process: the choice is
    the process's."""
    import json
    import os
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if not k.endswith("_THREADS")}
    env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    if choice == "environment":
        env["OPENBLAS_NUM_THREADS"] = "2"
    done = subprocess.run([sys.executable, "-c", SETTLE, choice, fast], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    count, warned = json.loads(done.stdout)
    if choice == "none":
        assert count == 1 and warned == []
    else:
        assert count == 2 and len(warned) == 1 and "call minillm.threads(1)" in warned[0]
