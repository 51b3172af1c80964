"""What each widget of the desk shows, computed by minillm: one function per widget, taking the
desk and a checked request (fields.py), returning a JSON-ready dict.

Every figure comes from the library's public functions (filtered_probs, sample_next_token,
generate, speculative_generate, quantize, model.forward, serving.Engine, and minillm.constrain's
constraints with allowed and advance); nothing here re-implements a knob. The widgets that
only write texts (the temperatures, the repetition) get them from the desk's one serving
engine (batched.py), each as `generate` alone writes it, and take `abandoned`, which stops
them when their answer is no longer wanted (BATCHED).

Before any work, each widget counts the token positions its forward passes will compute (at
most: a text may stop early) and `charge` refuses the request (422) when those positions times
the model's parameters pass the desk's bound: what costs a second of the shipped model costs a
hundred of a model a hundred times larger.
"""
from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from .. import filtered_probs, generate, quantize, sample_next_token, speculative_generate
from ..constrain.constraint import DONE
from ..study.explain import REPEAT_N, Watched, entropy, repeats, surprise
from .batched import never, rollouts
from .fields import (ENDPOINTS, MAX_NEW_TOKENS, MAX_PROMPT_CHARS, MAX_REQUESTS,
                     MAX_SERVING_TOKENS, MAX_STEPS, MAX_WORK, RequestError, serving_prompts)
from .masks import DEFAULTS, KINDS, constraint_of, read_steps
from .packing import stored_bytes
from .rounds import Recorded, rounds
from .steps import Counted, run_steps

BEGINNINGS = ["In the beginning", "And the LORD said to Moses,", "Jesus answered them,",
              "The king of Israel"]
CHAT_BEGINNINGS = ["What is the capital of France?", "Tell me a story about a brave mouse.",
                   "Write a short poem about the sea.", "Why is the sky blue?"]
MASK_PROMPTS = {False: "A man of the land of Uz, as JSON:",
                True: "Describe a king of Israel as JSON."}
CURVE_POINTS = 160  # ranks shown on the log-scale charts: every rank up to 20, then log-spaced
CURVE_FLOOR = 1e-12  # the log chart draws no probability below this (nor 0)


@dataclass
class Desk:
    """The model the desk runs, what it was called, an optional draft model, the held-out
    passage of the bits widget, the one quantized copy kept for that widget, the most work
    a request may ask for (token positions x parameters), and the serving engine's loop of
    the generating widgets (batched.py; made at its first use)."""

    model: object
    name: str
    draft: object = None
    passage: str = ""
    chat: bool = False
    squeezed: dict = field(default_factory=dict)  # {bits: (model, stored bytes)}, one at most
    lock: threading.Lock = field(default_factory=threading.Lock)
    max_work: int = MAX_WORK
    loop: object = None
    template_refused: str | None = None  # why the model's chat template is not used, if so
    constraints: dict = field(default_factory=dict)  # the mask widget's last few, masks.py
    constraints_lock: threading.Lock = field(default_factory=threading.Lock)


def make_desk(model, name, draft=None, passage="") -> Desk:
    if model.tokenizer is None:
        raise ValueError(f"{name}: the desk needs a model that carries its tokenizer")
    chat, refused = model.tokenizer.chat_template is not None, None
    if chat:
        from ..text.chat_template import chat_prompt_ids

        try:  # a template minillm cannot render: the desk reads prompts as plain text
            chat_prompt_ids(model.tokenizer, [{"role": "user", "content": "hi"}])
        except ValueError as e:
            chat, refused = False, str(e)
    return Desk(model, name, draft, passage, chat, template_refused=refused)


# -- shared pieces ----------------------------------------------------------------------------

