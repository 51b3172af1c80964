"""The real model of the real-model workloads: SmolLM2-135M-Instruct, its files and prompts.

    minillm fetch smollm2-135m-instruct     # writes both files into the cache folder

The workloads read two files from minillm's cache folder ($MINILLM_CACHE, else
~/.cache/minillm): the converted `smollm2-135m-instruct.npz` (float32, what minillm, the
PyTorch loop and the parent's workloads load) and the original `SmolLM2-135M-Instruct.Q4_1.gguf`
(what transformers and llama.cpp load). When either is absent, every real-model table is one
"missing" row saying how to get them, and the rest of the suite runs as usual.

The prompts are chat requests rendered with the model's own template (system line, user turn,
then the assistant's turn opened), cut to an exact token count inside the user's text so that
the template's closing tokens stay at the end.
"""
from __future__ import annotations

import inspect
import os

import minillm

from .timing import Missing, Row

NAME = "smollm2-135m-instruct"
PARAGRAPH = (
    "The lighthouse at the end of the harbour wall was built in 1868 from granite quarried "
    "on the island itself. Its lamp burned paraffin until 1921, when an electric light with "
    "a rotating lens replaced it, and the keeper's cottage beside it became a small museum "
    "in 1987. On clear nights its beam reaches twenty-two nautical miles, far enough to be "
    "seen from the mainland ferry long before the harbour lights appear."
)
REQUEST = ("Summarise this paragraph from a guide book in two sentences, then list the dates it "
           "mentions and what happened at each one.\n\n" + PARAGRAPH + " " + PARAGRAPH)
QUOTE = "Repeat the following paragraph word for word.\n\n" + PARAGRAPH


def files():
    """(npz path, gguf path) in minillm's cache folder; they may not exist."""
    from minillm.cli.fetch import MODELS, cache_folder

    folder = cache_folder()
    return (str(folder / f"{NAME}.npz"),
            str(folder / MODELS[NAME].filename))


def absent():
    """Missing(how to get the files) when either file is absent, else None."""
    gone = [p for p in files() if not os.path.exists(p)]
    if not gone:
        return None
    return Missing(f"{', '.join(gone)} not found: `minillm fetch {NAME}` writes both "
                   f"(folder: $MINILLM_CACHE, else ~/.cache/minillm)")


def missing_rows(workload: str, unit: str):
    """A workload's whole table when the files are absent: one "missing" row saying how to get
    them. None when they are there."""
    gone = absent()
    if gone is None:
        return None
    return [Row(workload, "SmolLM2-135M-Instruct", "all", unit, missing=gone.reason)]


def model(ctx):
    """The float32 minillm model, loaded once per run and shared by the parent's workloads."""
    if "real f32" not in ctx:
        ctx["real f32"] = minillm.load(files()[0])
    return ctx["real f32"]


def has_embeddings_option() -> bool:
    """Does minillm.quantize take `embeddings=` (quantize the token embedding / tied head)?"""
    return "embeddings" in inspect.signature(minillm.quantize).parameters


def int8_kinds() -> dict:
    """{contender name: quantize's keyword arguments}: the default, and the embeddings too when
    minillm.quantize has that option."""
    kinds = {"minillm int8": {}}
    if has_embeddings_option():
        kinds["minillm int8 + emb"] = {"embeddings": True}
    return kinds


EMB_MISSING = "minillm.quantize has no `embeddings=` option yet"


def int8(ctx, name="minillm int8"):
    """A quantized copy of the float32 model (shared by the parent's workloads)."""
    key = ("real", name)
    if key not in ctx:
        ctx[key] = minillm.quantize(model(ctx), **int8_kinds()[name])
    return ctx[key]


def chat_ids(tokenizer, request: str, length: int | None = None) -> list:
    """The chat prompt of one user request; with `length`, cut inside the request to exactly
    that many tokens (the template's closing tokens kept at the end)."""
    from minillm.text.chat_template import chat_prompt_ids

    ids = chat_prompt_ids(tokenizer, [{"role": "user", "content": request}])
    if length is None:
        return ids
    # The closing tokens: the common end of two renderings with different requests.
    a = chat_prompt_ids(tokenizer, [{"role": "user", "content": "Alpha"}])
    b = chat_prompt_ids(tokenizer, [{"role": "user", "content": "Beta"}])
    tail = 0
    while tail < min(len(a), len(b)) and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    if len(ids) < length:
        raise ValueError(f"the request renders to {len(ids)} tokens, fewer than {length}")
    return ids[:length - tail] + ids[len(ids) - tail:]


def prompt(tokenizer, length: int = 128) -> list:
    """The decode prompt: the guide-book request, exactly `length` tokens."""
    return chat_ids(tokenizer, REQUEST, length)


def stop_tokens(tokenizer) -> list:
    return list(tokenizer.eos_token_ids)
