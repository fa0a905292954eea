"""MinHash signatures (Broder 1997) with exact universal hashing.

For a set S of shingle hashes x (32-bit), the j-th signature value is

    sig_j(S) = min_{x in S} h_j(x),    h_j(x) = (a_j * x + b_j) mod p,    p = 2^61 - 1,

with a_j in [1, p) and b_j in [0, p) derived from mmh3 and the seed (never from an RNG whose
stream could change between library versions). The arithmetic is exact: a_j * x is a 93-bit
product, reduced modulo the Mersenne prime with shifts and masks (``2^61 ≡ 1 (mod p)``), not
left to wrap modulo 2^64 as in common implementations.

For two sets A, B: Pr[sig_j(A) = sig_j(B)] = J(A, B) = |A ∩ B| / |A ∪ B|, so the fraction of
equal positions over ``num_perm`` permutations is an unbiased Jaccard estimate with standard
error sqrt(J(1-J)/num_perm).

Signatures are stored as the low 32 bits of each minimum (``uint32``, 4 bytes per permutation);
two different minima agree in their low 32 bits with probability 2^-32, negligible next to the
sampling error.

Two implementations give identical results: :func:`signature_numpy` (vectorised over the
shingle x permutation matrix, the reference) and a numba-compiled kernel (the default: the same
arithmetic, ~40x faster because it never materialises the matrix).
"""

from __future__ import annotations

import mmh3
import numpy as np

MERSENNE_61 = (1 << 61) - 1
_P = np.uint64(MERSENNE_61)
_M29 = np.uint64((1 << 29) - 1)
_M32 = np.uint64(0xFFFFFFFF)


def permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The (a, b) parameters of the ``num_perm`` hash functions, stable for a given seed."""
    a = [mmh3.hash64(f"minhash-a-{j}", seed, signed=False)[0] % (MERSENNE_61 - 1) + 1 for j in range(num_perm)]
    b = [mmh3.hash64(f"minhash-b-{j}", seed, signed=False)[0] % MERSENNE_61 for j in range(num_perm)]
    return np.array(a, dtype=np.uint64), np.array(b, dtype=np.uint64)


def _mulmod_parts(x: np.ndarray, a_lo: np.ndarray, a_hi: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(a*x + b) mod p for x < 2^32 (column) and a = a_hi*2^32 + a_lo (row), exactly."""
    lo = x * a_lo                                   # < 2^64
    hi = x * a_hi                                   # < 2^61
    # hi * 2^32 mod p: hi = h1*2^29 + h0  ->  h1*2^61 + h0*2^32 ≡ h1 + h0*2^32
    v = (hi >> np.uint64(29)) + ((hi & _M29) << np.uint64(32))
    v += (lo & _P) + (lo >> np.uint64(61))         # lo mod p (up to one extra p)
    v += b
    v = (v & _P) + (v >> np.uint64(61))
    v = (v & _P) + (v >> np.uint64(61))
    return np.where(v >= _P, v - _P, v)


def signature_numpy(x: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Reference MinHash: full 61-bit minima (uint64) of 32-bit shingle hashes ``x``."""
    if x.shape[0] == 0:
        return np.full(a.shape[0], _P, dtype=np.uint64)
    xs = x.astype(np.uint64)[:, None]
    return _mulmod_parts(xs, a & _M32, a >> np.uint64(32), b).min(axis=0)


class MinHasher:
    """Computes MinHash signatures for a fixed ``num_perm`` and ``seed``."""

    def __init__(self, num_perm: int = 128, seed: int = 1, use_numba: bool = True) -> None:
        self.num_perm = num_perm
        self.seed = seed
        self.a, self.b = permutations(num_perm, seed)
        self._a_lo = (self.a & _M32).astype(np.uint32)          # low 32 bits of a
        self._a_hi = (self.a >> np.uint64(32)).astype(np.uint32)  # high 29 bits of a
        self.use_numba = use_numba

    def signature(self, x: np.ndarray) -> np.ndarray:
        """Full 61-bit minima (uint64[num_perm]) over the 32-bit shingle hashes ``x``."""
        x = np.ascontiguousarray(x, dtype=np.uint64)
        if self.use_numba:
            from .kernels import minhash_signature
            return minhash_signature(x, self._a_lo, self._a_hi, self.b)
        return signature_numpy(x, self.a, self.b)

    def signature32(self, x: np.ndarray) -> np.ndarray:
        """The stored form: low 32 bits of each minimum (uint32[num_perm])."""
        return (self.signature(x) & _M32).astype(np.uint32)


def jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> float:
    """Estimated Jaccard similarity: the fraction of equal signature positions."""
    if sig_a.shape != sig_b.shape:
        raise ValueError(f"signatures differ in length: {sig_a.shape} vs {sig_b.shape}")
    return float(np.count_nonzero(sig_a == sig_b)) / sig_a.shape[0]


def bbit_jaccard(matches: np.ndarray, num_perm: int, bits: int) -> np.ndarray:
    """Jaccard estimates from the agreeing rows of b-bit signatures (Li & Koenig, b-bit minwise hashing).

    Rows whose minima differ still agree on their low b bits with probability 2^-b, so
    P(agree) = J + (1 - J) 2^-b and J = (P - 2^-b) / (1 - 2^-b), clipped at 0.
    """
    chance = 2.0 ** -bits
    return np.maximum(0.0, (matches / num_perm - chance) / (1.0 - chance))


def containment(jaccard_ab: float, size_a: int, size_b: int) -> float:
    """Estimated containment |A ∩ B| / |A| from a Jaccard estimate and the set sizes.

    |A ∩ B| = J (|A| + |B|) / (1 + J), because |A ∪ B| = |A| + |B| - |A ∩ B|.
    """
    if size_a <= 0:
        return 0.0
    inter = jaccard_ab * (size_a + size_b) / (1.0 + jaccard_ab)
    return min(1.0, inter / size_a)
