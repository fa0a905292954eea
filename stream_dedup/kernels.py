"""Compiled (numba) inner loops of the fingerprint. Each has a plain Python/numpy twin that
tests compare it with bit for bit:

* :func:`murmur3_64` / :func:`token_hashes_utf8`: MurmurHash3 x64-128 (first 64 bits, as
  ``mmh3.hash64(data, seed, signed=False)[0]``) of every token of a UTF-8 buffer, where a token is
  a maximal run of word bytes (ASCII letters, digits, ``_`` and every byte >= 0x80: the caller has
  already replaced non-word non-ASCII characters by spaces). One pass, no Python objects per token.
* :func:`permute_blocks`: a SimHash rearranged for every permuted table (twin:
  :meth:`stream_dedup.simhash.PermutedTables.permute`).
* :func:`equal_counts`: agreeing rows of stored signatures (twin: numpy ``==`` and ``sum``).
* :func:`sketch`: word k-shingle hashes (see :mod:`stream_dedup.hashing`), their distinct values,
  the exact MinHash minima (see :mod:`stream_dedup.minhash`) and the SimHash (see
  :mod:`stream_dedup.simhash`), in one call.

Compiled on first use and cached on disk (``NUMBA_CACHE_DIR`` chooses where).
"""

from __future__ import annotations

import numpy as np
from numba import njit

C1 = np.uint64(0x87C37B91114253D5)
C2 = np.uint64(0x4CF5AD432745937F)
_MASK = (1 << 64) - 1


@njit(cache=True, inline="always")
def _rotl(x, r):
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@njit(cache=True, inline="always")
def _fmix(k):
    k ^= k >> np.uint64(33)
    k *= np.uint64(0xFF51AFD7ED558CCD)
    k ^= k >> np.uint64(33)
    k *= np.uint64(0xC4CEB9FE1A85EC53)
    k ^= k >> np.uint64(33)
    return k


@njit(cache=True, inline="always")
def _load64(buf, i):
    v = np.uint64(0)
    for b in range(8):
        v |= np.uint64(buf[i + b]) << np.uint64(8 * b)
    return v


@njit(cache=True)
def murmur3_64(buf, start, end, seed):
    """First 64 bits of MurmurHash3_x64_128(buf[start:end], seed)."""
    c1 = np.uint64(0x87C37B91114253D5)
    c2 = np.uint64(0x4CF5AD432745937F)
    n = end - start
    h1 = np.uint64(seed)
    h2 = np.uint64(seed)
    nblocks = n // 16
    for blk in range(nblocks):
        i = start + blk * 16
        k1 = _load64(buf, i)
        k2 = _load64(buf, i + 8)
        k1 *= c1
        k1 = _rotl(k1, 31)
        k1 *= c2
        h1 ^= k1
        h1 = _rotl(h1, 27)
        h1 += h2
        h1 = h1 * np.uint64(5) + np.uint64(0x52DCE729)
        k2 *= c2
        k2 = _rotl(k2, 33)
        k2 *= c1
        h2 ^= k2
        h2 = _rotl(h2, 31)
        h2 += h1
        h2 = h2 * np.uint64(5) + np.uint64(0x38495AB5)
    tail = start + nblocks * 16
    rem = n & 15
    k1 = np.uint64(0)
    k2 = np.uint64(0)
    if rem > 8:
        for b in range(rem - 1, 7, -1):
            k2 ^= np.uint64(buf[tail + b]) << np.uint64(8 * (b - 8))
        k2 *= c2
        k2 = _rotl(k2, 33)
        k2 *= c1
        h2 ^= k2
    if rem > 0:
        top = rem - 1 if rem <= 8 else 7
        for b in range(top, -1, -1):
            k1 ^= np.uint64(buf[tail + b]) << np.uint64(8 * b)
        k1 *= c1
        k1 = _rotl(k1, 31)
        k1 *= c2
        h1 ^= k1
    h1 ^= np.uint64(n)
    h2 ^= np.uint64(n)
    h1 += h2
    h2 += h1
    h1 = _fmix(h1)
    h2 = _fmix(h2)
    h1 += h2
    return h1


def _word_byte_table() -> np.ndarray:
    table = np.zeros(256, dtype=np.bool_)
    for c in b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_":
        table[c] = True
    table[0x80:] = True
    return table


WORD_BYTES = _word_byte_table()


