"""A testing kit for LLM inference engines: checkers that prove an engine's cache, batching,
window slides, sampler, speculative decoding and text streaming change nothing they should not.

An engine is any object with vocab_size, context_length, new_cache(batch_size) and
forward(tokens, cache=None, pad=None) -> (B, T, V) logits (minillm.testing.engine); a
minillm.Model is one as it is. Each checker raises AssertionError with the failing case, so it
runs inside any pytest test, and when it passes returns a report of what it saw (the largest
differences). They are deterministic: Hypothesis draws cases derandomized, statistical checks
use fixed seeds. docs/TESTING.md says how to point them at an engine.
This package needs Hypothesis (the `testing` extra, pip install -e ".[testing]" in a checkout,
pip install "minillm-numpy[testing]" otherwise); minillm itself does not.
"""
from ..plumbing.optional import require

require("hypothesis", "testing", "minillm.testing")  # one line saying how, not a bare traceback

from .batch import assert_batch_matches, check_batch_equivalence
from .cache import (assert_chunks_match, assert_rollback_matches, check_cache_equivalence,
                    check_rollback)
from .calibrate import Calibration, calibrate
from .cache import BudgetWarning
from .compare import Report, Tolerance
from .engine import Engine, EngineError, assert_deterministic
from .sampler import (LLAMA_CPP_ORDER, MINILLM_ORDER, SamplerReport, assert_draws_follow,
                      assert_filter_holds, check_draws, check_sampler, probabilities_in_order)
from .speculative import check_speculative_distribution, exact_sequence_distribution
from .stats import (FALSE_ALARM, chi_square, chi_square_critical,
                    power_by_noncentral_approximation, power_by_simulation, smallest_detectable_tv)
from .stream import assert_stream_matches, check_stream_decoder
from .window import assert_slides_match, check_window_slides, slide_views

__all__ = ["Engine", "Tolerance", "Report", "assert_deterministic", "EngineError",
           "calibrate", "Calibration", "BudgetWarning",
           "check_cache_equivalence", "check_rollback", "assert_chunks_match",
           "assert_rollback_matches",
           "check_batch_equivalence", "assert_batch_matches",
           "check_window_slides", "assert_slides_match", "slide_views",
           "check_sampler", "assert_filter_holds", "check_draws", "assert_draws_follow",
           "SamplerReport", "probabilities_in_order", "MINILLM_ORDER", "LLAMA_CPP_ORDER",
           "exact_sequence_distribution", "check_speculative_distribution",
           "check_stream_decoder", "assert_stream_matches",
           "FALSE_ALARM", "chi_square", "chi_square_critical", "power_by_simulation",
           "power_by_noncentral_approximation", "smallest_detectable_tv"]
