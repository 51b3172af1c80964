"""Who holds which block: the paged KV cache (PagedAttention, Kwon et al. 2023) and the prefix
cache, in one owner. Position p of a request's text lives in block table[p // block_size]:

    k[layer, table[p // block_size], p % block_size]     the keys of position p, (K, d)

so a request holds the blocks its text fills, whatever the context (all layers share a table).
Prefix caching: a full block's hash chains the hash before it with its tokens (64-bit ids),

    h_0 = SHA-256(tokens[0:bs])        h_i = SHA-256(h_{i-1} + tokens[i bs:(i+1) bs])

so equal hashes mean equal texts up to the block's end (a SHA-256 collision aside), hence equal
keys and values. A joining request points its table at the longest run of cached blocks its
text starts with. A cached block nobody holds waits, least recently used first, until the free
list is empty.
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict

import numpy as np


class BlockManager:
    """The pool's blocks and who holds them. Every block is in exactly one state:

        held      refs[b] > 0: exactly refs[b] request tables point at it
        free      on the free list, refs[b] == 0, no hash
        unheld    refs[b] == 0, cached under its hash, in the LRU (kept for its prefix)

    so held + free + unheld = num_blocks, and a waiting request holds no block. A full block
    whose twin was cached first keeps its hash (the next one chains on it) but is freed."""

    def __init__(self, k: np.ndarray, v: np.ndarray, prefix_caching: bool = True):
        self.k, self.v = k, v  # (n_layers, num_blocks, block_size, n_kv_heads, head_dim)
        self.num_blocks, self.block_size = k.shape[1], k.shape[2]
        self.prefix_caching = prefix_caching
        self.refs = [0] * self.num_blocks  # refs[b]: how many tables point at block b
        self.free = list(range(self.num_blocks))[::-1]  # the next one given out last
        self.hashes = [None] * self.num_blocks  # a full block's chained hash, else None
        self.cached = {}  # hash -> the block cached under it
        self.unheld = OrderedDict()  # cached blocks nobody holds, least recently used first

    def reuse_prefix(self, request) -> None:
        """Point a joining request's table at the longest run of cached blocks its text starts
        with, counted as computed; at least its last token (whose logits draw) is left."""
        if not self.prefix_caching or request.table or request.prompt_logprobs is not None:
            return  # (a prompt to score computes every position)
        bs, h = self.block_size, None
        for start in range(0, (len(request.text) - 1) // bs * bs, bs):
            h = block_hash(h, request.text[start:start + bs])
            block = self.cached.get(h)
            if block is None:
                break
            if self.refs[block] == 0:
                del self.unheld[block]
            self.refs[block] += 1
            request.table.append(block)
        request.computed = len(request.table) * bs

    def allocate(self, request, n: int) -> bool:
        """Take blocks for positions up to computed + n if the free and the cached unheld ones
        hold them; else take none and say False."""
        need = blocks_for(request.computed + n, self.block_size) - len(request.table)
        if need > len(self.free) + len(self.unheld):
            return False
        request.table += [self.new_block() for _ in range(need)]
        return True

    def new_block(self) -> int:
        """A block for new positions, now held once: a free one, else the least recently used
        cached block nobody holds, its hash forgotten."""
        if self.free:
            block = self.free.pop()
        else:
            block, _ = self.unheld.popitem(last=False)
            del self.cached[self.hashes[block]]
            self.hashes[block] = None
        self.refs[block] = 1
        return block

    def cache_full_blocks(self, request) -> None:
        """Hash the blocks the request's computed positions have filled since the last call and
        cache each under its hash (a block already cached under it stays the one found)."""
        if not self.prefix_caching:
            return
        bs, table = self.block_size, request.table
        full = request.computed // bs
        first = full  # the first full block without a hash: the hashed ones come first
        while first > 0 and self.hashes[table[first - 1]] is None:
            first -= 1
        for i in range(first, full):
            previous = self.hashes[table[i - 1]] if i else None
            h = self.hashes[table[i]] = block_hash(previous, request.text[i * bs:(i + 1) * bs])
            self.cached.setdefault(h, table[i])

    def release(self, request, keep: int = 0) -> None:
        """Give back the request's blocks past its first `keep`, the last first (keep 0: all of
        them, and it starts over; else a speculative round's blocks wholly past its kept text).
        One nobody holds any more stays cached, at the recently used end of the LRU, or is free:
        a chain's tail is evicted before its head, which more texts share."""
        while len(request.table) > keep:
            block = request.table.pop()
            self.refs[block] -= 1
            if self.refs[block] == 0:
                if self.is_cached(block):
                    self.unheld[block] = True
                else:
                    self.hashes[block] = None
                    self.free.append(block)
        request.computed = min(request.computed, keep * self.block_size)

    def is_cached(self, block: int) -> bool:
        """Whether the prefix cache finds `block` under its hash."""
        return self.cached.get(self.hashes[block]) == block  # never under None


def block_hash(previous: bytes | None, tokens) -> bytes:
    """A full block's hash: SHA-256 of the hash before it and its tokens (as 64-bit ids)."""
    return hashlib.sha256((previous or b"") + np.asarray(tokens, np.int64).tobytes()).digest()


def blocks_for(n, block_size: int):
    """How many blocks hold n positions: ceil(n / block_size) (n an int or an array)."""
    return -(-n // block_size)
