"""Streaming text: the pieces printed token by token are the text, never half a character.

A byte-level tokenizer spells a character of 2 to 4 UTF-8 bytes with tokens that may split
it. A streaming decoder must hold the bytes of an unfinished character back until it is
complete. For any ids (text split into single-byte tokens, mixed with any other ids),

    joined:   the pieces, joined, are decode(ids)
    prefix:   what is printed after k tokens is a prefix of decode(ids): no U+FFFD (or any
              text) printed for a character that later completes
    prompt:   it lags decode(ids[:k]) by at most one character (the unfinished one)

stream(ids) -> pieces: one string per token, optionally followed by what a final flush
returns; decode(ids) -> the whole text at once (invalid UTF-8 as U+FFFD).
"""
from __future__ import annotations

from hypothesis import strategies as st

from .settings import SHRINK_SECONDS, run_property


def assert_stream_matches(stream, decode, ids) -> None:
    """The module's three properties for one sequence of ids."""
    ids = [int(i) for i in ids]
    pieces = list(stream(ids))
    full = decode(ids)
    case = f"ids {ids}, pieces {pieces!r}, decode {full!r}"
    if len(pieces) not in (len(ids), len(ids) + 1):
        raise AssertionError(f"{len(pieces)} pieces for {len(ids)} tokens (one a token, then "
                             f"maybe a flush); {case}")
    if "".join(pieces) != full:
        raise AssertionError(f"the pieces joined are {''.join(pieces)!r}, not the decoded "
                             f"text; {case}")
    for k in range(1, len(ids) + 1):
        printed = "".join(pieces[:k])
        if not full.startswith(printed):
            raise AssertionError(f"after {k} tokens the stream printed {printed!r}, which the "
                                 f"text does not start with; {case}")
        if len(printed) < len(decode(ids[:k])) - 1:
            raise AssertionError(f"after {k} tokens the stream printed {printed!r}, more than "
                                 f"one character behind {decode(ids[:k])!r}; {case}")


@st.composite
def split_texts(draw, byte_ids, vocab_size: int):
    """Ids of texts rich in multi-byte characters, each byte its own token (so that tokens
    split characters), mixed with any ids of the vocabulary."""
    ascii_or_not = st.one_of(st.characters(max_codepoint=0x7F),
                             st.characters(min_codepoint=0x80, exclude_categories=["Cs"]))
    as_bytes = st.text(ascii_or_not, max_size=4).map(
        lambda text: [byte_ids[b] for b in text.encode("utf-8")])
    other = st.lists(st.integers(0, vocab_size - 1), max_size=3)
    segments = draw(st.lists(st.one_of(as_bytes, other), min_size=1, max_size=4))
    return [i for segment in segments for i in segment]


def check_stream_decoder(stream, decode, byte_ids, vocab_size: int, max_examples: int = 50, *,
                         shrink_seconds: float = SHRINK_SECONDS) -> int:
    """The module's properties on `max_examples` drawn id sequences (Hypothesis,
    derandomized). byte_ids[b]: the id of the token that spells the single byte b (256 ids;
    GPT-2-style byte-level BPE has them all, SentencePiece's byte fallback has <0xNN>).
    Returns how many sequences were checked; raises AssertionError with the smallest failing
    ids Hypothesis finds in shrink_seconds."""
    if len(byte_ids) != 256:
        raise ValueError(f"byte_ids: expected 256 ids, one per byte, got {len(byte_ids)}")
    seen = []
    run_property(split_texts(list(byte_ids), vocab_size),
                 lambda ids: seen.append(assert_stream_matches(stream, decode, ids)),
                 max_examples, shrink_seconds)
    return len(seen)
