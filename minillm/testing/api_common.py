"""What the API checks share (minillm.testing.api, minillm.testing.api_suite): the prompts,
the report, the comparison of two choices of the same request, and the replay line."""
from __future__ import annotations

from dataclasses import dataclass

from .adapters.openai import Server

PROMPTS = ("In the beginning", "The capital of France is", "1, 2, 3, 4,",
           "Once upon a time, there was")


@dataclass(frozen=True)
class APIReport:
    """What an API check saw: whether the server supports it (`reason` if not), how many
    cases (requests compared) ran, the largest difference and where (`worst`). For the
    sampler: the draws, and the largest difference between a token's share of them and its
    stated probability (the chi-square statistic in `worst`)."""

    check: str
    supported: bool
    cases: int = 0
    max_diff: float = 0.0
    worst: str = ""
    reason: str = ""
    note: str = ""  # what the pass means: "not batched: nothing overlapped", the test's power

    def __str__(self) -> str:
        if not self.supported:
            return f"{self.check}: unsupported by this server ({self.reason})"
        return (f"{self.check}: {self.cases} cases, largest difference {self.max_diff:.3g}"
                + (f" ({self.worst})" if self.worst else "")
                + (f"; {self.note}" if self.note else ""))


def unsupported(check: str, reason: str) -> APIReport:
    return APIReport(check, False, reason=reason)


def replay(check: str, server: Server, **arguments) -> str:
    """The one line that replays a check's failure."""
    args = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
    return (f"replay: minillm.testing.api.{check}(minillm.testing.adapters.openai.connect("
            f"{server.url!r}, {server.model!r}){', ' if args else ''}{args})")


def first_difference(a, b) -> int:
    """The first index where two sequences differ (the shorter one's length if one is the
    other's beginning)."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def compare_choices(a, b, what: str, atol: float) -> tuple[float, str]:
    """Two choices of the same request: their tokens must be equal, and their log-probabilities
    and the top log-probabilities both list within atol. Returns the largest difference and
    where; raises AssertionError naming the first token that differs."""
    if a.tokens != b.tokens:
        i = first_difference(a.tokens, b.tokens)
        raise AssertionError(f"{what}: the tokens differ from token {i} on: "
                             f"{list(a.tokens[i:i + 4])} vs {list(b.tokens[i:i + 4])} (text "
                             f"{a.text!r} vs {b.text!r})")
    worst, where = 0.0, ""
    for i, (x, y, tx, ty) in enumerate(zip(a.logprobs, b.logprobs, a.top, b.top)):
        pairs = [(a.tokens[i], x, y)] + [(k, tx[k], ty[k]) for k in (tx or {}) if k in (ty or {})]
        for token, u, v in pairs:
            if u is None or v is None:
                continue
            if abs(u - v) > worst:
                worst, where = abs(u - v), f"token {i} ({token!r}): {u:.6g} vs {v:.6g}"
    if worst > atol:
        raise AssertionError(f"{what}: log-probabilities differ by up to {worst:.3g} (atol "
                             f"{atol}) at {where}")
    return worst, where


def fail(error: AssertionError, check: str, cases: int, case: str, line: str):
    raise AssertionError(f"{check}: {error} [case: {case}; {cases} cases ran]\n{line}") from None
