"""The checks servers' own test suites run (llama.cpp's server tests, vLLM's determinism and
prefix-caching tests), through the API, each a property that holds on any correct server:

    streaming        a streamed reply = the same request not streamed: text, tokens,
                     log-probabilities, finish reason
    stop             with stop strings, the text ends where the unstopped text first contains
                     one, the stop left out (OpenAI's rule; include_stop=True keeps it),
                     finish_reason "stop"; streamed and not
    n                a request of n choices: each choice = a single request with its seed,
                     where the server documents a seed rule (seed_rule="seed + i": minillm
                     serve), otherwise n distinct draws (two equal choices only as often as
                     the model's own probability of the text allows)
    token prompts    a prompt sent as token ids = the same prompt sent as text
    chat             /chat/completions = /completions on the chat template's rendering
                     (render(messages): the text or token ids the template gives)
    prefix caching   the same request after others that share its long prefix, among
                     concurrent ones that share it, and (budget=) a prompt longer than one
                     step's budget, sent again: what the first reply said

Each returns an APIReport (minillm.testing.api), `supported=False` with the reason where the
server refuses what a check needs, and raises AssertionError naming what differed, where, the
cases that ran and the call that replays it. Greedy (temperature 0) unless told otherwise.
"""
from __future__ import annotations

import numpy as np

from .adapters.openai import (APIError, Server, chat, complete, complete_together, counters,
                              request)
from .api_common import (PROMPTS, APIReport, compare_choices, fail, first_difference,
                         replay, unsupported)
from .stats import FALSE_ALARM

GREEDY = {"temperature": 0}
CONVERSATIONS = (
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You answer in one sentence."},
     {"role": "user", "content": "Why is the sky blue?"}],
    [{"role": "user", "content": "Count to three."}, {"role": "assistant", "content": "1, 2, 3."},
     {"role": "user", "content": "And on to five?"}])


def same_text(a, b, what: str) -> None:
    """Two choices' texts and finish reasons equal, or AssertionError at the first character
    that differs."""
    if a.text != b.text:
        i = first_difference(a.text, b.text)
        raise AssertionError(f"{what}: the texts differ from character {i} on: "
                             f"{a.text[i:i + 20]!r} vs {b.text[i:i + 20]!r} (whole: "
                             f"{a.text!r} vs {b.text!r})")
    if a.finish_reason != b.finish_reason:
        raise AssertionError(f"{what}: finish_reason {a.finish_reason!r} vs "
                             f"{b.finish_reason!r} (text {a.text!r})")


def same_choice(a, b, what: str, atol: float) -> tuple[float, str]:
    same_text(a, b, what)
    return compare_choices(a, b, what, atol)


def check_api_streaming(server: Server, prompts=PROMPTS, max_tokens: int = 16,
                        logprobs: int = 5, atol: float = 0.0, sampling: dict | None = None,
                        extra: dict | None = None) -> APIReport:
    """Each prompt asked whole, then streamed (stream: true): the joined chunks must give the
    same text, tokens, log-probabilities (within atol) and finish reason."""
    fields = dict(max_tokens=max_tokens, logprobs=logprobs, **(sampling or GREEDY),
                  **(extra or {}))
    worst, where = 0.0, ""
    for n, prompt in enumerate(prompts):
        try:
            whole = complete(server, prompt, **fields).choices[0]
            parts = complete(server, prompt, stream=True, **fields).choices
        except APIError as error:
            return unsupported("streaming", f"request refused: {error}")
        try:
            if not parts:
                raise AssertionError("the stream gave no choice")
            gap, at = same_choice(whole, parts[0], "whole vs streamed", atol)
        except AssertionError as error:
            fail(error, "streaming", n + 1, f"prompt {prompt!r}, {fields}",
                 replay("check_api_streaming", server, prompts=(prompt,), max_tokens=max_tokens,
                        logprobs=logprobs, atol=atol, sampling=sampling, extra=extra))
        if gap >= worst:
            worst, where = gap, f"prompt {prompt!r}, {at}" if at else ""
    return APIReport("streaming", True, len(prompts), worst, where)