def prompt_ids(desk: Desk, text: str, drawn=(), new_tokens: int = 0) -> list[int]:
    """The prompt's ids (a chat model's prompt through its chat template), then `drawn`; the
    whole must leave room for `new_tokens` in one window."""
    if not text.strip():
        raise RequestError("prompt: empty; type a beginning")
    tokenizer = desk.model.tokenizer
    if desk.chat:
        from ..text.chat_template import chat_prompt_ids

        ids = chat_prompt_ids(tokenizer, [{"role": "user", "content": text}])
    else:
        ids = tokenizer.encode(text, add_special_tokens=True)  # BOS if the file asks
    ids = list(ids) + list(drawn)
    V, W = desk.model.config.vocab_size, desk.model.config.context_length
    bad = [t for t in drawn if not 0 <= t < V]
    if bad:
        raise RequestError(f"drawn: token id {bad[0]} is outside the vocabulary [0, {V})")
    if len(ids) + new_tokens > W:
        raise RequestError(f"prompt: {len(ids)} tokens and {new_tokens} new ones exceed the "
                           f"context of {W} tokens; shorten it")
    return ids


def shown(desk: Desk, tokens) -> str:
    """The text of new tokens as the page shows it: special tokens (an end of turn such as
    <|im_end|>) left out."""
    return desk.model.tokenizer.decode(tokens, skip_special_tokens=True)


def parameters(model) -> int:
    """The model's parameters (a quantized matrix counts its values, not its scales)."""
    return sum(math.prod(w.shape) for w in model.params.values())


def charge(desk: Desk, positions: int, what: str, draft_positions: int = 0) -> None:
    """Refuse a request whose forward passes would compute more than the desk's bound:
    `positions` token positions of the model (and `draft_positions` of the draft model), each
    costing about two multiply-adds per parameter. `what` says what to ask for instead."""
    params = parameters(desk.model)
    work = positions * params
    if draft_positions:
        work += draft_positions * parameters(desk.draft)
    if work > desk.max_work:
        raise RequestError(
            f"work: this request computes {positions:,} token positions of a model of "
            f"{params:,} parameters ({work:.2g} parameter-positions), over the desk's bound "
            f"of {desk.max_work:.2g} (about {desk.max_work // params:,} positions of this "
            f"model); {what}", 422)


def piece(desk: Desk, token: int) -> str:
    tokenizer = desk.model.tokenizer
    return tokenizer.decode([token]) if token < len(tokenizer) else f"<{token}>"


def pieces(desk: Desk, tokens) -> list[dict]:
    return [{"id": int(t), "text": piece(desk, t)} for t in tokens]


def stops(desk: Desk) -> list[int]:
    return list(desk.model.tokenizer.eos_token_ids)


PENALTIES = ("repetition_penalty", "frequency_penalty", "presence_penalty")


def knobs(request, names=("temperature", "top_k", "top_p", "min_p", *PENALTIES)) -> dict:
    return {name: request[name] for name in names}


def curve_ranks(V: int) -> np.ndarray:
    """1-based ranks for a log-scale chart: every rank up to 20, then log-spaced up to V."""
    spaced = np.geomspace(1, V, CURVE_POINTS).round().astype(int)
    return np.unique(np.concatenate([np.arange(1, min(20, V) + 1), spaced]))


def last_logits(model, ids) -> np.ndarray:
    return model.forward(np.array([ids]), last=1)[0, -1].astype(np.float64)  # (V,)


# -- the widgets ------------------------------------------------------------------------------