@njit(cache=True)
def token_hashes_utf8(buf, word, seed):
    """MurmurHash3 (64-bit) of every maximal run of word bytes in ``buf``."""
    n = buf.shape[0]
    out = np.empty(n // 2 + 1, dtype=np.uint64)
    count = 0
    i = 0
    while i < n:
        while i < n and not word[buf[i]]:
            i += 1
        if i >= n:
            break
        j = i
        while j < n and word[buf[j]]:
            j += 1
        out[count] = murmur3_64(buf, i, j, seed)
        count += 1
        i = j
    return out[:count]


@njit(cache=True)
def ascii_fold(buf, blank):
    """ASCII-lowercased copy of UTF-8 ``buf`` with every character flagged in ``blank`` (a bool
    table over the Basic Multilingual Plane) turned into spaces; ``(False, ...)`` as soon as any
    other non-ASCII character appears (the caller then takes the full Unicode path)."""
    n = buf.shape[0]
    out = np.empty(n, dtype=np.uint8)
    i = 0
    while i < n:
        c = buf[i]
        if c < 0x80:
            out[i] = c + 32 if 65 <= c <= 90 else c
            i += 1
            continue
        if c >= 0xF0 or c < 0xC0:  # 4-byte sequences (beyond the BMP) or a stray continuation byte
            return False, out
        width = 2 if c < 0xE0 else 3
        if i + width > n:
            return False, out
        if width == 2:
            cp = ((np.int64(c) & 0x1F) << 6) | (np.int64(buf[i + 1]) & 0x3F)
        else:
            cp = ((np.int64(c) & 0x0F) << 12) | ((np.int64(buf[i + 1]) & 0x3F) << 6) | (np.int64(buf[i + 2]) & 0x3F)
        if not blank[cp]:
            return False, out
        for j in range(width):
            out[i + j] = 32
        i += width
    return True, out


@njit(cache=True, inline="always")
def _minhash_update(x, a_lo, a_hi, b, mins):
    """mins[j] = min(mins[j], (a_j * x + b_j) mod (2^61 - 1)) for every j, exactly (x < 2^32)."""
    p = np.uint64((1 << 61) - 1)
    m29 = np.uint64((1 << 29) - 1)
    for j in range(mins.shape[0]):
        # a_lo, a_hi (< 2^29) and x are 32-bit: LLVM uses the cheap 32x32->64 SIMD multiply
        lo = np.uint64(a_lo[j]) * x
        hi = np.uint64(a_hi[j]) * x
        # a*x = hi*2^32 + lo; hi*2^32 = h1*2^61 + h0*2^32 ≡ h1 + h0*2^32 (mod p), lo ≡ (lo & p) + (lo >> 61)
        v = (hi >> np.uint64(29)) + ((hi & m29) << np.uint64(32)) + (lo & p) + (lo >> np.uint64(61)) + b[j]
        v = (v & p) + (v >> np.uint64(61))   # v < 2^63 before, < p + 4 after: one fold suffices
        v = v - p if v >= p else v           # branch-free forms let LLVM vectorise the j loop
        mins[j] = min(mins[j], v)


@njit(cache=True)
def minhash_signature(xs, a_lo, a_hi, b):
    """MinHash minima (uint64[num_perm]) over 32-bit values ``xs`` (duplicates are harmless)."""
    mins = np.full(a_lo.shape[0], np.uint64((1 << 61) - 1), dtype=np.uint64)
    for i in range(xs.shape[0]):
        _minhash_update(np.uint64(xs[i]), a_lo, a_hi, b, mins)
    return mins


@njit(cache=True)
def simhash64(features):
    """Charikar SimHash of uint64 features, each occurrence weighing 1 (term frequency)."""
    votes = np.zeros(64, dtype=np.int64)
    one = np.uint64(1)
    for i in range(features.shape[0]):
        f = features[i]
        for bit in range(64):
            votes[bit] += np.int64((f >> np.uint64(bit)) & one)
    fp = np.uint64(0)
    for bit in range(64):
        if 2 * votes[bit] > features.shape[0]:
            fp |= one << np.uint64(bit)
    return fp


@njit(cache=True)
def permute_blocks(fp, src, mask, dst):
    """``out[t] = OR over i of ((fp >> src[t, i]) & mask[t, i]) << dst[t, i]``: the SimHash ``fp``
    (uint64) rearranged block by block for every permuted table ``t``."""
    out = np.zeros(src.shape[0], dtype=np.uint64)
    for t in range(src.shape[0]):
        v = np.uint64(0)
        for i in range(src.shape[1]):
            v |= ((fp >> src[t, i]) & mask[t, i]) << dst[t, i]
        out[t] = v
    return out


@njit(cache=True)
def equal_counts(rows, query):
    """``out[i]`` = how many ``j`` have ``rows[i * n + j] == query[j]`` (``n = len(query)``): the
    agreeing MinHash rows of each stored signature in the flat array ``rows``."""
    n = query.shape[0]
    out = np.zeros(rows.shape[0] // n, dtype=np.int64)
    for i in range(out.shape[0]):
        c = 0
        for j in range(n):
            c += rows[i * n + j] == query[j]
        out[i] = c
    return out


@njit(cache=True)
def count_distinct(values):
    """Number of distinct uint64 values (open addressing, linear probing; no sort)."""
    m = values.shape[0]
    size = 16
    while size < 2 * m:
        size *= 2
    table = np.zeros(size, dtype=np.uint64)
    used = np.zeros(size, dtype=np.bool_)
    mask = size - 1
    distinct = 0
    for i in range(m):
        v = values[i]
        h = int((v * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)) & mask
        while used[h] and table[h] != v:
            h = (h + 1) & mask
        if not used[h]:
            used[h] = True
            table[h] = v
            distinct += 1
    return distinct


@njit(cache=True)
def sketch(token_hashes, k, a_lo, a_hi, b):
    """(distinct shingle count, MinHash minima uint64[num_perm], SimHash) of a token-hash sequence.

    The MinHash runs over every shingle occurrence (a repeated value cannot lower a minimum, so
    the result is that of the distinct set) with the 32-bit shift inside the loop, which lets
    LLVM use 32x32-bit vector multiplies; the distinct count comes from a hash set, not a sort.
    """
    n = token_hashes.shape[0]
    num_perm = a_lo.shape[0]
    p = np.uint64((1 << 61) - 1)
    mins = np.full(num_perm, p, dtype=np.uint64)
    if n == 0:
        return 0, mins, np.uint64(0)
    kk = min(k, n)
    m = n - kk + 1
    sh = np.empty(m, dtype=np.uint64)
    mul = np.uint64(0x9E3779B97F4A7C15)
    for i in range(m):
        acc = np.uint64(0x2545F4914F6CDD1D)
        for j in range(kk):
            acc = (acc ^ token_hashes[i + j]) * mul
        sh[i] = _fmix(acc ^ np.uint64(kk))
    fp = simhash64(sh)
    for i in range(m):
        _minhash_update(sh[i] >> np.uint64(32), a_lo, a_hi, b, mins)
    return count_distinct(sh), mins, fp
