"""PNG pictures of the tables (matplotlib, when installed): one bar chart per workload, and
tokens/s against length for cached and uncached generation."""
from __future__ import annotations

import os
import textwrap


def pyplot():
    """matplotlib.pyplot drawing to files (no window), or None when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def write(results: list, folder: str) -> str:
    """results: [(workload, title, rows)]. Returns a line saying what was written."""
    plt = pyplot()
    if plt is None:
        return "plots: missing (matplotlib not installed)"
    os.makedirs(folder, exist_ok=True)
    written = []
    for workload, title, rows in results:
        shown = [r for r in rows if r.values and r.unit != "MiB"]
        if not shown:
            continue
        path = os.path.join(folder, f"{workload}.png")
        if workload == "cache":
            _lengths(plt, shown, title, path)
        else:
            _bars(plt, shown, title, path)
        written.append(path)
    return "plots: " + (", ".join(written) or "none")


def _bars(plt, rows, title, path):
    labels = [f"{r.case} | {r.contender}" for r in rows]
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(rows) + 1.2))
    medians = [r.median for r in rows]
    errors = [[r.median - min(r.values) for r in rows], [max(r.values) - r.median for r in rows]]
    ax.barh(range(len(rows)), medians, xerr=errors, color="tab:blue")
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")  # the roofline and the slowest peers differ by orders of magnitude
    ax.set_xlabel(", ".join(sorted({r.unit for r in rows})) + " (log scale)")
    ax.set_title(textwrap.fill(title, 90), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _lengths(plt, rows, title, path):
    """tokens/s against the number of new tokens, one line per contender."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for name in dict.fromkeys(r.contender for r in rows):
        mine = [r for r in rows if r.contender == name]
        lengths = [int(r.case.split(", ")[1].split()[0]) for r in mine]
        ax.plot(lengths, [r.median for r in mine], marker="o", label=name)
    ax.set_xlabel("new tokens")
    ax.set_ylabel("tokens/s")
    ax.set_yscale("log")
    ax.set_title(textwrap.fill(title, 60), fontsize=8)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
