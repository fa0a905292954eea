"""Stable hashing: every hash in stream-dedup derives from MurmurHash3 (mmh3) with fixed seeds.

Python's built-in ``hash()`` is salted per process, so it is never used. The functions here give
identical values on every machine, process and Python version (pinned by tests):

* ``token_hash(token, seed)``: 64-bit MurmurHash3 x64-128 (first half) of the token's UTF-8 bytes.
* ``shingle_hashes(token_hashes, k)``: 64-bit hash of each run of k consecutive token hashes:
  ``acc = SEED; acc = (acc XOR h_j) * M  (mod 2^64)`` for j in the run, then MurmurHash3's
  ``fmix64`` finaliser. Order-sensitive, and avoids building and hashing k-word strings.
* ``exact_hash(token_hashes, seed)``: 128-bit MurmurHash3 x64-128 of the sequence of token
  hashes (little-endian uint64): the fingerprint of the normalised text, in which case, Unicode
  form, punctuation and spacing no longer matter.

The compiled twins of ``token_hash`` and ``shingle_hashes`` are in :mod:`stream_dedup.kernels`.
"""

from __future__ import annotations

import mmh3
import numpy as np

MASK64 = (1 << 64) - 1
SHINGLE_MUL = 0x9E3779B97F4A7C15  # 2^64 / golden ratio, odd
SHINGLE_SEED = 0x2545F4914F6CDD1D


def token_hash(token: bytes | str, seed: int) -> int:
    """64-bit MurmurHash3 of a token (unsigned)."""
    return mmh3.hash64(token, seed, signed=False)[0]


class TokenHasher:
    """``token_hash`` with a bounded memo: news vocabulary repeats, so most tokens are cache hits."""

    def __init__(self, seed: int, max_entries: int = 1 << 20) -> None:
        self.seed = seed
        self.max_entries = max_entries
        self._cache: dict[bytes, int] = {}

    def hashes(self, tokens: list[bytes]) -> np.ndarray:
        cache = self._cache
        get = cache.get
        out = [get(t) for t in tokens]
        if None in out:
            if len(cache) > self.max_entries:
                cache.clear()
            seed = self.seed
            for i, (tok, h) in enumerate(zip(tokens, out, strict=True)):
                if h is None:
                    h = cache[tok] = mmh3.hash64(tok, seed, signed=False)[0]
                    out[i] = h
        return np.array(out, dtype=np.uint64)


def fmix64(x: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser, vectorised (wrapping uint64 arithmetic)."""
    x = x ^ (x >> np.uint64(33))
    x = x * np.uint64(0xFF51AFD7ED558CCD)
    x = x ^ (x >> np.uint64(33))
    x = x * np.uint64(0xC4CEB9FE1A85EC53)
    return x ^ (x >> np.uint64(33))


def shingle_hashes(token_hashes: np.ndarray, k: int) -> np.ndarray:
    """64-bit hashes of every run of ``k`` consecutive tokens (one run of all tokens if fewer)."""
    n = int(token_hashes.shape[0])
    if n == 0:
        return np.empty(0, dtype=np.uint64)
    kk = min(k, n)
    m = n - kk + 1
    with np.errstate(over="ignore"):
        acc = np.full(m, SHINGLE_SEED, dtype=np.uint64)
        for j in range(kk):
            acc = (acc ^ token_hashes[j:j + m]) * np.uint64(SHINGLE_MUL)
        return fmix64(acc ^ np.uint64(kk))


def exact_hash(token_hashes: np.ndarray, seed: int) -> bytes:
    """128-bit MurmurHash3 (x64 variant) of the token-hash sequence."""
    return mmh3.hash_bytes(token_hashes.astype("<u8").tobytes(), seed, x64arch=True)


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """Distinct values, ascending (a sort and a mask: cheaper than ``np.unique`` on small arrays)."""
    if values.shape[0] < 2:
        return values.copy()
    s = np.sort(values)
    keep = np.empty(s.shape[0], dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]
