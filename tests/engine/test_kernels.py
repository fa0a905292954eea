"""stream_dedup.kernels: the compiled loops against mmh3 and the numpy/Python reference functions."""

from __future__ import annotations

import re

import mmh3
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dedup import kernels
from stream_dedup.hashing import shingle_hashes, sorted_unique
from stream_dedup.minhash import MERSENNE_61, MinHasher, signature_numpy
from stream_dedup.simhash import simhash_numpy

SEEDS = st.sampled_from([0, 1, 2, 42, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]) | st.integers(0, 2**32 - 1)


@settings(max_examples=600, deadline=None)
@given(st.integers(min_value=0, max_value=64).flatmap(lambda n: st.binary(min_size=n, max_size=n)), SEEDS)
def test_murmur3_64_equals_mmh3(data: bytes, seed: int) -> None:
    buf = np.frombuffer(data, dtype=np.uint8)
    assert int(kernels.murmur3_64(buf, 0, len(data), seed)) == mmh3.hash64(data, seed, signed=False)[0]


def test_murmur3_64_every_length_0_to_64() -> None:
    rng = np.random.default_rng(5)
    for n in range(65):
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        for seed in (0, 1, 0xFFFFFFFF):
            assert int(kernels.murmur3_64(np.frombuffer(data, np.uint8), 0, n, seed)) == \
                mmh3.hash64(data, seed, signed=False)[0], (n, seed)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=80), st.data(), SEEDS)
def test_murmur3_64_of_a_slice(data: bytes, draw: st.DataObject, seed: int) -> None:
    start = draw.draw(st.integers(0, len(data)))
    end = draw.draw(st.integers(start, len(data)))
    buf = np.frombuffer(data, dtype=np.uint8)
    assert int(kernels.murmur3_64(buf, start, end, seed)) == mmh3.hash64(data[start:end], seed, signed=False)[0]


def test_word_byte_table() -> None:
    expected = {c for c in range(256) if c >= 0x80 or re.fullmatch(rb"\w", bytes([c]))}
    assert {c for c in range(256) if kernels.WORD_BYTES[c]} == expected


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | st.text(alphabet="ab_9 ,.\t\n-é", max_size=60).map(str.encode), SEEDS)
def test_token_hashes_utf8_equals_split_and_mmh3(data: bytes, seed: int) -> None:
    tokens = re.findall(rb"[A-Za-z0-9_\x80-\xff]+", data)
    got = kernels.token_hashes_utf8(np.frombuffer(data, dtype=np.uint8), kernels.WORD_BYTES, seed)
    assert [int(x) for x in got] == [mmh3.hash64(t, seed, signed=False)[0] for t in tokens]


@pytest.mark.parametrize("lead", [0, 1, 30, 63, 64, 65])
@pytest.mark.parametrize("length", [1, 8, 9, 16, 17, 63, 64, 65, 128, 129])
def test_token_hashes_utf8_tokens_across_and_up_to_64_byte_chunks(lead: int, length: int) -> None:
    # the scan works 64 bytes at a time: runs that cross a chunk edge or end the buffer exactly on one
    data = b" " * lead + bytes(97 + i % 26 for i in range(length))
    for buf in (data, data + b" ", data + b" x"):
        tokens = re.findall(rb"[a-z]+", buf)
        got = kernels.token_hashes_utf8(np.frombuffer(buf, np.uint8), kernels.WORD_BYTES, 7)
        assert [int(x) for x in got] == [mmh3.hash64(t, 7, signed=False)[0] for t in tokens]


@pytest.mark.parametrize("seed", [0, 1, 42, 0xFFFFFFFF])
def test_token_hashes_of_every_length_equal_mmh3(seed: int) -> None:
    """Tokens of every length from 1 to 40 bytes, in one buffer: the branch-free pass hashes those
    under 16 bytes (the tail's words cut to length), the 16-byte blocks of the others are hashed
    after it; each is mmh3's."""
    rng = np.random.default_rng(seed)
    tokens = [bytes(rng.choice(list(b"abcdefghijklmnopqrstuvwxyz0123456789_\x80\xff"), n).tolist()) for n in range(1, 41)]
    order = rng.permutation(len(tokens))
    data = b" ".join(tokens[i] for i in order)
    got = kernels.token_hashes_utf8(np.frombuffer(data, np.uint8), kernels.WORD_BYTES, seed)
    assert [int(x) for x in got] == [mmh3.hash64(tokens[i], seed, signed=False)[0] for i in order]


def test_token_hashes_utf8_worst_case_token_count() -> None:
    data = b"a " * 50 + b"a"  # the most tokens a buffer of this length can hold
    got = kernels.token_hashes_utf8(np.frombuffer(data, np.uint8), kernels.WORD_BYTES, 1)
    assert len(got) == 51


