"""stream_dedup.minhash: exact mod-Mersenne arithmetic, stable permutations, estimator quality."""

from __future__ import annotations

import mmh3
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dedup.kernels import minhash_signature
from stream_dedup.minhash import (
    MERSENNE_61,
    MinHasher,
    bbit_jaccard,
    containment,
    jaccard,
    permutations,
    signature_numpy,
)

P = MERSENNE_61
U32 = 2**32 - 1


def python_signature(xs: list[int], a: list[int], b: list[int]) -> list[int]:
    """The definition, with Python's unbounded integers: min over x of (a*x + b) mod p."""
    if not xs:
        return [P] * len(a)
    return [min((aj * x + bj) % P for x in xs) for aj, bj in zip(a, b, strict=True)]


def kernel_signature(xs: list[int], a: list[int], b: list[int]) -> list[int]:
    av = np.array(a, dtype=np.uint64)
    out = minhash_signature(np.array(xs, dtype=np.uint64), (av & np.uint64(U32)).astype(np.uint32),
                            (av >> np.uint64(32)).astype(np.uint32), np.array(b, dtype=np.uint64))
    return [int(v) for v in out]


def numpy_signature(xs: list[int], a: list[int], b: list[int]) -> list[int]:
    return [int(v) for v in signature_numpy(np.array(xs, dtype=np.uint64), np.array(a, dtype=np.uint64),
                                            np.array(b, dtype=np.uint64))]


EDGE_X = [0, 1, 2, 2**31, 2**32 - 2, 2**32 - 1, 0xDEADBEEF, 0x80000001]
EDGE_A = [1, 2, P - 1, P - 2, 2**32, 2**32 - 1, 2**32 + 1, 2**60, P - 2**32, (P - 1) // 2, 0x1FFFFFFF00000000]
EDGE_B = [0, 1, P - 1, P - 2, 2**60, 2**32 - 1]


def test_edge_values_exact() -> None:
    a = [aj for aj in EDGE_A for _ in EDGE_B]
    b = [bj for _ in EDGE_A for bj in EDGE_B]
    for x in EDGE_X:
        expected = python_signature([x], a, b)
        assert kernel_signature([x], a, b) == expected, x
        assert numpy_signature([x], a, b) == expected, x
    expected = python_signature(EDGE_X, a, b)
    assert kernel_signature(EDGE_X, a, b) == expected
    assert numpy_signature(EDGE_X, a, b) == expected


def test_edge_values_would_break_wrapping_arithmetic() -> None:
    """Sanity of the test above: these inputs overflow 64 bits, so a wrapping implementation differs."""
    x, a, b = 2**32 - 1, P - 1, P - 1
    wrapped = ((a * x) % 2**64 + b) % 2**64 % P
    assert wrapped != (a * x + b) % P
    assert kernel_signature([x], [a], [b]) == [(a * x + b) % P]


xs_strategy = st.lists(st.integers(0, U32) | st.sampled_from(EDGE_X), max_size=12)
ab_strategy = st.integers(1, 8).flatmap(lambda n: st.tuples(
    st.lists(st.integers(1, P - 1) | st.sampled_from(EDGE_A), min_size=n, max_size=n),
    st.lists(st.integers(0, P - 1) | st.sampled_from(EDGE_B), min_size=n, max_size=n)))


@settings(max_examples=400, deadline=None)
@given(xs_strategy, ab_strategy)
def test_kernel_equals_numpy_equals_python(xs: list[int], ab: tuple[list[int], list[int]]) -> None:
    a, b = ab
    expected = python_signature(xs, a, b)
    assert kernel_signature(xs, a, b) == expected
    assert numpy_signature(xs, a, b) == expected


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, U32), max_size=300), st.sampled_from([8, 64, 128]), st.integers(0, 1000))
def test_minhasher_paths_agree(xs: list[int], num_perm: int, seed: int) -> None:
    fast = MinHasher(num_perm, seed)
    slow = MinHasher(num_perm, seed, use_numba=False)
    x = np.array(xs, dtype=np.uint64)
    sig = fast.signature(x)
    assert np.array_equal(sig, slow.signature(x))
    assert sig.dtype == np.uint64 and sig.shape == (num_perm,)
    assert (sig <= P).all()
    s32 = fast.signature32(x)
    assert s32.dtype == np.uint32
    assert np.array_equal(s32, (sig & np.uint64(U32)).astype(np.uint32))


def test_signature_of_empty_set_is_all_p() -> None:
    assert (MinHasher(16, 1).signature(np.empty(0, np.uint64)) == P).all()
    assert (signature_numpy(np.empty(0, np.uint64), *permutations(16, 1)) == P).all()


def test_signature_ignores_duplicates_and_order() -> None:
    m = MinHasher(32, 3)
    assert np.array_equal(m.signature(np.array([5, 9, 5, 1], np.uint64)), m.signature(np.array([1, 9, 5], np.uint64)))


# -------------------------------------------------------------------------------- permutations
def test_permutations_stable_and_in_range() -> None:
    a, b = permutations(256, 1)
    a2, b2 = permutations(256, 1)
    assert np.array_equal(a, a2) and np.array_equal(b, b2)
    assert a.dtype == np.uint64 and b.dtype == np.uint64
    assert ((a >= 1) & (a < P)).all() and (b < P).all()
    assert len(set(a.tolist())) == 256
    # a prefix of a longer family is the shorter family
    a16, b16 = permutations(16, 1)
    assert np.array_equal(a[:16], a16) and np.array_equal(b[:16], b16)
    # derived from mmh3 and the seed only
    assert int(a[5]) == mmh3.hash64("minhash-a-5", 1, signed=False)[0] % (P - 1) + 1
    assert int(b[5]) == mmh3.hash64("minhash-b-5", 1, signed=False)[0] % P


