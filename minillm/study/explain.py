"""What a generated text says about its own making: every new token's surprise, its rank among
the candidates, and whether it repeats an earlier phrase.

    surprise_t = -ln softmax(z_t)[x_t]         (nats; the model's own logits z_t, T = 1)
    rank_t     = 1 + #{i : z_t,i > z_t,x_t}    (1 = the model's favourite; ties: lower id first)
    repeat_t   = the n tokens ending at x_t already occur, in that order, earlier in the text

A sampled token of surprise 0.1 nats was nearly certain; one of 5 nats had odds of about 1 in
150 (e^5). The logits z_t are the ones the token was drawn from: the generation runs through a
`Watched` model, which keeps the last row of every forward pass. Each step of minillm.generate
is one forward pass (prefill, a decode step, or the re-read after a window slide), so the k-th
kept row predicted the k-th new token; tests/test_desk_explain.py checks the surprises against
generate's own raw log-probabilities.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..layers import log_softmax

REPEAT_N = 4  # a four-token phrase: long enough that a repeat is rarely chance


@dataclass(frozen=True)
class TokenNote:
    """One new token: its id, -ln p at T = 1 (nats), its rank, whether it repeats an n-gram."""

    token: int
    surprise: float
    rank: int
    repeat: bool


class Watched:
    """A model that counts the token positions its forward passes read (`passes`) and keeps
    the last row of logits of every pass (`rows`). Everything else is the model's own."""

    def __init__(self, model):
        self.model, self.passes, self.rows = model, 0, []

    def __getattr__(self, name):
        return getattr(self.model, name)

    def forward(self, tokens, cache=None, **kwargs):
        logits = self.model.forward(tokens, cache, **kwargs)  # (B, T, V)
        self.passes += int(np.shape(tokens)[0] * np.shape(tokens)[1])
        self.rows.append(np.asarray(logits[0, -1], dtype=np.float64))
        return logits


def entropy(p: np.ndarray) -> float:
    """H = -sum_i p_i ln p_i in nats (0 ln 0 = 0): the expected surprise of a draw from p;
    e^H is the number of equally likely choices with the same uncertainty."""
    p = p[p > 0]
    return max(0.0, float(-(p * np.log(p)).sum()))  # never -0.0


def rank_of(z: np.ndarray, token: int) -> int:
    """1 + the number of candidates ranked above `token` by logit (ties: the lower id first,
    as greedy decoding breaks them)."""
    above = z > z[token]
    ties_before = (z[:token] == z[token]).sum()
    return int(above.sum() + ties_before + 1)


def repeats(tokens, start: int, n: int = REPEAT_N) -> list[bool]:
    """For each of tokens[start:]: whether the n tokens ending there occur earlier in `tokens`
    (ending at an earlier position; the prompt counts as earlier text)."""
    tokens = [int(t) for t in tokens]
    seen, marks = set(), []
    for i in range(n - 1, len(tokens)):
        phrase = tuple(tokens[i - n + 1:i + 1])
        if i >= start:
            marks.append(phrase in seen)
        seen.add(phrase)
    return [False] * (len(tokens) - start - len(marks)) + marks


def notes(rows, tokens, start: int, n: int = REPEAT_N) -> list[TokenNote]:
    """TokenNotes for tokens[start:], the k-th drawn from the logits rows[k] (V,)."""
    new = [int(t) for t in tokens[start:]]
    if len(rows) != len(new):
        raise ValueError(f"rows: {len(rows)} rows of logits for {len(new)} new tokens")
    marks = repeats(tokens, start, n)
    return [TokenNote(t, float(-log_softmax(z)[t]), rank_of(z, t), mark)
            for t, z, mark in zip(new, rows, marks)]


def explained_generate(model, prompt_ids, n: int = REPEAT_N, **generate_args):
    """minillm.generate for one prompt, plus a TokenNote per new token: (ids, notes).
    generate_args: max_new_tokens, the sampling knobs, seed, stop_tokens, use_cache, ..."""
    from ..generate import generate

    watched = Watched(model)
    ids = generate(watched, prompt_ids, **generate_args)
    start = len(prompt_ids)
    return ids, notes(watched.rows[:len(ids) - start], ids, start, n)


def surprise(model, token_ids) -> float:
    """Mean -ln p per token (nats) when the model reads the text at T = 1, each token predicted
    from all before it in one window; the first token is not predicted."""
    ids = np.asarray(token_ids, dtype=np.int64)
    if ids.ndim != 1 or not 2 <= ids.size <= model.config.context_length:
        raise ValueError(f"token_ids: need 2 to {model.config.context_length} tokens (one "
                         f"window), got {ids.size}")
    logp = log_softmax(model.forward(ids[None, :-1])[0])  # (T - 1, V)
    return float(-logp[np.arange(ids.size - 1), ids[1:]].mean())


