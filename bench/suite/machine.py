"""The run's header (date, CPU, NumPy, BLAS, threads) and the thread setting itself."""
from __future__ import annotations

import datetime
import os
import platform

import numpy as np


def set_threads(n: int):
    """Limit NumPy's BLAS, torch and `tokenizers` to n threads.

    Returns (a line saying what was done, a function that restores the previous setting).
    torch is imported first (when installed) so that threadpoolctl also sees its OpenMP pool.
    """
    done, undo = [], []
    os.environ["RAYON_NUM_THREADS"] = str(n)  # read by `tokenizers` when it is imported
    try:
        import torch
        undo.append(lambda before=torch.get_num_threads(): torch.set_num_threads(before))
        torch.set_num_threads(n)
        done.append(f"torch.set_num_threads({n})")
    except ImportError:
        pass
    try:
        from threadpoolctl import threadpool_limits
        undo.append(threadpool_limits(limits=n).restore_original_limits)
        done.append(f"threadpoolctl limits={n}")
    except ImportError:
        done.append("threadpoolctl missing: NumPy's BLAS threads not controlled")

    def restore():
        for fn in undo:
            fn()
    return f"{n} thread(s): " + ", ".join(done), restore


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def blas() -> str:
    """The BLAS libraries loaded, with their thread counts (threadpoolctl), or NumPy's config."""
    try:
        from threadpoolctl import threadpool_info
        return "; ".join(f"{i.get('internal_api')} {i.get('version') or ''} "
                         f"({i.get('user_api')}, {i.get('num_threads')} threads, "
                         f"{os.path.basename(i.get('filepath', ''))})"
                         for i in threadpool_info())
    except ImportError:
        pass
    try:
        info = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return f"{info.get('name')} {info.get('version')} (numpy build; threadpoolctl missing)"
    except Exception:  # show_config's layout differs across NumPy versions
        return "unknown (threadpoolctl missing)"


def peers() -> str:
    versions = []
    for name in ("torch", "transformers", "tokenizers"):
        try:
            versions.append(f"{name} {__import__(name).__version__}")
        except ImportError:
            versions.append(f"{name} missing")
    return ", ".join(versions)


def header(threads_line: str, argv: list) -> str:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return "\n".join([
        f"## Run of {now}, {threads_line.split(':')[0]}", "",
        f"- date: {now}; command: `python -m bench {' '.join(argv)}`".rstrip(),
        f"- machine: {cpu_model()}, {os.cpu_count()} cores, load average at start {load}",
        f"- Python {platform.python_version()}, numpy {np.__version__}, {peers()}",
        f"- BLAS: {blas()}",
        f"- threads: {threads_line}",
    ]) + "\n"
