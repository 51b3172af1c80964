"""Checks a server can answer through its API: what an OpenAI-compatible endpoint returns
(tokens as text, log-probabilities, top log-probabilities) instead of logits.

    determinism      the same greedy request twice: the same tokens, the same log-probabilities
    batch            a request alone, then the same request among `others` concurrent ones:
                     the same tokens, log-probabilities within `atol` (a server that batches
                     must not let the batch change a row)
    logprobs         a completion's log-probabilities against the prompt log-probabilities of
                     the same text sent back with `echo`: ln p(token | text before it) is one
                     number, however it is asked for
    sampler          next-token frequencies over `draws` seeded requests at a temperature and
                     top-p, against the distribution the server's own top log-probabilities
                     state, by Pearson's chi-square (false-alarm rate FALSE_ALARM)

The checks servers' own suites run (streaming, stop, n, token prompts, chat, prefix caching)
are in minillm.testing.api_suite, and answer here too (api.check_api_streaming, ...); the
report and the comparison they share in minillm.testing.api_common.

Each returns an APIReport. A check whose request the server refuses, or whose reply lacks what
the check needs (no log-probabilities, no echo), is `supported=False` with the reason: not a
pass. A difference raises AssertionError saying what differed, where, how many cases ran and
the largest difference, ending with the call that replays it.

Log-probabilities: servers differ in which distribution they report. minillm serve reports the
distribution each token was drawn from, every knob applied (at temperature 0 each is 0.0);
llama-cpp-python's server and vLLM report the model's own (temperature 1, no filter). The
sampler check takes `stated="filtered"` or `"raw"` (then top-p and the temperature are applied
to the listed tokens, the temperature last, as llama.cpp does).
"""
from __future__ import annotations

import numpy as np

from .adapters.openai import APIError, Server, complete, complete_together, counters
from .api_common import PROMPTS, APIReport, compare_choices, fail, replay, unsupported
from .api_suite import (CONVERSATIONS, check_api_chat, check_api_n, check_api_prefix_caching,
                        check_api_stop, check_api_streaming, check_api_token_prompts)
from .sampler import assert_draws_follow
from .stats import (FALSE_ALARM, power_by_noncentral_approximation,
                    smallest_detectable_tv)

def check_api_determinism(server: Server, prompts=PROMPTS, max_tokens: int = 16,
                          logprobs: int = 5, atol: float = 0.0, extra: dict | None = None
                          ) -> APIReport:
    """Each prompt sent twice, greedy (temperature 0), one after the other."""
    fields = dict(max_tokens=max_tokens, temperature=0, logprobs=logprobs, **(extra or {}))
    worst, where = 0.0, ""
    for n, prompt in enumerate(prompts):
        try:
            first, second = (complete(server, prompt, **fields).choices[0] for _ in range(2))
        except APIError as error:
            return unsupported("determinism", f"greedy request with logprobs refused: {error}")
        try:
            gap, at = compare_choices(first, second, "the same greedy request twice", atol)
        except AssertionError as error:
            fail(error, "determinism", n + 1, f"prompt {prompt!r}, {fields}",
                 replay("check_api_determinism", server, prompts=(prompt,),
                        max_tokens=max_tokens, logprobs=logprobs, atol=atol, extra=extra))
        if gap >= worst:
            worst, where = gap, f"prompt {prompt!r}, {at}" if at else ""
    return APIReport("determinism", True, len(prompts), worst, where)


def overlap_by_counters(before: dict, after: dict) -> tuple[bool, str]:
    """Whether a step computed two requests at once, from the server's counters before and
    after (minillm serve's steps and decode_tokens): more tokens drawn than steps run means
    some step drew for two requests."""
    steps = after.get("steps", 0) - before.get("steps", 0)
    drawn = after.get("decode_tokens", 0) - before.get("decode_tokens", 0)
    return drawn > steps, f"{drawn} tokens drawn in {steps} steps by the server's counters"


def overlap_by_times(replies) -> tuple[bool, str]:
    """Whether two replies were computed at once, from when their first and last tokens came
    (a whole reply: when it came): a server that runs one request at a time sends each
    request's tokens after the previous one's last, so no two intervals interleave."""
    spans = sorted((r.first, r.last) for r in replies if r.first is not None)
    latest = None
    for first, last in spans:
        if latest is not None and first < latest:
            return True, "the replies' tokens interleaved in time"
        latest = last if latest is None else max(latest, last)
    return False, "each reply's tokens came after the previous one's last"


