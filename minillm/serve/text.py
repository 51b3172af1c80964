"""A choice's text as its tokens come: what may be sent now, and what waits.

Tokens are decoded through the tokenizer's streaming decoder, which never gives half a UTF-8
character; it reads the prompt first, so that a character split between the prompt and the
first new token comes out whole (stopping.start_text does the same for the engine). Special
tokens give no text, and neither does the end token that finishes a choice (OpenAI's servers
leave it out). With stop strings, the text is cut where the earliest one begins, and while
tokens still come, its end that could still grow into a stop string is held back: a stream
never sends text that a later token would take back.
"""
from __future__ import annotations

from ..stopping import find_stop, undecided_length


class ChoiceText:
    def __init__(self, tokenizer, prompt, stop_strings=(), end_tokens=()):
        self.decoder = tokenizer.stream_decoder(skip_special_tokens=True)
        self.known = len(tokenizer)  # ids from here on have no text
        self.prompt_text, self.prompt_offsets = "", []  # what echo shows, where each begins
        for token in prompt:
            self.prompt_offsets.append(len(self.prompt_text))
            if token < self.known:
                self.prompt_text += self.decoder.push(int(token))
        self.stops, self.ends = tuple(stop_strings), set(end_tokens)
        self.decoded = 0  # new characters decoded so far (where the next token's text begins)
        self.pending = ""  # decoded, not yet sent
        self.stopped = False  # a stop string was found: nothing more is sent

    def add(self, token: int | None, last: bool) -> str:
        """Read the next token (the choice's last when `last`); the text to send now."""
        text = ""
        if token is not None and token < self.known and token not in self.ends:
            text = self.decoder.push(int(token))
        if last:
            text += self.decoder.flush()
        self.decoded += len(text)
        if self.stopped:
            return ""
        self.pending += text
        cut = find_stop(self.pending, self.stops) if self.stops else None
        if cut is not None:
            self.stopped = True
            ready, self.pending = self.pending[:cut], ""
            return ready
        held = 0 if last or not self.stops else undecided_length(self.pending, self.stops)
        ready, self.pending = self.pending[:len(self.pending) - held], self.pending[
            len(self.pending) - held:]
        return ready


def token_text(tokenizer, token: int) -> tuple[str, list[int]]:
    """A token as OpenAI's logprobs show it: its text (bytes that are not whole UTF-8
    characters as U+FFFD) and its bytes."""
    try:
        data = tokenizer.token_bytes(token)
    except ValueError:  # an id of the model beyond its tokenizer's
        return f"<{token}>", []
    return data.decode("utf-8", errors="replace"), list(data)
