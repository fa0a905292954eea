"""stream_dedup.hashing: pinned MurmurHash3 values and the numpy functions against pure Python."""

from __future__ import annotations

import mmh3
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dedup import hashing, kernels

MASK64 = (1 << 64) - 1

# Pinned when the index format was fixed: a change here invalidates every stored index.
PINNED_TOKEN_HASHES = [
    (b"news", 1, 78653571937347311),
    (b"duplicate", 1, 14890492492713108054),
    ("café".encode(), 1, 15526261076823685197),
    (b"", 1, 5048724184180415669),
    (b"news", 42, 2795525122471083301),
    (b"0123456789abcdefXYZ", 7, 13469065615554529002),
]


@pytest.mark.parametrize(("token", "seed", "expected"), PINNED_TOKEN_HASHES)
def test_token_hash_pinned(token: bytes, seed: int, expected: int) -> None:
    assert hashing.token_hash(token, seed) == expected
    buf = np.frombuffer(token, dtype=np.uint8)
    assert int(kernels.murmur3_64(buf, 0, len(token), seed)) == expected


def test_token_hash_matches_published_murmur3_vector() -> None:
    # MurmurHash3_x64_128("The quick brown fox jumps over the lazy dog", 0) = e34bbc7bbc071b6c 7a433ca9c49a9347
    data = b"The quick brown fox jumps over the lazy dog"
    assert hashing.token_hash(data, 0) == 0xE34BBC7BBC071B6C
    assert int(kernels.murmur3_64(np.frombuffer(data, np.uint8), 0, len(data), 0)) == 0xE34BBC7BBC071B6C
    assert hashing.token_hash(b"", 0) == 0


def test_token_hash_accepts_str_as_utf8() -> None:
    assert hashing.token_hash("café", 1) == hashing.token_hash("café".encode(), 1)


def test_token_hashes_utf8_pinned() -> None:
    buf = np.frombuffer(b"the quick brown fox, 2024!", dtype=np.uint8)
    got = [int(x) for x in kernels.token_hashes_utf8(buf, kernels.WORD_BYTES, 1)]
    assert got == [13448711137085732102, 10167101681721977029, 3598564175779243935,
                   13614950076198156420, 8352793512180891165]
    assert got == [hashing.token_hash(t, 1) for t in (b"the", b"quick", b"brown", b"fox", b"2024")]


def test_shingle_and_exact_hash_pinned() -> None:
    th = np.array([1, 2, 3, 4, 5], dtype=np.uint64)
    assert [int(x) for x in hashing.shingle_hashes(th, 4)] == [1551702125524742373, 5235041327689486948]
    assert hashing.exact_hash(np.array([1, 2, 3], dtype=np.uint64), 1).hex() == "6dce7038a90d000e2a700b46b75b3e0a"


# ---------------------------------------------------------------- against pure-Python references
def _fmix64_py(x: int) -> int:
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & MASK64
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & MASK64
    return x ^ (x >> 33)


def _shingles_py(th: list[int], k: int) -> list[int]:
    if not th:
        return []
    kk = min(k, len(th))
    out = []
    for i in range(len(th) - kk + 1):
        acc = hashing.SHINGLE_SEED
        for h in th[i:i + kk]:
            acc = ((acc ^ h) * hashing.SHINGLE_MUL) & MASK64
        out.append(_fmix64_py(acc ^ kk))
    return out


u64s = st.integers(min_value=0, max_value=MASK64)


@settings(max_examples=200, deadline=None)
@given(st.lists(u64s, max_size=40), st.integers(min_value=1, max_value=9))
def test_shingle_hashes_match_python(th: list[int], k: int) -> None:
    arr = np.array(th, dtype=np.uint64)
    got = hashing.shingle_hashes(arr, k)
    assert got.dtype == np.uint64
    assert [int(x) for x in got] == _shingles_py(th, k)
    assert len(got) == (0 if not th else len(th) - min(k, len(th)) + 1)


@settings(max_examples=200, deadline=None)
@given(st.lists(u64s, max_size=20))
def test_fmix64_matches_python(xs: list[int]) -> None:
    with np.errstate(over="ignore"):
        got = hashing.fmix64(np.array(xs, dtype=np.uint64))
    assert [int(x) for x in got] == [_fmix64_py(x) for x in xs]


def test_shingle_hashes_are_order_sensitive() -> None:
    a = hashing.shingle_hashes(np.array([1, 2, 3, 4], dtype=np.uint64), 4)
    b = hashing.shingle_hashes(np.array([4, 3, 2, 1], dtype=np.uint64), 4)
    assert a[0] != b[0]


@settings(max_examples=100, deadline=None)
@given(st.lists(u64s, max_size=30), st.integers(min_value=0, max_value=2**32 - 1))
def test_exact_hash_is_mmh3_of_little_endian_u64(th: list[int], seed: int) -> None:
    data = b"".join(x.to_bytes(8, "little") for x in th)
    assert hashing.exact_hash(np.array(th, dtype=np.uint64), seed) == mmh3.hash_bytes(data, seed, x64arch=True)
    h1, h2 = kernels.exact_hash128(np.array(th, dtype=np.uint64), seed)  # (the one-call fingerprint's)
    assert int(h1).to_bytes(8, "little") + int(h2).to_bytes(8, "little") == mmh3.hash_bytes(data, seed, x64arch=True)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=50), max_size=60))
def test_sorted_unique(values: list[int]) -> None:
    got = hashing.sorted_unique(np.array(values, dtype=np.uint64))
    assert [int(x) for x in got] == sorted(set(values))


def test_sorted_unique_returns_a_copy() -> None:
    one = np.array([7], dtype=np.uint64)
    out = hashing.sorted_unique(one)
    out[0] = 9
    assert one[0] == 7


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=12), max_size=30), st.integers(min_value=0, max_value=2**32 - 1))
def test_token_hasher_matches_token_hash(tokens: list[bytes], seed: int) -> None:
    hasher = hashing.TokenHasher(seed, max_entries=4)  # tiny memo: exercises the clearing path
    for _ in range(2):  # second pass is served (partly) from the memo
        got = hasher.hashes(tokens)
        assert got.dtype == np.uint64
        assert [int(x) for x in got] == [hashing.token_hash(t, seed) for t in tokens]



def test_token_hasher_memo_is_bounded() -> None:
    hasher = hashing.TokenHasher(1, max_entries=10)
    for i in range(100):
        hasher.hashes([f"tok{i}".encode()])
    assert len(hasher._cache) <= 11