def test_permutations_pinned() -> None:
    a, b = permutations(4, 1)
    assert a.tolist() == [1449768075537092587, 551673893540331606, 717858998751716139, 1093748138368201140]
    assert b.tolist() == [1924775303201846998, 991162749548667375, 41382369275992036, 936704602517341019]


def test_permutations_depend_on_seed() -> None:
    a1, b1 = permutations(64, 1)
    a2, b2 = permutations(64, 2)
    assert not np.array_equal(a1, a2) and not np.array_equal(b1, b2)


# ---------------------------------------------------------------------------- estimation quality
def _set_pair(rng: np.random.Generator, common: int, only_a: int, only_b: int) -> tuple[np.ndarray, np.ndarray]:
    values = rng.choice(2**32, size=common + only_a + only_b, replace=False).astype(np.uint64)
    c, a, b = np.split(values, [common, common + only_a])
    return np.concatenate([c, a]), np.concatenate([c, b])


def _pairs(n: int, seed: int) -> list[tuple[np.ndarray, np.ndarray, float]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        common = int(rng.integers(5, 150))
        only_a, only_b = int(rng.integers(0, 150)), int(rng.integers(0, 150))
        a, b = _set_pair(rng, common, only_a, only_b)
        out.append((a, b, common / (common + only_a + only_b)))
    return out


def test_jaccard_error_shrinks_with_num_perm() -> None:
    pairs = _pairs(40, seed=11)
    errors = {}
    for num_perm in (16, 256):
        m = MinHasher(num_perm, 1)
        errors[num_perm] = float(np.mean([abs(jaccard(m.signature32(a), m.signature32(b)) - j)
                                          for a, b, j in pairs]))
    assert errors[256] < errors[16]
    assert errors[256] < 0.05
    # the mean absolute error of an estimate with standard error sqrt(J(1-J)/n) is at most ~0.8 * 0.5/sqrt(n)
    assert errors[16] < 0.15


def test_jaccard_estimate_is_unbiased() -> None:
    m = MinHasher(128, 7)
    rng = np.random.default_rng(3)
    diffs = []
    for _ in range(300):
        a, b = _set_pair(rng, 50, 50, 50)  # J = 1/3
        diffs.append(jaccard(m.signature32(a), m.signature32(b)) - 1 / 3)
    se = np.sqrt((1 / 3) * (2 / 3) / 128 / len(diffs))
    assert abs(float(np.mean(diffs))) < 4 * se
    # and the spread matches the binomial standard error sqrt(J(1-J)/num_perm)
    assert 0.7 < float(np.std(diffs)) / np.sqrt((1 / 3) * (2 / 3) / 128) < 1.3


@pytest.mark.parametrize("bits", [4, 8, 16])
def test_bbit_estimate_corrects_accidental_agreement(bits: int) -> None:
    """Low-b-bit rows agree by chance with probability 2^-b; the corrected estimate is unbiased and the
    raw share of agreeing rows is not (most visibly at small b)."""
    m = MinHasher(128, 7)
    rng = np.random.default_rng(5)
    mask = np.uint32((1 << bits) - 1)
    raw, corrected = [], []
    for _ in range(200):
        a, b = _set_pair(rng, 30, 60, 60)  # J = 0.2
        agree = np.count_nonzero((m.signature32(a) & mask) == (m.signature32(b) & mask))
        raw.append(agree / 128 - 0.2)
        corrected.append(float(bbit_jaccard(np.array([agree]), 128, bits)[0]) - 0.2)
    se = np.sqrt(0.2 * 0.8 / 128 / 200) * 1.2
    assert abs(float(np.mean(corrected))) < 4 * se
    if bits == 4:  # chance agreement 1/16 inflates the raw share by (1 - J) / 16 = 0.05
        assert float(np.mean(raw)) > 0.04
    assert bbit_jaccard(np.array([128, 0]), 128, bits).tolist() == [1.0, 0.0]  # identical; clipped at 0


def test_jaccard_of_identical_and_disjoint() -> None:
    m = MinHasher(128, 1)
    rng = np.random.default_rng(0)
    a, b = _set_pair(rng, 0, 200, 200)
    assert jaccard(m.signature32(a), m.signature32(a)) == 1.0
    assert jaccard(m.signature32(a), m.signature32(b)) <= 0.02


def test_jaccard_rejects_different_lengths() -> None:
    with pytest.raises(ValueError):
        jaccard(np.zeros(8, np.uint32), np.zeros(16, np.uint32))


# ------------------------------------------------------------------------------------ containment
@settings(max_examples=300, deadline=None)
@given(st.integers(1, 500), st.integers(0, 500), st.integers(0, 500))
def test_containment_formula_on_exact_sets(common: int, only_a: int, only_b: int) -> None:
    size_a, size_b = common + only_a, common + only_b
    j = common / (common + only_a + only_b)
    assert containment(j, size_a, size_b) == pytest.approx(common / size_a, rel=1e-9, abs=1e-12)
    assert containment(j, size_b, size_a) == pytest.approx(common / size_b, rel=1e-9, abs=1e-12)


def test_containment_edges() -> None:
    assert containment(0.0, 10, 10) == 0.0
    assert containment(1.0, 10, 10) == 1.0
    assert containment(0.5, 0, 10) == 0.0
    assert containment(0.9, 10, 1000) == 1.0  # an over-estimate is capped
    # a trimmed copy: A = first 50 of B's 100 shingles -> J = 0.5, containment of A in B = 1
    assert containment(0.5, 50, 100) == pytest.approx(1.0)