def check_api_batch_invariance(server: Server, prompts=PROMPTS, others: int = 7,
                               max_tokens: int = 16, logprobs: int = 5, atol: float = 0.0,
                               sampling: dict | None = None, extra: dict | None = None
                               ) -> APIReport:
    """Each prompt alone, then at once with `others` requests of other prompts (of other
    lengths, so that a batching server mixes prefill and decode): the same tokens and
    log-probabilities within atol. sampling: the knobs of every request (default greedy;
    {"temperature": 1.0, "seed": 1} makes a server that reports the drawn distribution, as
    minillm serve does, report the model's own log-probabilities).

    Whether the requests overlapped on the server is found out, and a pass where none did says
    "not batched: nothing overlapped" (it showed nothing about batching): by the server's
    counters where it has them (minillm serve's /debug/stats: more tokens drawn than steps),
    else by streaming the others and reading when each reply's first and last tokens came."""
    knobs = dict(sampling or {"temperature": 0})
    fields = dict(max_tokens=max_tokens, logprobs=logprobs, **knobs, **(extra or {}))
    crowd = [(" ".join([p] * (1 + i % 3)), dict(fields, max_tokens=max_tokens + 1 + i))
             for i, p in enumerate((PROMPTS * others)[:others])]
    worst, where, overlaps, evidence = 0.0, "", 0, ""
    for n, prompt in enumerate(prompts):
        before = counters(server)
        streamed = [(p, dict(f, stream=True)) for p, f in crowd] if before is None else crowd
        try:
            alone = complete(server, prompt, **fields).choices[0]
            before = counters(server)
            replies = complete_together(server, [(prompt, fields)] + streamed)
            after = counters(server)
        except APIError as error:
            return unsupported("batch", f"request refused: {error}")
        together = replies[0].choices[0]
        seen, evidence = (overlap_by_counters(before, after) if None not in (before, after)
                          else overlap_by_times(replies))
        overlaps += seen
        try:
            gap, at = compare_choices(alone, together, f"alone vs among {others} concurrent "
                                      "requests", atol)
        except AssertionError as error:
            fail(error, "batch invariance", n + 1, f"prompt {prompt!r}, {fields}",
                 replay("check_api_batch_invariance", server, prompts=(prompt,), others=others,
                        max_tokens=max_tokens, logprobs=logprobs, atol=atol,
                        sampling=sampling, extra=extra))
        if gap >= worst:
            worst, where = gap, f"prompt {prompt!r}, {at}" if at else ""
    note = (f"not batched: nothing overlapped ({evidence})" if not overlaps else
            f"batched: {overlaps} of {len(prompts)} rounds overlapped ({evidence}, the last)")
    return APIReport("batch invariance", True, len(prompts), worst, where, note=note)


def shifted_hint(completion, echoed) -> str:
    """A hint when the echoed entries look moved one position on: the echoed top token at i
    is the completion's top token at i + 1."""
    tops = [max(t, key=t.get) if t else None for t in completion.top]
    etops = [max(t, key=t.get) if t else None for t in echoed]
    later = sum(1 for i in range(len(etops) - 1)
                if etops[i] is not None and etops[i] == tops[i + 1])
    if len(etops) > 1 and later >= (len(etops) - 1) / 2 and later > sum(
            1 for x, y in zip(etops, tops) if x is not None and x == y):
        return (f"; hint: the echoed top token at token i is the completion's at i + 1 "
                f"({later} of {len(etops) - 1}): the echo's log-probabilities look shifted one "
                "position (each scored by the distribution after it)")
    return ""


