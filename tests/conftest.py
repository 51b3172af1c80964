"""Shared test settings: Hypothesis runs deterministically (same examples on every run); with
MINILLM_NO_SKIPS=1 (as .ci/run sets it) a skipped test fails the run (no_skips.py)."""
import os

from hypothesis import HealthCheck, settings

pytest_plugins = ["no_skips"]

settings.register_profile(
    "deterministic",
    derandomize=True,  # examples come from a fixed seed: CI and laptops see the same cases
    deadline=None,  # timing varies between machines; never fail a test for being slow
    max_examples=int(os.environ.get("MINILLM_HYPOTHESIS_EXAMPLES", "40")),
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("deterministic")
