"""The window: what the model sees of a text longer than its context, and how a cache follows.

The model sees at most W = context_length tokens. When a text fills the window and one more
token arrives, it keeps only its newest W // 2 tokens (at least one) and reads them again from
scratch, positions restarting at 0: one extra prefill every W / 2 tokens, and positions never
leave the range the model was trained on. The uncached path runs the model over exactly the
same view of the text, so cached and uncached generation agree at every length.

    view        = text[start:]                      what the model sees
    slide       : start = len(text) - W // 2        when the view outgrows W
    sync(view)  : keep the cache's longest common prefix with the view, read only the rest
    read(text)  : READ_CHUNK tokens per forward pass, the same cache and logits as one pass

A slide therefore costs a prefill of the kept half, W // 2 tokens, whatever came before it.

Batches. Rows of different lengths are right-aligned in one (B, W) buffer and padded on the
left; the model masks the padding and counts each row's positions from its first real token.
Each row slides on its own schedule, exactly when it would slide if generated alone. When the
longest rows slide, every row moves left to make room (the padding shrinks), and only the
sliding rows are read again.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .inputs import check_pad

# A long text is read READ_CHUNK tokens per forward pass: the attention scores a pass holds are
# then at most READ_CHUNK x W per head, not T x W, and the result is that of one pass (the
# cache gives every chunk the keys and values of the chunks before it).
READ_CHUNK = 512


def kept_on_slide(W: int) -> int:
    """How many of its newest tokens a text keeps when it outgrows the window: half of it."""
    return max(1, W // 2)


def view_start(length: int, start: int, W: int, room: int = 0) -> int:
    """Where the view of a text of `length` tokens begins: at `start` while the view, plus
    `room` tokens still to come, fits the window; else the newest kept_on_slide(W) tokens."""
    if length - start + room <= W:
        return start
    return max(0, length - kept_on_slide(W))


@dataclass
class Window:
    """The text each row currently sees, right-aligned: row r is tokens[r, pad[r]:width]."""

    tokens: np.ndarray  # (B, W) token ids, -1 left of each row's text (and unused past width)
    pad: np.ndarray  # (B,) number of padding columns before each row's text
    width: int  # columns in use

    def row(self, r: int) -> list[int]:
        """Row r's visible text."""
        return self.tokens[r, self.pad[r]:self.width].tolist()


def first_window(prompts, W: int) -> Window:
    """Each prompt's last W tokens (a longer prompt is cut from the left), right-aligned."""
    B = len(prompts)
    width = min(W, max(map(len, prompts)))
    tokens = np.full((B, W), -1, dtype=np.int64)
    pad = np.zeros(B, dtype=np.int64)
    for r, prompt in enumerate(prompts):
        kept = prompt[-W:]
        pad[r] = width - len(kept)
        tokens[r, pad[r]:width] = kept
    return Window(tokens, pad, width)


def append(window: Window, token, W: int):
    """Add one token to every row; a row whose text already fills the window slides.

    A sliding row keeps the newest kept_on_slide(W) tokens of its text (the new one included).
    To make room, every row moves left by `shift` columns, the smallest move that frees a
    column for the new token and keeps every other row's text whole.
    Returns (shift, slid rows): (0, empty) when nothing had to move.
    """
    if window.width < W:
        window.tokens[:, window.width] = token
        window.width += 1
        return 0, np.empty(0, dtype=np.int64)
    keep = kept_on_slide(W)
    slid = np.flatnonzero(window.pad == 0)  # rows whose text fills all W columns
    padded = window.pad > 0  # the rows that do not slide
    width = max(keep, int((W + 1 - window.pad[padded]).max()) if padded.any() else 0)
    shift = W + 1 - width  # >= 1, because every non-sliding row has padding
    window.tokens[:, :W - shift] = window.tokens[:, shift:]  # NumPy copes with the overlap
    window.tokens[:, width - 1] = token
    window.pad[padded] -= shift
    window.pad[slid] = width - keep
    window.tokens[slid, :width - keep] = -1  # the sliding rows forget their older tokens
    window.width = width
    return shift, slid


def read_slid(model, window: Window, token, cache, shift: int, slid, progress=None):
    """The cached step after a slide (append returned shift > 0): (B, V) next logits.

    Every row's text moved left by `shift` columns: so do its keys and values, and its padding
    shrinks. The rows that did not slide read the new token as usual; the sliding rows read
    their kept tokens again from scratch, positions from 0, and their keys and values replace
    the old ones. When every row slid, the window is just their kept text: the cache reads it
    again from empty, one forward pass per chunk and none for the new token alone.
    progress: called as progress(tokens read, of how many) during that re-read (`read`).
    """
    kept = window.tokens[slid, window.pad[slid[0]]:window.width]  # (len(slid), keep)
    if len(slid) == len(token):
        cache.reset()
        return read(model, kept, cache, progress=progress)
    cache.shift(shift, check_pad(window.pad, len(token), window.width))
    logits = model.forward(token[:, None], cache)[:, -1]  # (B, V)
    fresh = model.new_cache(len(slid), capacity=kept.shape[1])
    logits[slid] = read(model, kept, fresh, progress=progress)
    cache.fill_rows(slid, fresh, start=window.width - kept.shape[1])
    return logits


def sync(model, cache, cached: list, view):
    """Bring the cache to `view` and return the next logits (1, V): keep the longest common
    prefix of the cached tokens and the view, forget the rest, read only what is left (at
    least the view's last token, whose logits come next). `cached` lists the tokens the cache
    holds, from its position 0; on return it is the view."""
    keep = min(common_prefix_length(cached, view), len(view) - 1)
    cache.truncate(keep)  # keep <= len(cached) == cache.length
    fresh = list(view[keep:])
    logits = read(model, np.array([fresh]), cache)
    cached[keep:] = fresh
    return logits


def common_prefix_length(a, b) -> int:
    """How many leading ids two sequences share."""
    n = min(len(a), len(b))
    if list(a[:n]) == list(b[:n]):  # the usual case, settled in one comparison
        return n
    return next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)


def read(model, tokens, cache, pad=None, progress=None):
    """(B, V) logits of the last position after reading tokens (B, T) into `cache`, READ_CHUNK
    tokens per forward pass. pad: (B,) left padding of each row, given to an empty cache with
    the first chunk; the cache keeps it for every chunk (it may be longer than the first).
    progress: None, or called as progress(tokens read, T) after each chunk."""
    # Room for the whole text at once, not chunk by chunk (one chunk's forward pass makes its
    # own room), never past the cache's capacity (which append enforces).
    if tokens.shape[1] > READ_CHUNK:
        cache.reserve(min(cache.capacity, cache.length + tokens.shape[1]))
    for start in range(0, tokens.shape[1], READ_CHUNK):
        logits = model.forward(tokens[:, start:start + READ_CHUNK], cache,
                               pad=pad if start == 0 else None, last=1)
        if progress is not None:
            progress(min(start + READ_CHUNK, tokens.shape[1]), tokens.shape[1])
    return logits[:, -1]