def stop_cases(choice) -> list[tuple[str, ...]]:
    """Stop strings taken from a greedy text: one that crosses a boundary between two tokens
    (so a server must join tokens to find it), two where the one listed second comes first,
    one that never occurs."""
    text, cases = choice.text, []
    ends = np.cumsum([len(t) for t in choice.tokens]) if "".join(choice.tokens) == text else []
    inner = [int(e) for e in ends if 2 <= e <= len(text) - 2]
    if inner:
        b = inner[len(inner) // 2]
        cases.append((text[b - 2:b + 2],))
    m, q = (3 * len(text)) // 4, len(text) // 4
    cases.append((text[m:m + 3], text[q:q + 2]))
    cases.append(("\x00never",))
    return [c for c in cases if all(c)]


def stopped_text(text: str, stops, include_stop: bool) -> str | None:
    """The text a stop rule leaves: up to the earliest occurrence of any stop (the stop kept
    when include_stop), or None when none occurs."""
    found = [(text.find(s), -len(s), s) for s in stops if s in text]
    if not found:
        return None
    at, _, stop = min(found)
    return text[:at + (len(stop) if include_stop else 0)]


def check_api_stop(server: Server, prompts=PROMPTS, max_tokens: int = 24,
                   include_stop: bool = False, streams=(False, True),
                   extra: dict | None = None) -> APIReport:
    """For each prompt, its greedy text without stops; then stop strings taken from that text
    (one crossing a token boundary, two where the second listed comes first, one that never
    occurs), asked whole and streamed: the text must end where the unstopped text first
    contains a stop (the stop left out, or kept with include_stop), finish_reason "stop";
    with a stop that never occurs, the unstopped reply."""
    fields = dict(max_tokens=max_tokens, **GREEDY, **(extra or {}))
    cases, shortest = 0, None
    for prompt in prompts:
        try:
            base = complete(server, prompt, logprobs=1, **fields).choices[0]
        except APIError as error:
            return unsupported("stop", f"request refused: {error}")
        for stops in stop_cases(base):
            expected = stopped_text(base.text, stops, include_stop)
            for stream in streams:
                try:
                    got = complete(server, prompt, stop=list(stops), stream=stream,
                                   **fields).choices[0]
                except APIError as error:
                    return unsupported("stop", f"stop {list(stops)} refused: {error}")
                cases += 1
                want = base.finish_reason if expected is None else "stop"
                text = base.text if expected is None else expected
                if got.text != text or got.finish_reason != want:
                    rule = ("it never occurs, so the reply should be the unstopped one" if
                            expected is None else "the unstopped text first contains a stop "
                            f"there, the stop {'kept' if include_stop else 'left out'}")
                    raise AssertionError(
                        f"stop: with stop {list(stops)} ({'streamed' if stream else 'whole'}) "
                        f"the text is {got.text!r} (finish_reason {got.finish_reason!r}), "
                        f"not {text!r} ({want!r}): {rule} (unstopped: {base.text!r}) [case: "
                        f"prompt {prompt!r}; {cases} cases ran]\n"
                        + replay("check_api_stop", server, prompts=(prompt,),
                                 max_tokens=max_tokens, include_stop=include_stop,
                                 streams=(stream,), extra=extra))
            if expected is not None and (shortest is None or len(expected) < len(shortest[1])):
                shortest = (stops, expected)
    if not cases:
        return unsupported("stop", "no greedy text was long enough to take stops from")
    return APIReport("stop", True, cases, 0.0, f"e.g. stop {list(shortest[0])} -> "
                     f"{shortest[1]!r}" if shortest else "")


def check_api_n(server: Server, prompt: str = "Once upon a time, there was", n: int = 4,
                max_tokens: int = 8, seed: int = 1, seed_rule: str | None = None,
                atol: float = 0.0, extra: dict | None = None) -> APIReport:
    """One request of n choices at temperature 1 (no filter, so that every server's
    log-probabilities are the sampled distribution), seed `seed`. seed_rule "seed + i": choice
    i must equal a single request with seed + i (text, tokens, log-probabilities within atol).
    None: the choices must be distinct draws: two equal choices fail when the chance of the
    second repeating the first, p(text) by the reported log-probabilities, is under
    FALSE_ALARM / (pairs). A server that answers fewer choices than n is unsupported."""
    if seed_rule not in (None, "seed + i"):
        raise ValueError(f"seed_rule: None or 'seed + i', got {seed_rule!r}")
    fields = dict(max_tokens=max_tokens, temperature=1.0, top_p=1.0, logprobs=1,
                  **(extra or {}))
    line = replay("check_api_n", server, prompt=prompt, n=n, max_tokens=max_tokens, seed=seed,
                  seed_rule=seed_rule, atol=atol, extra=extra)
    try:
        choices = complete(server, prompt, n=n, seed=seed, **fields).choices
        if len(choices) != n:
            return unsupported("n", f"asked n={n}, the reply has {len(choices)} choice(s)")
        if seed_rule is not None:
            singles = [complete(server, prompt, seed=seed + i, **fields).choices[0]
                       for i in range(n)]
    except APIError as error:
        return unsupported("n", f"request refused: {error}")
    worst, where = 0.0, ""
    if seed_rule is not None:
        for i, (a, b) in enumerate(zip(choices, singles)):
            try:
                gap, at = same_choice(a, b, f"choice {i} of n={n} vs a single request with "
                                      f"seed {seed} + {i}", atol)
            except AssertionError as error:
                fail(error, "n", i + 1, f"prompt {prompt!r}, seed {seed}", line)
            if gap >= worst:
                worst, where = gap, f"choice {i}, {at}" if at else ""
        return APIReport("n", True, n, worst, where or f"each choice = its seed's single request")
    pairs = n * (n - 1) // 2
    for i in range(n):
        for j in range(i + 1, n):
            if choices[i].tokens != choices[j].tokens or choices[i].text != choices[j].text:
                continue
            if any(x is None for x in choices[i].logprobs) or not choices[i].tokens:
                return unsupported("n", "two choices are equal and the reply gives no "
                                        "log-probabilities to judge the coincidence by")
            chance = float(np.exp(sum(choices[i].logprobs)))
            if chance < FALSE_ALARM / pairs:
                raise AssertionError(
                    f"n: choices {i} and {j} of n={n} are the same text {choices[i].text!r}, "
                    f"a coincidence of probability {chance:.3g} by the reported "
                    f"log-probabilities (under {FALSE_ALARM} / {pairs} pairs): the choices are "
                    f"not distinct draws (one generator, or one seed, for all?) [case: prompt "
                    f"{prompt!r}, seed {seed}]\n{line}")
            worst, where = max(worst, chance), f"choices {i} and {j} equal, chance {chance:.3g}"
    return APIReport("n", True, n, worst, where or f"{n} distinct draws")


def server_tokenize(server: Server, text: str) -> list[int] | None:
    """The token ids the server reads a text prompt as, from its own tokenize endpoint
    (llama-cpp-python's /extras/tokenize, llama.cpp's and vLLM's /tokenize), or None."""
    root = server.url[:-len("/v1")] if server.url.endswith("/v1") else server.url
    for base, path, body in ((root, "/extras/tokenize", {"input": text, "model": server.model}),
                             (root, "/tokenize", {"content": text, "add_special": True,
                                                  "model": server.model, "prompt": text})):
        try:
            tokens = request(base, path, body, timeout=server.timeout,
                             api_key=server.api_key).get("tokens")
        except Exception:  # no such endpoint: the next
            continue
        if isinstance(tokens, list) and all(isinstance(t, int) for t in tokens):
            return tokens
    return None


def check_api_token_prompts(server: Server, prompts=PROMPTS, tokenize=None,
                            max_tokens: int = 16, logprobs: int = 5, atol: float = 0.0,
                            extra: dict | None = None) -> APIReport:
    """Each prompt sent as text and as token ids (tokenize(text): the ids the server reads the
    text as, its special tokens included; default: the server's own tokenize endpoint): the
    same text, tokens, log-probabilities (within atol) and the same prompt_tokens."""
    fields = dict(max_tokens=max_tokens, logprobs=logprobs, **GREEDY, **(extra or {}))
    worst, where = 0.0, ""
    for n, prompt in enumerate(prompts):
        ids = tokenize(prompt) if tokenize is not None else server_tokenize(server, prompt)
        if ids is None:
            return unsupported("token prompts", "no tokenize given, and the server has no "
                               "tokenize endpoint (/extras/tokenize, /tokenize)")
        ids = [int(t) for t in ids]
        try:
            as_text = complete(server, prompt, **fields)
            as_ids = complete(server, ids, **fields)
        except APIError as error:
            return unsupported("token prompts", f"request refused: {error}")
        try:
            if None not in (as_text.prompt_tokens, as_ids.prompt_tokens) and \
                    as_text.prompt_tokens != as_ids.prompt_tokens:
                raise AssertionError(f"the text counts {as_text.prompt_tokens} prompt tokens, "
                                     f"its {len(ids)} ids {as_ids.prompt_tokens} (does tokenize "
                                     "read the text as the server does? special tokens?)")
            gap, at = same_choice(as_text.choices[0], as_ids.choices[0],
                                  "text prompt vs its token ids", atol)
        except AssertionError as error:
            fail(error, "token prompts", n + 1, f"prompt {prompt!r} = ids {ids}",
                 replay("check_api_token_prompts", server, prompts=(prompt,),
                        max_tokens=max_tokens, logprobs=logprobs, atol=atol, extra=extra)
                 + "  # with tokenize= as given")
        if gap >= worst:
            worst, where = gap, f"prompt {prompt!r}, {at}" if at else ""
    return APIReport("token prompts", True, len(prompts), worst, where)


def check_api_chat(server: Server, render, conversations=CONVERSATIONS, max_tokens: int = 16,
                   logprobs: int = 5, atol: float = 0.0, extra: dict | None = None,
                   completion_extra: dict | None = None) -> APIReport:
    """Each conversation asked of /chat/completions, and its rendering by the chat template
    (render(messages): the text or token ids the template gives, the assistant's turn opened)
    asked of /completions (with completion_extra too: e.g. the stop the chat's end-of-turn
    needs there): the same text, tokens, log-probabilities (within atol) and finish reason."""
    fields = dict(max_tokens=max_tokens, logprobs=logprobs, **GREEDY, **(extra or {}))
    worst, where = 0.0, ""
    for n, messages in enumerate(conversations):
        prompt = render(messages)
        prompt = prompt if isinstance(prompt, str) else [int(t) for t in prompt]
        try:  # the completion first, so that on a server that keeps the last prompt's cache
            # (llama-cpp-python) both read it alike: what a cache changes is the prefix check's
            complete(server, prompt, **fields, **(completion_extra or {}))
            answer = chat(server, messages, **fields).choices[0]
            completed = complete(server, prompt, **fields, **(completion_extra or {})).choices[0]
        except APIError as error:
            return unsupported("chat", f"request refused: {error}")
        try:
            gap, at = same_choice(answer, completed, "chat vs completions on the template's "
                                  "rendering", atol)
        except AssertionError as error:
            fail(error, "chat", n + 1, f"messages {messages}",
                 replay("check_api_chat", server, conversations=(messages,),
                        max_tokens=max_tokens, logprobs=logprobs, atol=atol, extra=extra,
                        completion_extra=completion_extra) + "  # with render= as given")
        if gap >= worst:
            worst, where = gap, f"conversation {n}, {at}" if at else ""
    return APIReport("chat", True, len(conversations), worst, where)


def long_text(words: int, lead: str) -> str:
    """A deterministic text of about `words` words: `lead`, then numbered sentences of the
    prompts (each case its own lead, so that it shares no prefix with the one before)."""
    return lead + ": " + " ".join(f"{i}. {PROMPTS[i % len(PROMPTS)]}."
                                  for i in range(1 + words // 5))


def text_past(server: Server, budget: int, extra: dict) -> tuple[str, int | None]:
    """A long_text (lead "Story") of budget / 4 words doubled until the server counts more
    than budget + 8 prompt tokens (usage) for it under another lead (so that the text itself
    stays unread), and that count (None where the server gives none)."""
    words = max(4, budget // 4)
    for _ in range(8):
        counted = complete(server, long_text(words, "Count"), max_tokens=1, **GREEDY,
                           **extra).prompt_tokens
        if counted is None or counted > budget + 8:
            break
        words *= 2
    return long_text(words, "Story"), counted


def check_api_prefix_caching(server: Server, prefix_words: int = 40,
                             budget: int | None = None, max_tokens: int = 8,
                             logprobs: int = 5, atol: float = 0.0,
                             extra: dict | None = None) -> APIReport:
    """A request on a long prefix, first of its kind; then requests sharing the prefix (a
    prefix cache now holds it); then the first request again, right after itself (all of it
    cached but what must be recomputed), and among concurrent ones that share the prefix:
    each what the first reply said (text, tokens, log-probabilities within atol). budget: the
    tokens a step computes at most: a prompt longer than it (read in chunks, chunked prefill)
    asked cold, then the same three ways: the same.
    The report says how many prompt tokens the server's counters (minillm serve's
    /debug/stats) show reused, where it has them. The texts are fixed (a replay asks the same):
    a server that still caches them from an earlier run reads the first request from its cache
    too, and the check then compares cached with cached."""
    fields = dict(max_tokens=max_tokens, logprobs=logprobs, **GREEDY, **(extra or {}))
    prefix = long_text(prefix_words, "Notes")
    first, others = prefix + " " + PROMPTS[0], [prefix + " " + p for p in PROMPTS[1:]]
    cases = [("a request on a long prefix", first, others)]
    before = counters(server)
    if budget is not None:  # counted first, so that nothing in between shares the texts
        try:
            long, counted = text_past(server, budget, extra or {})
        except APIError as error:
            return unsupported("prefix caching", f"request refused: {error}")
        if counted is not None and counted <= budget + 8:
            return unsupported("prefix caching", f"no text of {counted} tokens or fewer passes "
                               f"the budget {budget}")
        cases.append((f"a prompt of {counted or 'more'} tokens (past the step budget "
                      f"{budget})", long, [long + " " + p for p in PROMPTS[:2]]))
    worst, where, count, line = 0.0, "", 0, replay(
        "check_api_prefix_caching", server, prefix_words=prefix_words, budget=budget,
        max_tokens=max_tokens, logprobs=logprobs, atol=atol, extra=extra)
    for what, prompt, sharing in cases:
        try:
            cold = complete(server, prompt, **fields)
            for other in sharing:
                complete(server, other, **fields)
            again = complete(server, prompt, **fields).choices[0]
            twice = complete(server, prompt, **fields).choices[0]
            crowd = complete_together(server, [(prompt, fields)] + [(p, fields)
                                                                    for p in sharing])[0]
        except APIError as error:
            return unsupported("prefix caching", f"request refused: {error}")
        for label, later in ((what + ", again after others sharing its prefix", again),
                             (what + ", right after itself", twice),
                             (what + ", among concurrent ones sharing it", crowd.choices[0])):
            count += 1
            try:
                gap, at = same_choice(cold.choices[0], later, f"cold vs {label}", atol)
            except AssertionError as error:
                fail(error, "prefix caching", count, f"{cold.prompt_tokens} prompt tokens",
                     line)
            if gap >= worst:
                worst, where = gap, f"{label}: {at}" if at else ""
    after = counters(server)
    reused = "the server's counters are not known" if before is None or after is None else (
        f"{after.get('prompt_tokens_reused', 0) - before.get('prompt_tokens_reused', 0)} "
        "prompt tokens reused by the server's count")
    return APIReport("prefix caching", True, count, worst,
                     f"{where}; {reused}" if where else reused)
