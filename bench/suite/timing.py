"""Run contenders side by side: a warm-up each, then rounds A B C, A B C, ... of timed runs;
and best_time, the microseconds of one short call, for the studies' small products."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field


@dataclass
class Missing:
    """A contender that cannot run here, and why."""

    reason: str


@dataclass
class Row:
    """One line of a table: a contender's figures on one case of a workload.

    values: one figure per repeat, in `unit` ("tokens/s" and "MB/s": higher is better;
    "s": lower is better). A roofline or a size is a row with one computed value.
    """

    workload: str
    case: str
    contender: str
    unit: str
    values: list = field(default_factory=list)
    note: str = ""
    missing: str | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def higher_is_better(self) -> bool:
        return self.unit != "s"


def measure(contenders: dict, repeats: int, work: float, warm=None) -> dict:
    """Seconds per run of each contender: {name: [s, s, ...]} (Missing entries are skipped).

    contenders: {name: fn or Missing}, fn(n) does the work once for size n (tokens);
    work: the size of a timed run; warm: the size of the untimed warm-up run (None: no warm-up).
    """
    ready = {name: fn for name, fn in contenders.items() if not isinstance(fn, Missing)}
    if warm is not None:
        for fn in ready.values():
            fn(warm)
    seconds = {name: [] for name in ready}
    for _ in range(repeats):
        for name, fn in ready.items():  # interleaved: every contender once per round
            start = time.perf_counter()
            fn(work)
            seconds[name].append(time.perf_counter() - start)
    return seconds


def rows(workload, case, contenders, seconds, unit, amount=1.0, notes=None) -> list:
    """Table rows from measure(): figures are amount / seconds ("tokens/s") or seconds ("s")."""
    notes = notes or {}
    out = []
    for name, fn in contenders.items():
        if isinstance(fn, Missing):
            out.append(Row(workload, case, name, unit, missing=fn.reason))
            continue
        values = seconds[name] if unit == "s" else [amount / s for s in seconds[name]]
        out.append(Row(workload, case, name, unit, values, note=notes.get(name, "")))
    return out


def best_time(fn, repeat: int) -> float:
    """Best mean time of one call in microseconds; about 20 ms of calls per timing."""
    fn()
    t0 = time.perf_counter()
    fn()
    calls = max(1, int(0.02 / max(time.perf_counter() - t0, 1e-7)))
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best * 1e6