@dataclass(frozen=True)
class Summary:
    tokens: int
    mean_surprise: float
    favourites: int  # tokens of rank 1
    median_rank: float
    repeats: int


def summarize(token_notes) -> Summary:
    if not token_notes:
        return Summary(0, 0.0, 0, 0.0, 0)
    return Summary(len(token_notes), float(np.mean([t.surprise for t in token_notes])),
                   sum(t.rank == 1 for t in token_notes),
                   float(np.median([t.rank for t in token_notes])),
                   sum(t.repeat for t in token_notes))


def summary_line(s: Summary, n: int = REPEAT_N) -> str:
    return (f"[{s.tokens} tokens: mean surprise {s.mean_surprise:.3f} nats/token; the "
            f"favourite {s.favourites} times, median rank {s.median_rank:g}; {s.repeats} "
            f"repeat an earlier {n}-token phrase]")


# -- drawing it in the terminal and in a picture ---------------------------------------------

BANDS = ((1.0, "32"), (3.0, "33"), (float("inf"), "31"))  # < 1 nat green, < 3 yellow, else red


def marked(text: str, note: TokenNote, colour: bool) -> str:
    """A token's text with its marks. Colour: the surprise band as the colour, repeats
    underlined, a dim ^rank after a token that was not the favourite. Plain:
    [text|surprise|rank|R] (R: repeats an earlier phrase)."""
    if not colour:
        return f"[{text}|{note.surprise:.2f}|{note.rank}{'|R' if note.repeat else ''}]"
    code = next(code for limit, code in BANDS if note.surprise < limit)
    style = code + (";4" if note.repeat else "")
    rank = f"\x1b[2m^{note.rank}\x1b[0m" if note.rank > 1 else ""
    return f"\x1b[{style}m{text}\x1b[0m{rank}"


def legend(colour: bool, n: int = REPEAT_N) -> str:
    if not colour:
        return (f"[text|surprise in nats|rank among the candidates|R if it repeats an earlier "
                f"{n}-token phrase]")
    return ("surprise: \x1b[32m< 1 nat\x1b[0m \x1b[33m< 3 nats\x1b[0m \x1b[31m>= 3 nats\x1b[0m; "
            f"^rank when not the favourite; \x1b[4munderlined\x1b[0m: repeats an earlier "
            f"{n}-token phrase")


def plot(token_notes, path, title: str = "") -> None:
    """Rank (log scale) and surprise per new token, one above the other, saved to `path`."""
    try:
        import matplotlib
    except ImportError:
        raise ImportError("--plot needs matplotlib: pip install matplotlib") from None
    matplotlib.use("Agg")  # files only: no window, no display needed
    import matplotlib.pyplot as plt

    steps = np.arange(1, len(token_notes) + 1)
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(9, 5))
    top.plot(steps, [t.rank for t in token_notes], ".-", lw=0.8)
    top.set_yscale("log")
    top.set_ylim(bottom=0.8)
    top.set_ylabel("rank (1 = favourite)")
    repeat = [i for i, t in enumerate(token_notes) if t.repeat]
    bottom.bar(steps, [t.surprise for t in token_notes], color="tab:orange", label="surprise")
    bottom.bar(steps[repeat], [token_notes[i].surprise for i in repeat], color="tab:red",
               label="repeats an earlier phrase")
    bottom.set_ylabel("surprise (nats)")
    bottom.set_xlabel("new token")
    bottom.legend(loc="upper right", fontsize="small")
    if title:
        top.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_explained(out, model, prompt_ids, colour: bool, plot_path=None, n: int = REPEAT_N,
                    **generate_args) -> Summary:
    """Generate, then write the prompt (its special tokens, such as <bos>, left out as plain
    output leaves them), every new token marked (see `marked`; a special one too: each drawn
    token is explained) and the summary line to `out`; with plot_path, draw the picture there
    too."""
    ids, token_notes = explained_generate(model, prompt_ids, n, **generate_args)
    tokenizer = model.tokenizer

    def text(tokens, skip_special_tokens=False):
        if tokenizer is None:
            return "".join(f"<{t}>" for t in tokens)
        return tokenizer.decode(list(tokens), skip_special_tokens=skip_special_tokens)

    out.write(text(prompt_ids, skip_special_tokens=True))
    out.write("".join(marked(text([t.token]), t, colour) for t in token_notes) + "\n")
    result = summarize(token_notes)
    out.write(summary_line(result, n) + "\n")
    if plot_path is not None:
        plot(token_notes, plot_path, title=f"{result.tokens} new tokens")
    return result
