"""A testing kit for LLM inference engines: checkers that prove an engine's cache, batching,
sampler and speculative decoding change nothing they should not.

Each checker raises AssertionError with the failing case, so it runs inside any pytest test.
They are deterministic: Hypothesis draws cases derandomized, statistical checks use seeded
NumPy generators. Point them at an engine through minillm.testing.Engine (docs/TESTING.md).
This package needs Hypothesis (pip install minillm[testing]); minillm itself does not.
"""
from .batch import assert_batch_matches, batch_cases, check_batch_equivalence
from .cache import (assert_chunks_match, assert_rollback_matches, check_cache_equivalence,
                    chunk_cases, rollback_cases)
from .engine import Engine, minillm_engine
from .sampler import assert_draws_follow, check_filtered_probs, check_sampler
from .speculative import (assert_continuations_follow, check_speculative,
                          continuation_probabilities, likely_continuations)
from .stats import (FALSE_ALARM, chi_square, chi_square_critical, power_by_noncentral_approximation,
                    power_by_simulation)

__all__ = ["Engine", "minillm_engine",
           "check_cache_equivalence", "assert_chunks_match", "assert_rollback_matches",
           "chunk_cases", "rollback_cases",
           "check_batch_equivalence", "assert_batch_matches", "batch_cases",
           "check_sampler", "check_filtered_probs", "assert_draws_follow",
           "check_speculative", "assert_continuations_follow", "likely_continuations",
           "continuation_probabilities",
           "FALSE_ALARM", "chi_square", "chi_square_critical", "power_by_simulation",
           "power_by_noncentral_approximation"]
