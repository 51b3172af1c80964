"""The JSON the server answers with, in OpenAI's shapes: completions, chat completions, their
stream chunks, usage, log-probabilities, the model list, and server-sent events."""
from __future__ import annotations

import json
import time
import uuid

from .text import token_text


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def now() -> int:
    return int(time.time())


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


def completion(rid, created, model, choices, kind="text_completion", use=None) -> dict:
    """A whole reply, or a chunk of a stream (kind "text_completion" for both, as OpenAI;
    "chat.completion" and "chat.completion.chunk" for the chat)."""
    reply = {"id": rid, "object": kind, "created": created, "model": model,
             "choices": choices}
    if use is not None:
        reply["usage"] = use
    return reply


def text_choice(index, text, logprobs=None, finish_reason=None) -> dict:
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}


def chat_choice(index, content, logprobs=None, finish_reason=None, call=None) -> dict:
    """A whole chat choice; with a tool call (tools.py), its content null unless text came
    before the call."""
    message = {"role": "assistant", "content": content}
    if call is not None:
        message["tool_calls"] = [call]
    return {"index": index, "message": message, "logprobs": logprobs,
            "finish_reason": finish_reason}


def chat_delta(index, delta, logprobs=None, finish_reason=None) -> dict:
    return {"index": index, "delta": delta, "logprobs": logprobs,
            "finish_reason": finish_reason}


# Log-probabilities. An entry is (token, logprob, top, offset): top a list of (token, logprob),
# offset the character where the token's text begins in the choice's text.

def text_logprobs(tokenizer, entries, top_asked: bool) -> dict:
    """/v1/completions' legacy shape: parallel lists."""
    def named(top):
        return {token_text(tokenizer, t)[0]: lp for t, lp in top}

    return {"tokens": [token_text(tokenizer, e[0])[0] for e in entries],
            "token_logprobs": [e[1] for e in entries],
            "top_logprobs": [named(e[2]) if e[1] is not None else None for e in entries]
            if top_asked else None,
            "text_offset": [e[3] for e in entries]}


def chat_logprobs(tokenizer, entries) -> dict:
    """/v1/chat/completions' shape: one object per token, with its bytes and its top list."""
    def item(token, logprob):
        text, data = token_text(tokenizer, token)
        return {"token": text, "logprob": logprob, "bytes": data}

    return {"content": [{**item(t, lp), "top_logprobs": [item(*x) for x in top]}
                        for t, lp, top, _ in entries], "refusal": None}


def model_card(name: str, created: int) -> dict:
    return {"id": name, "object": "model", "created": created, "owned_by": "minillm"}


def event(data) -> str:
    """One server-sent event: `data: JSON`, a blank line."""
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


DONE = "data: [DONE]\n\n"
