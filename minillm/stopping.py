"""Stop strings: a row ends when its generated text contains one of them.

A stop string is text, not a token: "\\n\\n" may arrive as one token or as two, and a token may
end in the middle of a UTF-8 character. So each row's new tokens are decoded as they come,
through the tokenizer's streaming decoder (which holds back an incomplete character), and the
text is searched after every token, only where a match could newly end:

    text  += decode(token)
    stop  <=> some s in stop_strings occurs in text[len(old text) - len(s) + 1:]

The token that completes a stop string is the row's last; the text shown to a reader is cut
where the earliest stop string begins (`cut_at_stop`), and while generation runs, the end of
the text that could still grow into a stop string is held back (`undecided_length`).
Only the generated text is searched, never the prompt.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TextSoFar:
    """One row's generated text, decoded token by token."""

    decoder: object  # the tokenizer's StreamDecoder, already fed the prompt
    known: int  # ids from here on have no text (a model's spare ids beyond its tokenizer)
    text: str = ""


def start_text(tokenizer, prompt) -> TextSoFar:
    """The empty generated text after `prompt`: the decoder reads the prompt first, so that a
    character split between the prompt and the first new token decodes whole."""
    decoder = tokenizer.stream_decoder()
    known = len(tokenizer)
    for token in prompt:
        if token < known:
            decoder.push(int(token))
    return TextSoFar(decoder, known)


def reached_stop(row: TextSoFar, token: int, stop_strings) -> bool:
    """Add `token` to the row's text; True when the text now contains a stop string."""
    before = len(row.text)
    if token < row.known:
        row.text += row.decoder.push(int(token))
    return any(s in row.text[max(0, before - len(s) + 1):] for s in stop_strings)


def find_stop(text: str, stop_strings) -> int | None:
    """Where the earliest stop string in `text` begins, or None."""
    starts = [i for i in (text.find(s) for s in stop_strings) if i >= 0]
    return min(starts) if starts else None


def cut_at_stop(text: str, stop_strings) -> str:
    """The text before the earliest stop string (all of it when there is none)."""
    end = find_stop(text, stop_strings)
    return text if end is None else text[:end]


def undecided_length(text: str, stop_strings) -> int:
    """How many characters at the end of `text` may still be the start of a stop string: the
    longest end of the text that is a proper beginning of some stop string. A stream prints
    everything before them and waits for the next token to decide about the rest."""
    longest = 0
    for s in stop_strings:
        for n in range(min(len(s) - 1, len(text)), longest, -1):
            if text.endswith(s[:n]):
                longest = n
                break
    return longest
