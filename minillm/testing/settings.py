"""How every checker runs its property: the same cases on every run, a bounded search for the
smallest failing case, and an engine that answers differently twice named as such."""
from __future__ import annotations

import time

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Flaky

from .engine import EngineError

SHRINK_SECONDS = 20.0  # how long a failing check looks for a smaller failing case


def checker_settings(max_examples: int) -> settings:
    """Deterministic (a fixed seed, no example database), no deadline (engines differ in speed),
    `max_examples` cases before shrinking a failure to a small counterexample. One failure is
    reported (the first found, shrunk), as a plain AssertionError rather than a group, without
    Hypothesis' explanation phase (it reruns the case and lengthens the message)."""
    return settings(max_examples=max_examples, derandomize=True, deadline=None, database=None,
                    print_blob=False, report_multiple_bugs=False,
                    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
                    suppress_health_check=list(HealthCheck))


def framed(error, note: str, replay: str | None) -> str:
    """A failure's text with `note` (which check, how many cases) after its first part, then
    its hint line (compare.noise_hint) if it has one, then the replay line last."""
    text, _, hint = str(error).partition("\nhint: ")
    return (f"{text} [{note}]" + (f"\nhint: {hint}" if hint else "")
            + (f"\nreplay: {replay}" if replay is not None else ""))


def _key(case):
    """A case as plain, comparable text (arrays as nested lists)."""
    if isinstance(case, np.ndarray):
        return repr(case.tolist())
    if isinstance(case, (tuple, list)):
        return "(" + ", ".join(_key(part) for part in case) + ")"
    return repr(case)


def run_property(cases, check, max_examples: int, shrink_seconds: float = SHRINK_SECONDS,
                 what: str = "", replay=None):
    """check(case) on `max_examples` cases drawn from the strategy `cases` (Hypothesis,
    derandomized); on a failure, Hypothesis looks for a smaller failing case for at most
    `shrink_seconds` after the first one, then reports the smallest found.

    The budget: once spent, cases not seen failing before count as passing without being run,
    so the search stops improving and ends; the case reported is still one that failed when
    run. If a failing case passes when Hypothesis runs it again, the engine answered the same
    input two ways: that is reported as such, with the first failure.

    A failure (an AssertionError, or an exception of the engine: EngineError) is raised as an
    AssertionError that names the check (`what`), says how many cases ran, and ends with one
    line that replays the case reported (`replay(case)`: the assert call with its arguments).
    """
    failing, first_failure, ran, last = set(), [], [0, 0], []

    def bounded(case):
        key = _key(case)
        if first_failure and time.monotonic() - first_failure[0] > shrink_seconds \
                and key not in failing:
            return  # the search's time is up: no new case is tried
        ran[0] += 1
        try:
            check(case)
        except (AssertionError, EngineError):
            failing.add(key)
            last[:] = [case]
            if not first_failure:
                first_failure.append(time.monotonic())
                ran[1] = ran[0] - 1  # the cases that passed before the first failure
            raise

    def counted(error) -> str:
        return framed(error, f"{what + ': ' if what else ''}{ran[1]} cases passed before the "
                      f"first failure; {ran[0]} ran in all, shrinking included",
                      replay(last[0]) if replay is not None and last else None)

    try:
        checker_settings(max_examples)(given(cases)(bounded))()
    except Flaky as error:
        first = getattr(error, "exceptions", [error])[0]
        raise AssertionError(counted(f"the engine is not deterministic: a case failed, then "
                                     f"passed when run again; the first failure: {first}")
                             ) from error
    except (AssertionError, EngineError) as error:
        raise AssertionError(counted(error)) from error


def as_list(value):
    """A case's part as plain Python for a replay line (arrays as nested lists)."""
    return value.tolist() if isinstance(value, np.ndarray) else value


def run_seeded(check, what: str, replay: str):
    """check() on one seeded case, after the drawn ones; its result. A failure is run again,
    as the drawn cases are, so that an engine that answers two ways is named; it is raised
    with `what` (why the case ran) and a last line that replays it."""
    try:
        return check()
    except (AssertionError, EngineError) as error:
        failure = error
    try:
        check()
    except (AssertionError, EngineError):
        raise AssertionError(framed(failure, what, replay)) from failure
    raise AssertionError(f"the engine is not deterministic: a case failed, then passed when "
                         f"run again; the first failure: {failure}\nreplay: {replay}")
