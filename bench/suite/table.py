"""The Markdown tables: median (min-max) per contender, and minillm float32's speed ratio."""
from __future__ import annotations

SPEEDS = ("tokens/s", "MB/s", "s")  # units that get a ratio; sizes do not


def _figure(x: float) -> str:
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}"


def _cell(row) -> str:
    if row.missing is not None:
        return f"missing ({row.missing})"
    if len(row.values) == 1:
        return _figure(row.values[0])
    return f"{_figure(row.median)} ({_figure(min(row.values))}–{_figure(max(row.values))})"


def _ratio(row, reference) -> str:
    """How many times faster the reference is than this row (> 1: the reference is ahead)."""
    if row.missing is not None or reference is None or reference is row or not row.values:
        return ""
    if row.unit != reference.unit or row.unit not in SPEEDS:
        return ""
    r = reference.median / row.median if row.higher_is_better else row.median / reference.median
    return f"{r:.2f}×"


def markdown(title: str, rows: list) -> str:
    """One workload's table. Each case's rows are compared with its first row (minillm)."""
    lines = [f"### {title}", "",
             "| case | contender | median (min–max) | unit | minillm speed ÷ this | note |",
             "| --- | --- | --- | --- | --- | --- |"]
    references = {}
    for r in rows:
        references.setdefault(r.case, r if r.missing is None and r.values else None)
    for row in rows:
        lines.append(f"| {row.case} | {row.contender} | {_cell(row)} | {row.unit} | "
                     f"{_ratio(row, references.get(row.case))} | {row.note} |")
    return "\n".join(lines) + "\n"