def next_token(desk: Desk, request) -> dict:
    """The sampling desk: the next-token distribution before and after the knobs."""
    ids = prompt_ids(desk, request["prompt"], request["drawn"])
    charge(desk, len(ids), "shorten the prompt")
    logits = last_logits(desk.model, ids)
    model_p = filtered_probs(logits)  # the model's own distribution, T = 1, no knob
    scaled = filtered_probs(logits, **knobs(request, ("temperature", *PENALTIES)),
                            history=[ids])  # before the cuts
    kept = filtered_probs(logits, **knobs(request), history=[ids])  # what a draw uses
    V = logits.size
    order = np.argsort(-model_p, kind="stable")
    top = order[:request["top"]]
    rest = order[request["top"]:]
    by_rank = np.sort(scaled)[::-1]
    above = int((by_rank >= CURVE_FLOOR).sum())  # the log chart's curve ends at this rank
    ranks = np.union1d(curve_ranks(V), [above])
    h, h_kept = entropy(model_p), entropy(kept)
    return {
        "prompt_tokens": len(ids),
        "drawn_text": desk.model.tokenizer.decode(request["drawn"]),
        "top": [{"id": int(t), "text": piece(desk, t), "p": float(model_p[t]),
                 "kept": float(kept[t])} for t in top],
        "rest": {"count": int(rest.size), "p": float(model_p[rest].sum()),
                 "kept": float(kept[rest].sum())},
        "survivors": int((kept > 0).sum()),
        "vocabulary": V,
        "entropy": h, "effective": math.exp(h),
        "entropy_kept": h_kept, "effective_kept": math.exp(h_kept),
        "curve": {"rank": ranks.tolist(), "p": by_rank[ranks - 1].tolist(),
                  "total": np.cumsum(by_rank)[ranks - 1].tolist(),
                  "floor": CURVE_FLOOR, "above": above},
    }


def draw(desk: Desk, request) -> dict:
    """The sampling desk's button: one token drawn with the knobs and the seed."""
    ids = prompt_ids(desk, request["prompt"], request["drawn"])
    if len(ids) >= desk.model.config.context_length:
        raise RequestError("drawn: the text fills the context window; start again")
    charge(desk, len(ids), "shorten the prompt")
    logits = last_logits(desk.model, ids)
    rng = np.random.default_rng(request["seed"])
    token = int(sample_next_token(logits, **knobs(request), history=[ids], rng=rng))
    p = filtered_probs(logits, **knobs(request), history=[ids])[token]
    return {"id": token, "text": piece(desk, token), "p": float(p),
            "end": token in stops(desk)}


def temperatures(desk: Desk, request, abandoned=never) -> dict:
    """Four temperatures, one seed: each column's text and its surprise read back at T = 1."""
    n = request["max_new_tokens"]
    ids = prompt_ids(desk, request["prompt"], new_tokens=n)
    T = request["temperatures"]
    charge(desk, len(T) * (len(ids) + n - 1), "ask for fewer tokens or a shorter prompt")
    texts = [dict(max_new_tokens=n, temperature=T, seed=request["seed"], stop_tokens=stops(desk))
             for T in request["temperatures"]]
    columns = []
    for T, rollout in zip(request["temperatures"], rollouts(desk, ids, texts, abandoned)):
        new = rollout.new_tokens
        columns.append({"temperature": T, "tokens": pieces(desk, new),
                        "text": shown(desk, new),
                        "surprise": -float(np.mean(rollout.raw_logprobs)) if new else 0.0})
    return {"columns": columns}


def repetition(desk: Desk, request, abandoned=never) -> dict:
    """Greedy text with its repeated phrases marked, beside the same under the penalties."""
    n = request["max_new_tokens"]
    ids = prompt_ids(desk, request["prompt"], new_tokens=n)
    charge(desk, 2 * (len(ids) + n - 1), "ask for fewer tokens or a shorter prompt")
    keys = ("greedy", "penalised")
    texts = [dict(max_new_tokens=n, temperature=0.0, **penalties, stop_tokens=stops(desk))
             for penalties in ({}, knobs(request, PENALTIES))]
    out = {}
    for key, rollout in zip(keys, rollouts(desk, ids, texts, abandoned)):
        text = rollout.tokens
        marks = repeats(text, len(ids), REPEAT_N)
        out[key] = {"tokens": [dict(t, repeat=m) for t, m in
                               zip(pieces(desk, text[len(ids):]), marks)],
                    "repeats": int(sum(marks))}
    out["n"] = REPEAT_N
    return out