def check_api_logprobs(server: Server, prompts=PROMPTS, max_tokens: int = 8,
                       atol: float = 1e-4, seed: int = 1, extra: dict | None = None
                       ) -> APIReport:
    """A completion drawn at temperature 1 (no filter, so that every server reports the
    model's own log-probabilities), then prompt + its text sent back with echo: the echoed
    log-probabilities of the completion's tokens must equal the completion's within atol.
    A text that tokenizes otherwise when sent back is not compared (counted in `reason` when
    no case could be)."""
    fields = dict(temperature=1.0, top_p=1.0, seed=seed, logprobs=1, **(extra or {}))
    worst, where, cases, skipped = 0.0, "", 0, 0
    for prompt in prompts:
        try:
            got = complete(server, prompt, max_tokens=max_tokens, **fields).choices[0]
            back = complete(server, prompt + got.text, max_tokens=1, echo=True, **fields)
        except APIError as error:
            return unsupported("logprobs", f"echo with logprobs refused: {error}")
        echo, m = back.choices[0], len(got.tokens)
        if not echo.tokens or back.prompt_tokens is None:
            return unsupported("logprobs", "the echoed reply lists no prompt tokens")
        sent = echo.tokens[:back.prompt_tokens]
        if m == 0 or tuple(sent[-m:]) != got.tokens:
            skipped += 1
            continue
        cases += 1
        start = back.prompt_tokens - m
        for i in range(m):
            u, v = got.logprobs[i], echo.logprobs[start + i]
            if v is None:
                return unsupported("logprobs", "the echo gives no log-probability for "
                                   f"prompt token {start + i}")
            if abs(u - v) >= worst:
                worst, where = abs(u - v), (f"prompt {prompt!r}, token {i} ({got.tokens[i]!r}): "
                                            f"completion {u:.6g}, echo {v:.6g}")
        if worst > atol:
            hint = shifted_hint(got, echo.top[start:start + m])
            raise AssertionError(
                f"logprobs: a completion's log-probabilities and the echoed prompt's differ by "
                f"up to {worst:.3g} (atol {atol}) at {where}{hint} [{cases} cases ran]\n"
                + replay("check_api_logprobs", server, prompts=(prompt,), max_tokens=max_tokens,
                         atol=atol, seed=seed, extra=extra))
    if not cases:
        return unsupported("logprobs", f"no completion tokenized the same when sent back "
                           f"({skipped} tried)")
    return APIReport("logprobs", True, cases, worst, where)


def stated_distribution(top: dict, temperature: float, top_p: float, stated: str) -> dict:
    """{token: p} the server states for the next token: its top list as it is ("filtered"),
    or ("raw") the model's own top list cut by top-p (the token that crosses top_p kept) and
    then tempered over what is left: llama.cpp's order, the temperature last. A "raw" cut
    must fall inside the list, or ValueError."""
    tokens = sorted(top, key=top.get, reverse=True)
    logp = np.array([top[t] for t in tokens], dtype=np.float64)
    if stated == "filtered":
        return dict(zip(tokens, np.exp(logp)))
    if stated != "raw":
        raise ValueError(f"stated: 'filtered' or 'raw', got {stated!r}")
    cumulative = np.cumsum(np.exp(logp))
    if cumulative[-1] < top_p:
        raise ValueError(f"the {len(tokens)} listed tokens hold {cumulative[-1]:.3f} of the "
                         f"mass, and top_p {top_p} cuts past them: ask for more logprobs or a "
                         "smaller top_p")
    kept = int(np.searchsorted(cumulative, top_p) + 1)  # the token that crosses top_p stays
    tempered = logp[:kept] / temperature
    e = np.exp(tempered - tempered.max())
    return dict(zip(tokens[:kept], e / e.sum()))


SAMPLER_PROMPTS = PROMPTS + ("I like to eat", "My favourite colour is", "She opened the door and")


def temperature_power(p, draws: int, off: float = 1.25) -> float:
    """The chi-square test's power, over `draws` draws, against the same tokens drawn at a
    temperature `off` times too high or too low (p^(1/off) or p^off renormalized, whichever is
    caught less often): what a prompt's stated distribution lets the check see."""
    if (p * draws >= 5.0).sum() < 2:
        return 0.0  # one category (pooled ones too): nothing to tell apart
    power = 1.0
    for exponent in (1 / off, off):
        q = p ** exponent
        power = min(power, power_by_noncentral_approximation(p, q / q.sum(), draws))
    return power


def stated_probs(top: dict, temperature: float, top_p: float, stated: str):
    """(token names with "(any other token)" last, their probabilities) as the chi-square
    test takes them: the list leaves the rest of the mass to any other token (0 below 1e-6)."""
    probs = stated_distribution(top, temperature, top_p, stated)
    names = list(probs) + ["(any other token)"]
    p = np.array(list(probs.values()) + [max(0.0, 1.0 - sum(probs.values()))])
    p[-1] = 0.0 if p[-1] < 1e-6 else p[-1]
    return names, p / p.sum()


