"""llama.cpp as a kit engine, through llama-cpp-python's low-level binding.

    llama = LlamaContext("model.gguf", flash_attn=True)    # one llama_context, 8 sequences
    engine = llama_engine(llama)                            # check_cache_equivalence(engine, ...)
    decode = llama_window_loop(llama, window=16)            # check_window_slides(decode, ...)
    check_sampler(llama_filter, order=LLAMA_CPP_ORDER, dtype="float32", atol=1e-6)
    llama.close()

One llama_context with `n_seq` sequence slots of `n_ctx_seq` cells each; each row of a kit call
is its own sequence, and all rows of a call go to llama.cpp in one llama_decode (one ubatch:
n_batch = n_ubatch = every cell), with logits for every token. A cache takes sequences from
the context and gives them back on close(); truncate(length) removes cells
(llama_memory_seq_rm). Padding columns are not fed at all: a row's positions count from its
first real token, and the logits of its padding are returned as zeros.

The context's knobs are arguments, because the kit's findings depend on them
(docs/TESTING.md): `flash_attn` (one-token steps take another kernel without it),
`kv_unified` (off: each sequence has a KV buffer of its own; on: cells lie wherever the other
sequences left room, and results can depend on them), `n_seq` (the kit keeps at most two
caches of `max_batch` rows alive: 2 * max_batch slots suffice), `repack` (llama.cpp's weight
repacking into CPU-friendly layouts, `use_extra_bufts`), `threads`.
"""
from __future__ import annotations

import ctypes

import numpy as np

from ...sampling import SamplingConfig
from ..engine import Engine
from ..window import rereading_loop

INSTALL = ('pip install llama-cpp-python (for a CPU build that runs everywhere: CMAKE_ARGS='
           '"-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON")')
_QUIET = []  # the log callback that drops llama.cpp's messages, kept alive while in use


def binding():
    """llama_cpp, the binding, or an ImportError saying how to install it."""
    try:
        import llama_cpp
    except ImportError:
        raise ImportError(f"minillm.testing.adapters.llama_cpp needs the `llama_cpp` package "
                          f"(llama-cpp-python): {INSTALL}") from None
    return llama_cpp


class LlamaContext:
    """One llama_context over a GGUF file: `n_seq` sequence slots of `n_ctx_seq` cells each,
    logits for every token. `free`: the sequences no cache holds."""

    def __init__(self, path, *, flash_attn: bool = True, kv_unified: bool = False,
                 n_seq: int = 8, n_ctx_seq: int = 128, repack: bool = True, threads: int = 1):
        lib = self.lib = binding()
        lib.llama_backend_init()
        if not _QUIET:
            _QUIET.append(lib.llama_log_callback(lambda level, text, data: None))
        lib.llama_log_set(_QUIET[0], ctypes.c_void_p(0))
        model_params = lib.llama_model_default_params()
        model_params.use_extra_bufts = repack
        self.model = lib.llama_model_load_from_file(str(path).encode(), model_params)
        if not self.model:
            raise ValueError(f"path: llama.cpp could not load a model from {path}")
        params = lib.llama_context_default_params()
        params.n_ctx, params.n_seq_max, params.kv_unified = n_seq * n_ctx_seq, n_seq, kv_unified
        params.n_batch = params.n_ubatch = n_seq * n_ctx_seq  # one call is one ubatch
        params.n_outputs_max_per_seq = 0  # logits for every token, not only the last
        params.n_threads = params.n_threads_batch = threads
        params.flash_attn_type = (lib.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn
                                  else lib.LLAMA_FLASH_ATTN_TYPE_DISABLED)
        self.ctx = lib.llama_init_from_model(self.model, params)
        self.memory = lib.llama_get_memory(self.ctx)
        self.vocab_size = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(self.model))
        self.n_ctx_seq, self.free = n_ctx_seq, list(range(n_seq))
        self.batch = lib.llama_batch_init(params.n_batch, 0, 1)

    def take(self, n: int) -> list[int]:
        """n free sequences, or a RuntimeError saying how many are free."""
        if n > len(self.free):
            raise RuntimeError(f"llama.cpp context: {n} sequences wanted, {len(self.free)} free "
                               f"(n_seq: the kit needs 2 * max_batch)")
        taken, self.free = self.free[:n], self.free[n:]
        return taken

    def give_back(self, seqs) -> None:
        for seq in seqs:
            self.lib.llama_memory_seq_rm(self.memory, seq, -1, -1)
        self.free += list(seqs)

    def decode(self, rows) -> list[np.ndarray]:
        """rows: (seq, first position, token ids) -> each row's logits (len(ids), V), from one
        llama_decode call over all of them."""
        b, n = self.batch, 0
        for seq, start, ids in rows:
            for i, token in enumerate(ids):
                b.token[n], b.pos[n], b.n_seq_id[n], b.logits[n] = int(token), start + i, 1, 1
                b.seq_id[n][0] = seq
                n += 1
        b.n_tokens = n
        status = self.lib.llama_decode(self.ctx, b)
        if status != 0:
            raise RuntimeError(f"llama_decode returned {status}")
        out, i = [], 0
        for _, _, ids in rows:
            out.append(np.stack([np.ctypeslib.as_array(
                self.lib.llama_get_logits_ith(self.ctx, i + j), shape=(self.vocab_size,))
                for j in range(len(ids))]).copy() if len(ids) else
                np.zeros((0, self.vocab_size), dtype=np.float32))
            i += len(ids)
        return out

    def close(self) -> None:
        self.lib.llama_batch_free(self.batch)
        self.lib.llama_free(self.ctx)
        self.lib.llama_model_free(self.model)