def race(desk: Desk, request) -> dict:
    """The same continuation with and without the KV cache: tokens, passes, seconds."""
    n = request["max_new_tokens"]
    ids = prompt_ids(desk, request["prompt"], new_tokens=n)
    P = len(ids)
    # The passes of the formulas below, for n new tokens: the uncached side grows as n * P.
    cached, uncached = P + n - 1, n * P + n * (n - 1) // 2
    fits = [m for m in range(1, n + 1)
            if (P + m - 1 + m * P + m * (m - 1) // 2) * parameters(desk.model) <= desk.max_work]
    charge(desk, cached + uncached, f"with this prompt at most {fits[-1]} new tokens"
           if fits else "shorten the prompt")
    runs = {}
    for key, use_cache in (("cached", True), ("uncached", False)):
        watched = Watched(desk.model)
        start = time.perf_counter()
        text = generate(watched, ids, max_new_tokens=n, temperature=request["temperature"],
                        seed=request["seed"], stop_tokens=stops(desk), use_cache=use_cache)
        runs[key] = {"tokens": pieces(desk, text[len(ids):]), "passes": watched.passes,
                     "seconds": time.perf_counter() - start}
    m = len(runs["cached"]["tokens"])
    same = [t["id"] for t in runs["cached"]["tokens"]] == [t["id"] for t in
                                                          runs["uncached"]["tokens"]]
    # Each step reads what the cache lacks: the prompt once, then each new token but the last
    # (nothing needs its logits). Without the cache a step reads the whole text so far.
    return {**runs, "identical": same, "P": P, "n": m,
            "formula": {"cached": P + m - 1, "uncached": m * P + m * (m - 1) // 2}}


def bits(desk: Desk, request) -> dict:
    """Every weight matrix re-rounded to `bits` (one scale per row): greedy text, surprise on
    the held-out passage, the weights' bytes stored (packed) and held here (one per byte)."""
    n, width = request["max_new_tokens"], request["bits"]
    ids = prompt_ids(desk, request["prompt"], new_tokens=n)
    passage = desk.model.tokenizer.encode(desk.passage)[:desk.model.config.context_length]
    charge(desk, len(ids) + n - 1 + len(passage) - 1, "ask for fewer tokens or a shorter "
           "prompt")
    model, stored = squeezed(desk, width)
    text = generate(model, ids, max_new_tokens=n, temperature=0.0, stop_tokens=stops(desk))
    return {"bits": width, "tokens": pieces(desk, text[len(ids):]),
            "text": shown(desk, text[len(ids):]),
            "surprise": surprise(model, passage), "passage_tokens": len(passage),
            "bytes": stored["total"], "stored": stored, "resident": int(model.nbytes)}


def squeezed(desk: Desk, width: int):
    """(the model with every matrix, embedding and output layer too, at `width` bits; its
    stored bytes, packing.stored_bytes); 32 is the float model. One copy is kept: the page asks
    for the widths one after another."""
    if width == 32:
        return desk.model, stored_bytes(desk.model)
    with desk.lock:
        if width not in desk.squeezed:
            desk.squeezed.clear()  # free the previous copy first: a real model's is large
            model = quantize(desk.model, skip=(), bits=width, embeddings=True)
            desk.squeezed[width] = (model, stored_bytes(model))
        return desk.squeezed[width]


def speculative(desk: Desk, request) -> dict:
    """Speculative decoding round by round, with the model drafter or prompt lookup."""
    from ..drafters import ModelDrafter, NgramDrafter
    from ..sampling import SamplingConfig

    n = request["max_new_tokens"]
    ids = prompt_ids(desk, request["prompt"], new_tokens=n)
    if request["drafter"] == "model" and desk.draft is None:
        raise RequestError("drafter: no draft model was loaded with this model; use "
                           "'ngram' (prompt lookup), or start the desk with --draft_model")
    # At most n rounds, each reading k guesses and one more token (the rest is rolled back).
    most = len(ids) + n * (request["k"] + 1)
    charge(desk, most, "ask for fewer tokens, a smaller k or a shorter prompt",
           draft_positions=most if request["drafter"] == "model" else 0)
    if request["drafter"] == "model":
        inner = ModelDrafter(desk.draft, SamplingConfig(temperature=request["temperature"]))
    else:
        inner = NgramDrafter(desk.model.config.vocab_size)
    drafter = Recorded(inner)
    start = time.perf_counter()
    out, stats = speculative_generate(desk.model, drafter, ids, max_new_tokens=n, k=request["k"],
                                      temperature=request["temperature"],
                                      seed=request["seed"], stop_tokens=stops(desk))
    seconds = time.perf_counter() - start
    played = rounds(drafter.proposals, out)
    for r in played:
        for token in r["guesses"] + r["extra"]:
            token["text"] = piece(desk, token["id"])
    new = len(out) - len(ids)  # plain decoding: one pass of the model per new token
    return {"rounds": played, "tokens": pieces(desk, out[len(ids):]),
            "proposed": sum(len(r["guesses"]) for r in played),
            "accepted": sum(r["accepted"] for r in played),
            "acceptance_rate": stats.acceptance_rate, "target_calls": stats.target_calls,
            "draft_calls": stats.draft_calls, "new_tokens": new,
            "saved": new - stats.target_calls, "seconds": seconds}


def serving(desk: Desk, request) -> dict:
    """A few requests through minillm.serving.Engine, step by step: after every step, each
    request's state, positions computed and block table, each block's holders, the tokens
    drawn, the requests preempted, and the engine's stats (steps.py reads them)."""
    from ..serving import Engine

    n, bs, pool = request["max_new_tokens"], request["block_size"], request["num_blocks"]
    prompts = []
    for i, text in enumerate(request["prompts"]):
        try:
            ids = prompt_ids(desk, text, new_tokens=n)
        except RequestError as e:
            message = str(e).removeprefix("prompt: ")
            raise RequestError(f"prompts[{i}]: {message}") from None
        need = -(-(len(ids) + n) // bs)
        if need > pool:
            raise RequestError(f"num_blocks: prompt {i + 1} needs {need} blocks of {bs} "
                               f"positions ({len(ids)} prompt tokens and {n} new ones), more "
                               f"than the pool's {pool}; give a larger pool or larger blocks")
        prompts.append(ids)
    # Without preemptions each request computes its prompt and every new token but the last;
    # a preemption computes a text again, so the steps also stop before the bound is passed.
    charge(desk, sum(len(ids) + n - 1 for ids in prompts),
           "ask for fewer or shorter prompts, or fewer tokens")
    counted = Counted(desk.model)
    engine = Engine(counted, block_size=bs, num_blocks=pool,
                    max_batch_tokens=request["max_batch_tokens"],
                    prefix_caching=request["prefix_caching"])
    for i, ids in enumerate(prompts):
        engine.add_request(ids, max_new_tokens=n, temperature=request["temperature"],
                           seed=request["seed"] + i, stop_tokens=stops(desk))
    shots, stopped = run_steps(engine, MAX_STEPS, desk.max_work // parameters(desk.model))
    for shot in shots:
        for out in shot["outputs"]:
            out["text"] = piece(desk, out["id"])
        for row in shot["requests"]:
            row["text"] = shown(desk, row["new"])
    return {"block_size": bs, "num_blocks": pool,
            "max_batch_tokens": request["max_batch_tokens"],
            "prefix_caching": request["prefix_caching"],
            "requests": [{"id": i, "prompt_tokens": len(ids), "prompt": text}
                         for i, (ids, text) in enumerate(zip(prompts, request["prompts"]))],
            "steps": shots, "stopped": stopped, "positions": counted.positions}


def mask(desk: Desk, request) -> dict:
    """Constrained decoding token by token: generate's text under the constraint typed, and
    at each step the automaton's state, the allowed set and the distribution before and after
    the mask (masks.py reads them)."""
    n = request["max_new_tokens"]
    ids = prompt_ids(desk, request["prompt"], new_tokens=n)
    spec = DEFAULTS[request["kind"]] if request["spec"] is None else request["spec"]
    charge(desk, len(ids) + n - 1, "ask for fewer tokens or a shorter prompt")
    constraint = constraint_of(desk, request["kind"], spec)
    watched = Watched(desk.model)  # keeps the logits generate reads before each token
    out = generate(watched, ids, max_new_tokens=n, temperature=request["temperature"],
                   seed=request["seed"], stop_tokens=stops(desk), constraint=constraint)
    new = out[len(ids):]
    rows = watched.rows[len(watched.rows) - len(new):]  # the prompt may be read in chunks
    steps = read_steps(constraint, rows, new, knobs(request, ("temperature",)),
                       request["top"], lambda t: piece(desk, t))
    automaton = constraint.automaton
    last = steps[-1]["after"] if steps else 0
    return {"kind": request["kind"], "spec": spec, "prompt_tokens": len(ids),
            "vocabulary": desk.model.config.vocab_size,
            "states": int(automaton.accepting.size),
            "accepting": np.flatnonzero(automaton.accepting).tolist(),
            "rows_built": len(constraint.index.rows), "steps": steps,
            "tokens": pieces(desk, new), "text": shown(desk, new),
            "done": last == DONE, "whole": last == DONE or bool(automaton.accepting[last])}


def info(desk: Desk) -> dict:
    cfg = desk.model.config
    params = parameters(desk.model)
    return {"model": desk.name, "arch": cfg.arch, "vocabulary": cfg.vocab_size,
            "context": cfg.context_length, "layers": cfg.n_layers, "chat": desk.chat,
            "template_refused": desk.template_refused,
            "draft": desk.draft is not None,
            "beginnings": CHAT_BEGINNINGS if desk.chat else BEGINNINGS,
            "passage": desk.passage, "max_new_tokens": MAX_NEW_TOKENS,
            "max_prompt_chars": MAX_PROMPT_CHARS, "parameters": params,
            "max_work": desk.max_work, "max_positions": desk.max_work // params,
            "serving": {"max_requests": MAX_REQUESTS, "max_new_tokens": MAX_SERVING_TOKENS,
                        "max_steps": MAX_STEPS, "prompts": serving_prompts(),
                        "num_blocks": serving_pool(desk)},
            "mask": {"kinds": list(KINDS), "defaults": DEFAULTS,
                     "prompt": MASK_PROMPTS[desk.chat]}}


def serving_pool(desk: Desk) -> int:
    """The serving widget's pool for its default prompts on this model: 1.6 times the blocks
    of the longest (with its new tokens), so that they share it and someone is preempted; 18
    for the shipped model (a chat model's template makes every prompt longer)."""
    fields = ENDPOINTS["/api/serving"]
    n, bs = fields["max_new_tokens"].default, fields["block_size"].default
    longest = max(len(prompt_ids(desk, text)) for text in serving_prompts()) + n
    return min(int(fields["num_blocks"].high), math.ceil(1.6 * -(-longest // bs)))


# The widgets whose texts the serving engine writes (batched.py): they take `abandoned`. The
# others stay one computation on a worker thread each (server.py): next and draw read one
# forward pass; the race times generate with and without the cache (the engine has no
# uncached decoding), bits writes with a quantized copy (the engine serves one model),
# speculative counts speculative_generate's own passes and rounds, serving runs an engine
# of its own, with the widget's pool, step by step, and the mask reads the logits of every
# pass of its constrained generate.
BATCHED = {"/api/temperatures", "/api/repetition"}

ROUTES = {"/api/next": next_token, "/api/draw": draw, "/api/temperatures": temperatures,
          "/api/repetition": repetition, "/api/race": race, "/api/bits": bits,
          "/api/speculative": speculative, "/api/serving": serving, "/api/mask": mask}