def other_convention(top, drawn, temperature, top_p, stated) -> str:
    """A hint when the draws that failed under `stated` follow the other convention."""
    other = "raw" if stated == "filtered" else "filtered"
    try:
        names, p = stated_probs(top, temperature, top_p, other)
        index = {t: i for i, t in enumerate(names[:-1])}
        assert_draws_follow(np.array([index.get(c.tokens[0] if c.tokens else None,
                                                len(names) - 1) for c in drawn]), p, names)
    except (AssertionError, ValueError):
        return ""
    what = ("the model's own, the knobs applied by the check" if other == "raw" else
            "the drawn distribution, every knob applied by the server")
    return (f"; hint: the same draws follow stated={other!r} ({what}): this server's "
            f"log-probabilities look like that convention's, try stated={other!r}")


def check_api_sampler(server: Server, prompt: str | None = None,
                      temperature: float = 0.8, top_p: float = 0.9, draws: int = 400,
                      seed: int = 0, stated: str = "filtered", logprobs: int = 20, n: int = 1,
                      power: float = 0.9, extra: dict | None = None) -> APIReport:
    """`draws` one-token requests with seeds seed, seed + 1, ...: the tokens drawn must follow
    the distribution stated by the server's top log-probabilities (one request, logprobs =
    `logprobs`), by a chi-square test at the false-alarm rate FALSE_ALARM (categories expected
    fewer than 5 times pooled; a token outside the list is its own category, of the mass the
    list leaves, 0 when the list holds it all: then any such draw fails). n: choices per
    request, for a server whose choice i of a request draws with seed + i (minillm serve); a
    server that ignores `n` answers fewer draws, which the report counts.

    The prompt (None: the first of SAMPLER_PROMPTS whose stated distribution gives the test
    `power` against a temperature 25% off, else the one of most power) and the test's power
    are in the report's note: a distribution of two tokens, one near 1, shows little. A failure
    whose draws follow the other convention (stated "raw" for "filtered", or back) says so."""
    fields = dict(max_tokens=1, temperature=temperature, top_p=top_p, **(extra or {}))
    try:
        best, why = None, ""
        for candidate in (SAMPLER_PROMPTS if prompt is None else (prompt,)):
            top = complete(server, candidate, logprobs=logprobs, seed=seed,
                           **fields).choices[0].top
            if not top or not top[0]:
                return unsupported("sampler", "the reply lists no top log-probabilities")
            try:
                names, p = stated_probs(top[0], temperature, top_p, stated)
            except ValueError as error:  # this prompt's list is too short: the next
                why = f"{error} (prompt {candidate!r})"
                continue
            seen = temperature_power(p, draws)
            if best is None or seen > best[0]:
                best = (seen, candidate, top[0], names, p)
            if seen >= power:
                break
        if best is None:
            return unsupported("sampler", why)
        seen, prompt, top, names, p = best
        drawn = [choice for i in range(0, draws, n) for choice in complete(
            server, prompt, logprobs=1, seed=seed + 1 + i, n=min(n, draws - i), **fields).choices]
    except APIError as error:
        return unsupported("sampler", f"request refused: {error}")
    except ValueError as error:
        return unsupported("sampler", str(error))
    index = {t: i for i, t in enumerate(names[:-1])}
    ids = np.array([index.get(c.tokens[0] if c.tokens else None, len(names) - 1) for c in drawn])
    try:
        result = assert_draws_follow(ids, p, names)
    except AssertionError as error:
        raise AssertionError(
            f"sampler at temperature {temperature}, top_p {top_p}, prompt {prompt!r}: {error} "
            f"[{len(ids)} draws]{other_convention(top, drawn, temperature, top_p, stated)}\n"
            + replay("check_api_sampler", server, prompt=prompt, temperature=temperature,
                     top_p=top_p, draws=draws, seed=seed, stated=stated, extra=extra)
        ) from None
    share = np.bincount(ids, minlength=len(p)) / len(ids)
    return APIReport("sampler", True, len(ids), float(np.abs(share - p).max()),
                     f"chi-square {result['statistic']:.1f} < {result['critical']:.1f} (df "
                     f"{result['df']}, false-alarm rate {FALSE_ALARM}), {len(names) - 1} tokens "
                     "stated",
                     note=f"prompt {prompt!r}: power {seen:.2f} against a temperature 25% off, "
                          f"a total-variation error of {smallest_detectable_tv(p, len(ids)):.2f}"
                          f" caught with power 0.9" + ("" if seen >= power else
                                                       f" (under the {power} asked)"))

