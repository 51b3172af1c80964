"""Prefix caching: full blocks keyed by the tokens they hold, shared by requests that start alike.

A full block's key is the key of the block before it and its own tokens:

    key_0 = H(tokens[0:bs])                  key_i = H(key_{i-1} + tokens[i bs:(i+1) bs])

(H: SHA-256), so equal keys mean equal texts from position 0 to the block's end (a collision
of SHA-256 aside), and the block's keys and
values (which depend on every token before them) are the same. A new request reuses the
longest run of cached blocks its prompt starts with: it points its table at them (their counts
go up, blocks.py) and computes only the rest. At least the prompt's last token is always
computed, since its logits give the first new token: a prompt whose every block is cached
reuses all of them but the last.

A cached block nobody holds is not freed at once: it waits, least recently used first, until a
block is needed and the free list is empty; only then is it evicted (its key forgotten) and
handed out again.
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np


@dataclass(eq=False)
class PrefixCache:
    """Block keys -> block ids, and the cached blocks nobody holds, oldest first."""

    blocks: dict = field(default_factory=dict)  # key -> block id
    keys: dict = field(default_factory=dict)  # block id -> key
    unused: OrderedDict = field(default_factory=OrderedDict)  # held by no request, LRU first

    def lookup(self, tokens, block_size: int) -> list[int]:
        """The cached blocks `tokens` start with, longest run, leaving at least its last token
        to compute."""
        found, key = [], None
        for start in range(0, len(tokens) - 1 - (len(tokens) - 1) % block_size, block_size):
            key = block_key(key, tokens[start:start + block_size])
            if key not in self.blocks:
                break
            found.append(self.blocks[key])
        return found

    def store(self, block: int, previous_key, tokens) -> object:
        """Remember that `block` holds `tokens` after the block keyed `previous_key`; returns its
        key. A block already cached under that key stays the one found."""
        key = block_key(previous_key, tokens)
        if key not in self.blocks:
            self.blocks[key] = block
            self.keys[block] = key
        return key

    def evict(self) -> int | None:
        """The least recently used cached block nobody holds, its key forgotten; None if none."""
        if not self.unused:
            return None
        block, _ = self.unused.popitem(last=False)
        del self.blocks[self.keys.pop(block)]
        return block


def block_key(previous_key: bytes | None, tokens) -> bytes:
    """A full block's key: SHA-256 of the key before it and its tokens (as 64-bit ids)."""
    return hashlib.sha256((previous_key or b"") + np.asarray(tokens, np.int64).tobytes()).digest()
