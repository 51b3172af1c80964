"""--threads sets the thread count that NumPy's BLAS itself reports, with or without
threadpoolctl installed, and restores it afterwards."""
import sys

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
