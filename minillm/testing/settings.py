"""The Hypothesis settings every checker runs with: the same examples on every run."""
from __future__ import annotations

from hypothesis import HealthCheck, settings


def checker_settings(max_examples: int) -> settings:
    """Deterministic (a fixed seed, no example database), no deadline (engines differ in speed),
    `max_examples` cases before shrinking a failure to a small counterexample. One failure is
    reported (the first found, shrunk), as a plain AssertionError rather than a group."""
    return settings(max_examples=max_examples, derandomize=True, deadline=None, database=None,
                    print_blob=False, report_multiple_bugs=False,
                    suppress_health_check=list(HealthCheck))
