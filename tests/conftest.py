"""Shared test settings: Hypothesis runs deterministically (same examples on every run); with
MINILLM_NO_SKIPS=1 (as .ci/run sets it) a skipped test fails the run (no_skips.py); the peers'
tests (tests/peers/) and the browser's carry the `slow` marker, which `-m "not slow"` leaves out
of the quick run (setup.cfg says which other tests carry it and why)."""
import os
import pathlib

import pytest
from hypothesis import HealthCheck, settings

pytest_plugins = ["no_skips"]

PEERS = pathlib.Path(__file__).resolve().parent / "peers"

settings.register_profile(
    "deterministic",
    derandomize=True,  # examples come from a fixed seed: CI and laptops see the same cases
    deadline=None,  # timing varies between machines; never fail a test for being slow
    max_examples=int(os.environ.get("MINILLM_HYPOTHESIS_EXAMPLES", "40")),
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("deterministic")


def pytest_collection_modifyitems(items):
    """Every peer's test (torch, transformers, llama.cpp, the real models) and every browser
    test is slow: each loads another library, a model file or Chromium."""
    for item in items:
        if item.path.is_relative_to(PEERS) or item.get_closest_marker("browser"):
            item.add_marker(pytest.mark.slow)


def pytest_ignore_collect(collection_path, config):
    """The quick run, `-m "not slow"`, leaves tests/peers/ unread: none of its tests would run,
    and importing them costs seconds (torch, transformers) and, where a peer is missing, a
    skipped module in the summary."""
    if " ".join(config.option.markexpr.split()) == "not slow" and \
            collection_path.is_relative_to(PEERS):
        return True
    return None