def _sketch_reference(th: np.ndarray, k: int, minhasher: MinHasher) -> tuple[int, np.ndarray, int]:
    sh = shingle_hashes(th, k)
    unique = sorted_unique(sh)
    mins = signature_numpy(unique >> np.uint64(32), minhasher.a, minhasher.b)
    return int(unique.shape[0]), mins, simhash_numpy(sh)


MINHASHERS = {n: MinHasher(n, 1) for n in (8, 16, 128)}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1) | st.integers(0, 5), max_size=50),
       st.integers(min_value=1, max_value=6), st.sampled_from(sorted(MINHASHERS)))
def test_sketch_equals_reference(values: list[int], k: int, num_perm: int) -> None:
    m = MINHASHERS[num_perm]
    th = np.array(values, dtype=np.uint64)
    n, mins, sim = kernels.sketch(th, k, m._a_lo, m._a_hi, m.b)
    ref_n, ref_mins, ref_sim = _sketch_reference(th, k, m)
    assert int(n) == ref_n
    assert np.array_equal(mins, ref_mins)
    assert int(sim) == ref_sim


@pytest.mark.parametrize("length", [1, 2, 254, 255, 256, 510, 511, 1000])
def test_simhash64_equals_reference_across_its_counter_flushes(length: int) -> None:
    """The kernel counts votes in 8-bit lanes emptied every 255 features: all-ones features fill a
    lane to exactly 255 there; random ones and a majority of ones on half the bits check the rest."""
    rng = np.random.default_rng(length)
    ones = np.full(length, 2**64 - 1, dtype=np.uint64)
    assert int(kernels.simhash64(ones)) == simhash_numpy(ones) == 2**64 - 1
    half = np.where(np.arange(length) % 3 == 0, np.uint64(0xFFFFFFFF00000000), np.uint64(0x00000000FFFFFFFF))
    assert int(kernels.simhash64(half)) == simhash_numpy(half)
    values = rng.integers(0, 2**63, length, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, length, dtype=np.uint64)
    assert int(kernels.simhash64(values)) == simhash_numpy(values)


def test_sketch_of_nothing() -> None:
    m = MINHASHERS[8]
    n, mins, sim = kernels.sketch(np.empty(0, np.uint64), 4, m._a_lo, m._a_hi, m.b)
    assert int(n) == 0 and int(sim) == 0
    assert (mins == MERSENNE_61).all()


def test_sketch_counts_repeated_shingles_once() -> None:
    m = MINHASHERS[8]
    th = np.array([1, 2, 1, 2, 1, 2, 1, 2], dtype=np.uint64)  # shingles of k=2: (1,2) x4, (2,1) x3
    n, _, _ = kernels.sketch(th, 2, m._a_lo, m._a_hi, m.b)
    assert int(n) == 2


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1) | st.integers(0, 40), max_size=300))
def test_count_distinct_equals_unique(values: list[int]) -> None:
    arr = np.array(values, dtype=np.uint64)
    assert kernels.count_distinct(arr) == len(set(values))


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=0x2100) | st.sampled_from("\u2014\u201c\u201d\u00a0Ab"),
               max_size=40))
def test_ascii_fold_equals_python(text: str) -> None:
    from stream_dedup.text import COMMON_NON_WORD, COMMON_NON_WORD_TABLE

    raw = text.encode("utf-8", "surrogatepass")
    ok, out = kernels.ascii_fold(np.frombuffer(raw, dtype=np.uint8), COMMON_NON_WORD_TABLE)
    expected_ok = all(ch.isascii() or ch in COMMON_NON_WORD for ch in text)
    assert ok == expected_ok
    if ok:
        expected = "".join(ch if ch.isascii() else " " * len(ch.encode("utf-8")) for ch in text)
        assert out.tobytes() == expected.encode("ascii").lower()


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 16), st.integers(0, 6), st.data())
def test_equal_counts_equals_numpy(n: int, rows: int, data: st.DataObject) -> None:
    # a small alphabet so that equal positions are common
    values = st.lists(st.integers(0, 3), min_size=n * rows, max_size=n * rows)
    flat = np.array(data.draw(values), dtype=np.uint32)
    query = np.array(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), dtype=np.uint32)
    expected = (flat.reshape(rows, n) == query).sum(axis=1)
    assert kernels.equal_counts(flat, query).tolist() == expected.tolist()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 60), max_size=150), st.lists(st.integers(0, 2**32 - 1), max_size=40))
def test_distinct_union_equals_numpy(a: list[int], b: list[int]) -> None:
    """A verification's candidates: bucket members (many repeats) and SimHash hits, once each, ascending."""
    x, y = np.array(a, dtype=np.uint32), np.array(b, dtype=np.uint32)
    got = kernels.distinct_union(x, y)
    assert got.dtype == np.uint32 and got.tolist() == np.union1d(x, y).tolist()
