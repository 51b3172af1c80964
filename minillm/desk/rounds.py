"""Speculative decoding round by round, read from outside: a drafter that records what it
proposed, and the fate of each guess read from the text that came out.

speculative_generate takes any drafter with propose(text, k, rng) -> (guesses, q) and a
`calls` counter; wrapping the real one changes nothing of the run. Each proposal continues
the text as it stood at the start of a round, so the next proposal (or the end) says where
the round's tokens stop.
"""
from __future__ import annotations


class Recorded:
    """A drafter (propose(text, k, rng) -> (guesses, q), `calls`) that keeps every proposal:
    the length of the text it continued and its guesses."""

    def __init__(self, drafter):
        self.drafter, self.proposals = drafter, []

    @property
    def calls(self):
        return self.drafter.calls

    def propose(self, text, k, rng):
        guesses, q = self.drafter.propose(text, k, rng)
        self.proposals.append((len(text), [int(g) for g in guesses]))
        return guesses, q


def rounds(proposals, ids) -> list[dict]:
    """Each round's fate, read from its proposal and the text that came out: the guesses that
    match the new text were accepted, the first that does not was rejected (the rest were never
    checked), and the token after the accepted ones was resampled there, or is the bonus when
    every guess was kept. A rejected guess never equals its replacement: the residual
    max(0, p - q) is 0 at a guess the target rejected."""
    out = []
    ends = [length for length, _ in proposals[1:]] + [len(ids)]
    for (length, guesses), end in zip(proposals, ends):
        added = ids[length:end]
        kept = 0
        while kept < min(len(guesses), len(added)) and guesses[kept] == added[kept]:
            kept += 1
        fates = ["accepted"] * kept
        if kept < len(guesses):
            fates += ["rejected"] + ["unchecked"] * (len(guesses) - kept - 1)
        # The token after the kept guesses: a replacement, a bonus, or with no guess at all
        # (prompt lookup found nothing) the target's own next token.
        kind = "resampled" if kept < len(guesses) else "bonus" if guesses else "target"
        out.append({"guesses": [{"id": g, "fate": f} for g, f in zip(guesses, fates)],
                    "extra": [{"id": int(t), "kind": kind} for t in added[kept:kept + 1]],
                    "accepted": kept})
    return out