class LlamaCache:
    """A kit cache: one llama.cpp sequence per row, how many columns it holds, each row's
    padding; truncate removes cells, close gives the sequences back."""

    def __init__(self, llama, batch_size):
        self.llama, self.seqs = llama, llama.take(batch_size)
        self.length, self.pad = 0, np.zeros(batch_size, dtype=np.int64)

    def truncate(self, length):
        for seq, p in zip(self.seqs, self.pad):
            self.llama.lib.llama_memory_seq_rm(self.llama.memory, seq, max(0, length - p), -1)
        self.length = length

    def close(self):
        self.llama.give_back(self.seqs)
        self.seqs = []


def llama_engine(llama: LlamaContext, position_offset: int = 0) -> Engine:
    """The adapter: each row is its own sequence; padding columns are not fed at all (a row's
    positions count from its first real token), their logits returned as zeros.
    Logits in float32, as llama.cpp holds them (calibrate's floor is float32's).
    position_offset: every position moved by this constant (a text read from position
    `position_offset` on): with RoPE the angles between queries and keys do not change, so an
    exact engine gives the same logits; calibrate(..., shifted=...) measures how far it does."""
    def forward(tokens, cache=None, pad=None):
        B, T = tokens.shape
        scratch = cache is None
        if scratch:
            cache = LlamaCache(llama, B)
        if pad is not None:
            cache.pad = np.asarray(pad)
        try:
            first = position_offset + np.maximum(0, cache.length - cache.pad)  # (B,)
            rows = [(seq, int(first[r]), tokens[r, max(0, p - cache.length):])
                    for r, (seq, p) in enumerate(zip(cache.seqs, cache.pad))]
            logits = np.zeros((B, T, llama.vocab_size), dtype=np.float32)
            for r, row in enumerate(llama.decode(rows)):
                logits[r, T - len(row):] = row
            cache.length += T
            return logits
        finally:
            if scratch:
                cache.close()

    return Engine(llama.vocab_size, llama.n_ctx_seq - position_offset, forward,
                  new_cache=lambda batch_size: LlamaCache(llama, batch_size))


def llama_window_loop(llama: LlamaContext, window: int, keep: int | None = None):
    """check_window_slides' decode(prompt, n) for llama.cpp: greedy decoding with a window of
    `window` cells that, on a slide, removes the sequence's cells and reads the newest `keep`
    tokens again from position 0 (window.rereading_loop). llama.cpp's own context shift
    (llama_memory_seq_add) is another loop, an approximation on a multi-layer model."""
    return rereading_loop(llama_engine(llama), window, keep)


def llama_filter(z, knobs: SamplingConfig) -> np.ndarray:
    """llama.cpp's sampler chain as llama-cpp-python builds it, as check_sampler's filter:
    top-k, top-p, min-p, then the temperature, the final softmax over what is left (what
    `dist` draws from); temperature 0 is the greedy sampler (the first largest logit, all the
    mass). Logits (B, V), read as float32 as llama.cpp holds them; probabilities (B, V).
    check_sampler(llama_filter, order=LLAMA_CPP_ORDER, dtype="float32", atol=1e-6)."""
    lib = binding()
    z = np.asarray(z, dtype=np.float32)
    probs = np.zeros(z.shape)
    if knobs.greedy:
        probs[np.arange(len(z)), z.argmax(axis=-1)] = 1.0
        return probs
    chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
    if knobs.top_k is not None:
        lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_top_k(knobs.top_k))
    if knobs.top_p is not None:
        lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_top_p(knobs.top_p, 1))
    if knobs.min_p is not None:
        lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_min_p(knobs.min_p, 1))
    lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_temp(knobs.temperature))
    try:
        for r, row in enumerate(z):
            data = (lib.llama_token_data * len(row))(
                *[lib.llama_token_data(i, float(logit), 0.0) for i, logit in enumerate(row)])
            cur = lib.llama_token_data_array(data, len(row), -1, False)
            lib.llama_sampler_apply(chain, ctypes.byref(cur))
            kept = data[:cur.size]
            ids = np.array([d.id for d in kept])
            logits = np.array([d.logit for d in kept], dtype=np.float64)
            e = np.where(np.isfinite(logits), np.exp(logits - logits.max()), 0.0)
            probs[r, ids] = e / e.sum()
    finally:
        lib.llama_sampler_free(chain)
    return probs
