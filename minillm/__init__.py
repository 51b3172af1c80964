"""minillm: LLM inference in NumPy, written to be read next to the math.

    import minillm
    model = minillm.load("weights/target.npz")
    logits = model.forward(tokens)            # (B, T) ids -> (B, T, vocab) logits
"""
from .fast.blas import threads
from .config import ModelConfig
from .generate import generate, stream
from .logprobs import Rollout, ScoredToken
from .knobs import GenerationConfig
from .kv_cache import KVCache
from .model import Model, random_model
from .quantize import QuantizedWeight, quantize, quantize_rows
from .sampling import SamplingConfig, filtered_probs, sample_next_token
from .speculative import SpeculativeStats, speculative_generate
from .files.npz import WeightsError, load, save
from . import constrain  # minillm.constrain.regex, json_schema, choice: structured output
from . import serving  # minillm.serving.Engine: many requests through one model at once

__version__ = "0.1.0"

# The reading path, in the order a learner reads it (the README's "Reading order" shows this
# list; tests/test_reading_path.py holds each module to it): the whole algorithm in one file,
# then the library's chapters, each after every chapter it imports (the constrained decoding
# and serving chapters' in their folders). Everything else lives in the subpackages.
READING_ORDER = ("tiny", "rope_scaling", "layers", "kv_cache", "parameters", "config", "inputs",
                 "model", "knobs", "sampling", "constrain.pattern", "constrain.nfa",
                 "constrain.dfa", "constrain.index", "constrain.numbers", "constrain.strings",
                 "constrain.refs", "constrain.schema", "constrain.constraint",
                 "window", "stopping", "logprobs", "generate",
                 "drafters", "speculative", "serving.block_manager", "serving.batches",
                 "serving.scheduler", "serving.speculative", "serving.engine", "conversation",
                 "quantize")

__all__ = ["ModelConfig", "KVCache", "Model", "random_model", "WeightsError", "load", "save",
           "SamplingConfig", "filtered_probs", "sample_next_token", "GenerationConfig",
           "generate", "stream", "Rollout", "ScoredToken", "quantize_rows", "quantize",
           "QuantizedWeight", "speculative_generate", "SpeculativeStats", "threads", "constrain",
           "serving"]
