"""The cache's verbs: append, advance, truncate, shift, fill_rows, reset, reserve."""
import numpy as np
import pytest

from minillm.kv_cache import KVCache


def filled(n_layers=2, batch=2, heads=1, capacity=6, head_dim=3, length=4):
    """A cache whose key at (layer, row, head, position) is 1000 layer + 100 row + position."""
    cache = KVCache.empty(n_layers, batch, heads, capacity, head_dim, np.float64)
    for layer in range(n_layers):
        k = (1000 * layer + 100 * np.arange(batch)[:, None, None, None]
             + np.arange(length)[None, None, :, None] + np.zeros((batch, heads, length, head_dim)))
        keys, values = cache.append(layer, k, -k)
        assert keys.shape == (batch, heads, length, head_dim)
        np.testing.assert_array_equal(keys, k)
        np.testing.assert_array_equal(values, -k)
    cache.advance(length)
    return cache


def test_append_returns_everything_cached_and_advance_counts_it():
    cache = filled()
    assert cache.length == 4
    new = np.full((2, 1, 1, 3), 7.0)
    keys, values = cache.append(0, new, new)
    assert keys.shape == (2, 1, 5, 3) and keys[0, 0, 4, 0] == 7.0 and keys[1, 0, 3, 0] == 103
    cache.advance(1)
    keys, _ = cache.keys_values(0)
    assert keys.shape == (2, 1, 5, 3)
    with pytest.raises(ValueError, match="do not fit"):
        cache.append(0, np.zeros((2, 1, 2, 3)), np.zeros((2, 1, 2, 3)))


def test_shift_drops_the_oldest_positions_of_every_row():
    cache = filled()
    cache.shift(3)
    assert cache.length == 1
    keys, values = cache.keys_values(1)
    np.testing.assert_array_equal(keys[:, 0, :, 0], [[1003], [1103]])
    np.testing.assert_array_equal(values, -keys)
    with pytest.raises(ValueError, match="shift"):
        cache.shift(2)


def test_fill_rows_copies_another_cache_into_some_rows():
    cache, other = filled(), filled(batch=1, length=2)
    other.k += 0.5  # tell its entries apart
    cache.fill_rows([1], other, start=2)
    keys, _ = cache.keys_values(1)
    np.testing.assert_array_equal(keys[:, 0, :, 0], [[1000, 1001, 1002, 1003],
                                                     [1100, 1101, 1000.5, 1001.5]])
    with pytest.raises(ValueError, match="fill_rows"):
        cache.fill_rows([0], other, start=3)


def test_truncate_and_reset():
    cache = filled()
    cache.pad = np.array([1, 0])
    cache.truncate(2)
    assert cache.length == 2 and cache.keys_values(0)[0].shape[2] == 2
    with pytest.raises(ValueError, match="truncate"):
        cache.truncate(3)
    cache.reset()
    assert cache.length == 0 and cache.pad is None


def test_reserve_keeps_what_is_cached_in_a_longer_cache():
    cache = filled(capacity=4)
    before = [cache.keys_values(layer) for layer in range(2)]
    cache.reserve(3)  # room already: nothing changes
    assert cache.capacity == 4
    cache.reserve(9)
    assert cache.capacity == 9 and cache.length == 4
    for layer, (keys, values) in enumerate(before):
        np.testing.assert_array_equal(cache.keys_values(layer)[0], keys)
        np.testing.assert_array_equal(cache.keys_values(layer)[1], values)
    new = np.full((2, 1, 5, 3), 7.0)
    keys, _ = cache.append(1, new, new)  # five more positions now fit
    assert keys.shape == (2, 1, 9, 3) and keys[1, 0, 3, 0] == 1103 and keys[0, 0, 8, 0] == 7.0


def test_the_cache_grows_as_it_fills_doubling_up_to_its_capacity():
    """Room for the first write only, then twice the room at each overflow (never more than
    the capacity), what is cached kept; append hands out views, never copies."""
    cache = KVCache.empty(2, 1, 1, 20, 3, np.float64)
    assert cache.k.nbytes == 0 and cache.shape == (2, 1, 1, 20, 3)
    rooms, written = [], []
    for step in [3] + [1] * 17:
        k = np.random.default_rng(len(written)).standard_normal((1, 1, step, 3))
        for layer in range(2):
            keys, values = cache.append(layer, k, 2 * k)
            assert np.shares_memory(keys, cache.k) and np.shares_memory(values, cache.v)
        cache.advance(step)
        written.append(k)
        rooms.append(cache.k.shape[3])
    assert rooms == [3] * 1 + [6] * 3 + [12] * 6 + [20] * 8
    keys, values = cache.keys_values(1)
    np.testing.assert_array_equal(keys, np.concatenate(written, axis=2))
    np.testing.assert_array_equal(values, 2 * keys)
    with pytest.raises(ValueError, match="do not fit"):
        cache.append(0, np.zeros((1, 1, 1, 3)), np.zeros((1, 1, 1, 3)))


def test_reserve_makes_the_room_at_once():
    cache = KVCache.empty(1, 2, 1, 8, 4, np.float32)
    cache.reserve(6)
    assert cache.k.shape == (1, 2, 1, 6, 4) and cache.capacity == 8
    ones = np.ones((2, 1, 6, 4), np.float32)
    cache.append(0, ones, ones)
    assert cache.k.shape[3] == 6  # no growth: the room was there
