"""Compiled (numba) inner loops of the fingerprint. Each has a plain Python/numpy twin that
tests compare it with bit for bit:

* :func:`murmur3_64` / :func:`token_hashes_utf8`: MurmurHash3 x64-128 (first 64 bits, as
  ``mmh3.hash64(data, seed, signed=False)[0]``) of every token of a UTF-8 buffer, where a token is
  a maximal run of word bytes (ASCII letters, digits, ``_`` and every byte >= 0x80: the caller has
  already replaced non-word non-ASCII characters by spaces). One pass, no Python objects per token.
* :func:`permute_blocks`: a SimHash rearranged for every permuted table (twin:
  :meth:`stream_dedup.simhash.PermutedTables.permute`).
* :func:`equal_counts`: agreeing rows of stored signatures (twin: numpy ``==`` and ``sum``).
* :func:`screen_candidates`: a verification's candidates in one pass over their record heads:
  agreeing rows, shingle counts, SimHash distances and which may pass a text rule (twin:
  :meth:`stream_dedup.python_rules.PythonRules._may_pass` and ``equal_counts``).
* :func:`distinct_union`: the distinct members of two arrays, sorted (twin: ``np.union1d``).
* :func:`sketch`: word k-shingle hashes (see :mod:`stream_dedup.hashing`), their distinct values,
  the exact MinHash minima (see :mod:`stream_dedup.minhash`) and the SimHash (see
  :mod:`stream_dedup.simhash`), in one call.

Compiled ahead of time by ``python -m stream_dedup.aot`` (``make install`` runs it), else by numba
on first use and cached on disk (``NUMBA_CACHE_DIR`` chooses where): see :mod:`stream_dedup.jit`.
"""

from __future__ import annotations

import numpy as np

from .jit import compiling, inline, kernel

if compiling():  # numba intrinsics, only read by numba when it compiles the kernels
    from numba.cpython.unsafe.numbers import trailing_zeros

    from .addresses import (
        address_of,
        copy_into,
        load_u8,
        load_u64_unaligned,
        set_u64_item,
        store_u8,
        u64_item,
    )

C1 = np.uint64(0x87C37B91114253D5)
C2 = np.uint64(0x4CF5AD432745937F)


@inline
def _rotl(x, r):
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@inline
def _fmix(k):
    k ^= k >> np.uint64(33)
    k *= np.uint64(0xFF51AFD7ED558CCD)
    k ^= k >> np.uint64(33)
    k *= np.uint64(0xC4CEB9FE1A85EC53)
    k ^= k >> np.uint64(33)
    return k


@inline
def _mix_k1(k1):
    k1 *= C1
    k1 = _rotl(k1, 31)
    return k1 * C2


@inline
def _mix_k2(k2):
    k2 *= C2
    k2 = _rotl(k2, 33)
    return k2 * C1


@inline
def _low_bytes(v, count):
    """The ``count`` (0..8) least significant bytes of ``v``: the first ``count`` bytes of a load."""
    return v & ((np.uint64(1) << np.uint64(8 * count)) - np.uint64(1)) if count < 8 else v


@inline
def _murmur3_64_at(address, start, end, seed):
    """First 64 bits of MurmurHash3_x64_128(buf[start:end], seed) of the buffer at ``address``
    (:func:`~stream_dedup.addresses.address_of`), readable for 16 bytes past ``end``: the tail is one or two whole 8-byte
    loads cut to length, not a byte loop."""
    n = end - start
    h1 = np.uint64(seed)
    h2 = np.uint64(seed)
    i = start
    for _ in range(n >> 4):
        h1 ^= _mix_k1(load_u64_unaligned(address, i))
        h1 = _rotl(h1, 27)
        h1 += h2
        h1 = h1 * np.uint64(5) + np.uint64(0x52DCE729)
        h2 ^= _mix_k2(load_u64_unaligned(address, i + 8))
        h2 = _rotl(h2, 31)
        h2 += h1
        h2 = h2 * np.uint64(5) + np.uint64(0x38495AB5)
        i += 16
    rem = n & 15
    if rem > 8:
        h2 ^= _mix_k2(_low_bytes(load_u64_unaligned(address, i + 8), rem - 8))
        h1 ^= _mix_k1(load_u64_unaligned(address, i))
    elif rem > 0:
        h1 ^= _mix_k1(_low_bytes(load_u64_unaligned(address, i), rem))
    h1 ^= np.uint64(n)
    h2 ^= np.uint64(n)
    h1 += h2
    h2 += h1
    h1 = _fmix(h1)
    h2 = _fmix(h2)
    return h1 + h2


@inline
def _murmur3_128_words(words, seed):
    """(h1, h2): MurmurHash3_x64_128 of the bytes of uint64 ``words`` in little-endian order (as
    ``mmh3.hash_bytes(words.astype("<u8").tobytes(), seed, x64arch=True)`` is h1 then h2, each
    little-endian): each 16-byte block is two words, a tail is one whole word."""
    n = words.shape[0]
    h1 = np.uint64(seed)
    h2 = np.uint64(seed)
    for i in range(n >> 1):
        h1 ^= _mix_k1(words[2 * i])
        h1 = _rotl(h1, 27)
        h1 += h2
        h1 = h1 * np.uint64(5) + np.uint64(0x52DCE729)
        h2 ^= _mix_k2(words[2 * i + 1])
        h2 = _rotl(h2, 31)
        h2 += h1
        h2 = h2 * np.uint64(5) + np.uint64(0x38495AB5)
    if n & 1:
        h1 ^= _mix_k1(words[n - 1])
    length = np.uint64(8 * n)
    h1 ^= length
    h2 ^= length
    h1 += h2
    h2 += h1
    h1 = _fmix(h1)
    h2 = _fmix(h2)
    h1 += h2
    h2 += h1
    return h1, h2


@kernel
def exact_hash128(words, seed):
    """:func:`stream_dedup.hashing.exact_hash` of ``words`` as (h1, h2) (the one-call fingerprint's, tested against it)."""
    return _murmur3_128_words(words, seed)


@kernel
def murmur3_64(buf, start, end, seed):
    """First 64 bits of MurmurHash3_x64_128(buf[start:end], seed) (as ``mmh3.hash64(...)[0]``)."""
    padded = np.zeros(end - start + 16, dtype=np.uint8)
    copy_into(padded, 0, buf, start, end - start)
    h = _murmur3_64_at(address_of(padded), 0, end - start, seed)
    padded[0] = 0  # (a use after the hash: numba frees an array after its last use, see stream_dedup.addresses)
    return h


def _word_byte_table() -> np.ndarray:
    table = np.zeros(256, dtype=np.bool_)
    for c in b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_":
        table[c] = True
    table[0x80:] = True
    return table


WORD_BYTES = _word_byte_table()


@kernel
def token_hashes_utf8(buf, word, seed):
    """MurmurHash3 (64-bit) of every maximal run of word bytes in ``buf`` (:func:`token_runs_utf8`)."""
    return token_runs_utf8(buf, word, seed, False)[3]


@inline
def token_runs_utf8(buf, word, seed, lower):
    """``(padded, starts, ends, hashes)``: ``buf`` followed by zero bytes (at least 16), and the
    start, end and MurmurHash3 (64-bit) of every maximal run of word bytes in ``buf``. With
    ``lower``, ``padded`` is ``buf`` with ASCII capitals lower-cased (an ASCII text's fold), and the
    runs and hashes are those of that text: the fold made in the copy the scan needs anyway.

    Token boundaries come 64 bytes at a time: a bitmask of word bytes, whose run starts
    (``m & ~(m << 1)``) and ends (``~m & (m << 1)``) are read off with trailing-zero counts, so the
    scan costs a few operations per byte and per token instead of a branch per byte.
    """
    n = buf.shape[0]
    nchunks = n // 64 + 1  # at least one zero byte is scanned after the text: every run ends
    padded = np.zeros(nchunks * 64 + 16, dtype=np.uint8)  # (zero is not a word byte)
    if lower:
        for i in range(n):
            c = buf[i]
            padded[i] = c + 32 if 65 <= c <= 90 else c
    else:
        copy_into(padded, 0, buf, 0, n)
    starts = np.empty(n // 2 + 1, dtype=np.int64)
    ends = np.empty(n // 2 + 1, dtype=np.int64)
    cs = 0
    ce = 0
    one = np.uint64(1)
    carry = np.uint64(0)  # the last byte of the previous chunk was a word byte
    for c in range(nchunks):
        base = c * 64
        m = np.uint64(0)
        for b in range(64):
            m |= np.uint64(word[padded[base + b]]) << np.uint64(b)
        before = (m << one) | carry
        s = m & ~before
        e = ~m & before
        carry = m >> np.uint64(63)
        while s:
            starts[cs] = base + trailing_zeros(s)
            cs += 1
            s &= s - one
        while e:
            ends[ce] = base + trailing_zeros(e)
            ce += 1
            e &= e - one
    out = np.empty(cs, dtype=np.uint64)
    for t in range(cs):
        out[t] = _murmur3_64_at(address_of(padded), starts[t], ends[t], seed)
    return padded, starts[:cs], ends[:cs], out


@inline
def _code_point(buf, i, lead, width):
    """The code point of the ``width``-byte UTF-8 sequence whose lead byte ``lead`` is ``buf[i]``
    (as many continuation bytes as ``buf`` still holds): the decoding of :func:`token_hashes_split`,
    :func:`ascii_fold` and :func:`fold_utf8`."""
    cp = np.int64(lead) & (0x7F >> width)
    for j in range(1, min(width, buf.shape[0] - i)):
        cp = (cp << 6) | (np.int64(buf[i + j]) & 0x3F)
    return cp


@kernel
def token_hashes_split(buf, word, split, seed):
    """MurmurHash3 (64-bit) of every token of UTF-8 ``buf`` whose non-ASCII characters are all word
    characters (``blank_non_word`` text): maximal runs of ASCII word bytes (``word``) and non-ASCII
    characters, where a character of a script written without spaces is a token of its own
    (``split``: a bool table over the Basic Multilingual Plane; beyond it, U+20000-U+3134F, the
    CJK extension planes), as :func:`stream_dedup.text.tokenize` splits them."""
    n = buf.shape[0]
    padded = np.zeros(n + 16, dtype=np.uint8)
    copy_into(padded, 0, buf, 0, n)
    starts = np.empty(n + 1, dtype=np.int64)
    ends = np.empty(n + 1, dtype=np.int64)
    m = 0
    run = -1  # start of the run being read, -1 = none
    i = 0
    while i < n:
        c = buf[i]
        if c < 0x80:
            if word[c]:
                if run < 0:
                    run = i
            elif run >= 0:
                starts[m] = run
                ends[m] = i
                m += 1
                run = -1
            i += 1
            continue
        width = 4 if c >= 0xF0 else 3 if c >= 0xE0 else 2
        cp = _code_point(buf, i, c, width)
        width = min(width, n - i)
        alone = split[cp] if cp < 0x10000 else 0x20000 <= cp <= 0x3134F
        if alone:
            if run >= 0:
                starts[m] = run
                ends[m] = i
                m += 1
                run = -1
            starts[m] = i
            ends[m] = i + width
            m += 1
        elif run < 0:
            run = i
        i += width
    if run >= 0:
        starts[m] = run
        ends[m] = n
        m += 1
    out = np.empty(m, dtype=np.uint64)
    for t in range(m):
        out[t] = _murmur3_64_at(address_of(padded), starts[t], ends[t], seed)
    return out


@kernel
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
        cp = _code_point(buf, i, c, width)
        if not blank[cp]:
            return False, out
        for j in range(width):
            out[i + j] = 32
        i += width
    return True, out


@kernel
def fold_utf8(buf, ascii_map, lengths, offsets, pool, flags):
    """UTF-8 ``buf`` mapped a character at a time: an ASCII byte through ``ascii_map``, a character
    of the Basic Multilingual Plane to ``pool[offsets[cp]:offsets[cp] + lengths[cp]]``;
    ``(False, ...)`` as soon as a character's length is 255 (not in the table) or lies beyond the
    BMP (:mod:`stream_dedup.fold_table` builds the tables; no entry is longer than 3 bytes a byte).
    The third value: whether a character with ``flags[cp]`` set was met (a CJK character, say)."""
    n = buf.shape[0]
    out = np.empty(3 * n, dtype=np.uint8)
    flagged = False
    m = 0
    i = 0
    while i < n:
        c = buf[i]
        if c < 0x80:
            out[m] = ascii_map[c]
            m += 1
            i += 1
            continue
        if c >= 0xF0 or c < 0xC0:  # 4-byte sequences (beyond the BMP) or a stray continuation byte
            return False, out[:0], flagged
        width = 2 if c < 0xE0 else 3
        if i + width > n:
            return False, out[:0], flagged
        cp = _code_point(buf, i, c, width)
        length = np.int64(lengths[cp])
        if flags[cp]:
            flagged = True
        if length == 255:
            return False, out[:0], flagged
        at = np.int64(offsets[cp])
        for j in range(length):
            out[m + j] = pool[at + j]
        m += length
        i += width
    return True, out[:m], flagged


@inline
def _minhash_minima(xs, a_lo, a_hi, b):
    """mins[j] = min over i of (a_j * xs[i] + b_j) mod (2^61 - 1), exactly (xs uint64 < 2^32);
    p for every j when ``xs`` is empty.

    One permutation at a time over every value (the running minimum stays in a register and the
    values are vector lanes), int64 from the first fold on: every value is then below 2^62, and
    LLVM compares signed 64-bit lanes with one instruction where unsigned ones take three. On
    the dev stream's shingles 0.74 ns a (value, permutation) pair against 0.91 for the
    permutation-inner loop with unsigned minima (a scratch timing, same process, alternating;
    the same minima: ``tests/engine/test_minhash.py``).
    """
    p = np.uint64((1 << 61) - 1)
    ps = np.int64((1 << 61) - 1)
    m29 = np.uint64((1 << 29) - 1)
    mins = np.empty(a_lo.shape[0], dtype=np.uint64)
    for j in range(a_lo.shape[0]):
        # a_lo, a_hi (< 2^29) and x are 32-bit: LLVM uses the cheap 32x32->64 SIMD multiply
        lo_j = np.uint64(a_lo[j])
        hi_j = np.uint64(a_hi[j])
        b_j = b[j]
        best = ps
        for i in range(xs.shape[0]):
            x = xs[i]
            lo = lo_j * x
            hi = hi_j * x
            # a*x = hi*2^32 + lo; hi*2^32 = h1*2^61 + h0*2^32 ≡ h1 + h0*2^32 (mod p), lo ≡ (lo & p) + (lo >> 61)
            v = (hi >> np.uint64(29)) + ((hi & m29) << np.uint64(32)) + (lo & p) + (lo >> np.uint64(61)) + b_j
            w = np.int64((v & p) + (v >> np.uint64(61)))  # v < 2^63 before, w < p + 4 after: one fold suffices
            w = w - ps if w >= ps else w                   # branch-free forms let LLVM vectorise the i loop
            best = min(best, w)
        mins[j] = np.uint64(best)
    return mins


@kernel
def minhash_signature(xs, a_lo, a_hi, b):
    """MinHash minima (uint64[num_perm]) over 32-bit values ``xs`` (duplicates are harmless)."""
    return _minhash_minima(xs, a_lo, a_hi, b)


def _byte_lanes() -> np.ndarray:
    """``_BYTE_LANES[v]``: bit b of the byte v moved to the lowest bit of byte lane b of a uint64."""
    lanes = np.zeros(256, dtype=np.uint64)
    for v in range(256):
        lanes[v] = sum(((v >> b) & 1) << (8 * b) for b in range(8))
    return lanes


_BYTE_LANES = _byte_lanes()


@kernel
def simhash64(features):
    """Charikar SimHash of uint64 features, each occurrence weighing 1 (term frequency).

    The 64 votes are counted eight at a time: each byte of a feature adds its bits, spread one per
    byte lane (:data:`_BYTE_LANES`), to that byte's uint64 of eight 8-bit counters, emptied into
    the votes every 255 features before a lane can overflow: 8 adds a feature instead of 64 shifts,
    masks and adds (dev stream: 9.0 -> 2.9 us an article, the same fingerprints).
    """
    votes = np.zeros(64, dtype=np.int64)
    counters = np.zeros(8, dtype=np.uint64)
    n = features.shape[0]
    start = 0
    while start < n:
        stop = min(n, start + 255)
        for k in range(8):
            counters[k] = 0
        for i in range(start, stop):
            f = features[i]
            for k in range(8):
                counters[k] += _BYTE_LANES[(f >> np.uint64(8 * k)) & np.uint64(0xFF)]
        for k in range(8):
            c = counters[k]
            for b in range(8):
                votes[8 * k + b] += np.int64((c >> np.uint64(8 * b)) & np.uint64(0xFF))
        start = stop
    fp = np.uint64(0)
    one = np.uint64(1)
    for bit in range(64):
        if 2 * votes[bit] > n:
            fp |= one << np.uint64(bit)
    return fp


@inline
def _permuted(fp, src, mask, dst, t):
    """``OR over i of ((fp >> src[t, i]) & mask[t, i]) << dst[t, i]``: ``fp`` as table ``t`` keys it."""
    v = np.uint64(0)
    for i in range(src.shape[1]):
        v |= ((fp >> src[t, i]) & mask[t, i]) << dst[t, i]
    return v


@kernel
def permute_blocks(fp, src, mask, dst):
    """The SimHash ``fp`` (uint64) rearranged block by block for every permuted table ``t``."""
    out = np.zeros(src.shape[0], dtype=np.uint64)
    for t in range(src.shape[0]):
        out[t] = _permuted(fp, src, mask, dst, t)
    return out


@kernel
def permute_rows(fps, src, mask, dst):
    """uint64[n, T]: :func:`permute_blocks` of each of ``fps`` (uint64[n])."""
    out = np.zeros((fps.shape[0], src.shape[0]), dtype=np.uint64)
    for j in range(fps.shape[0]):
        for t in range(src.shape[0]):
            out[j, t] = _permuted(fps[j], src, mask, dst, t)
    return out


@kernel
def equal_counts(rows, query):
    """``out[i]`` = how many ``j`` have ``rows[i * n + j] == query[j]`` (``n = len(query)``): the
    agreeing MinHash rows of each stored signature in the flat array ``rows`` (the engine counts
    them in :func:`screen_candidates`; this one is the jit tests' example kernel)."""
    n = query.shape[0]
    out = np.zeros(rows.shape[0] // n, dtype=np.int64)
    for i in range(out.shape[0]):
        c = 0
        for j in range(n):
            c += rows[i * n + j] == query[j]
        out[i] = c
    return out


@inline
def popcount(x):
    """The number of set bits of a uint64 (SWAR); also :mod:`stream_dedup.simhash_table`'s."""
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return (x * np.uint64(0x0101010101010101)) >> np.uint64(56)


@inline
def may_pass(j, ham, n, stored_n, rules):
    """Whether a text rule may pass a candidate with the raw Jaccard estimate ``j``, SimHash
    distance ``ham`` and shingle count ``stored_n`` (the new article's ``n``): the screen of
    :func:`screen_candidates` and of :func:`stream_dedup.candidate_rules.verify_candidates`,
    ``rules`` as :func:`screen_candidates` reads them (the float operations of
    :meth:`~stream_dedup.python_rules.PythonRules._may_pass`, in the same order)."""
    if j >= rules[0] or (ham <= rules[2] and j >= rules[1]):
        return True
    if n <= stored_n:
        shorter, longer = n, stored_n
    else:
        shorter, longer = stored_n, n
    return j * (n + stored_n) >= rules[3] * (shorter if shorter else 1) * (1.0 + j) \
        or (j >= rules[4] and shorter >= rules[5] * (longer if longer else 1))


@inline
def record_head(buf, at):
    """(SimHash, shingle count) of the article record whose bytes start at ``buf[at]``
    (:mod:`stream_dedup.index_record`: big-endian, the SimHash at byte 8, the count at 16)."""
    s = np.uint64(0)
    for b in range(8):
        s = (s << np.uint64(8)) | np.uint64(buf[at + 8 + b])
    n = 0
    for b in range(4):
        n = (n << 8) | np.int64(buf[at + 16 + b])
    return s, n


@kernel
def screen_candidates(heads, size, sig_at, query, simhash, n, jaccard_of, rules):
    """One pass over the candidates of a verification, from their records' fixed-size heads.

    ``heads`` holds ``m`` heads of ``size`` bytes each (:mod:`stream_dedup.index_record`: the
    big-endian SimHash at byte 8, the shingle count at 16, the 16-bit signature rows at ``sig_at``);
    ``query`` the bytes of the new article's stored signature. Per candidate: the signature rows
    equal to the query's, its shingle count, the Hamming distance of its SimHash to ``simhash``,
    and whether a text rule may pass it (:meth:`Deduplicator._may_pass`, the same float operations
    in the same order, so the same answer): with ``j = jaccard_of[agree]`` and ``rules`` = (the
    lowest Jaccard of the minhash and short-text rules, the SimHash rule's Jaccard, ``simhash_k``,
    the containment threshold, the rewrite rule's Jaccard, the rewrite rule's length ratio), each
    already lowered by the margin, it may pass if ``j`` reaches the first, or the SimHash rule's
    (within ``simhash_k`` bits), or ``|A∩B| / min(|A|, |B|)`` reaches the containment threshold,
    or ``j`` the rewrite rule's with the lengths within its ratio.

    Returns int64[3, m] (the agreeing rows, the shingle counts, the Hamming distances) and the
    indices of the candidates that may pass, in order (one ``tolist`` each for the caller).
    """
    m = heads.shape[0] // size
    rows = query.shape[0] // 2
    out = np.empty((3, m), dtype=np.int64)  # agreeing rows, shingle counts, Hamming distances
    may = np.empty(m, dtype=np.int64)
    kept = 0
    for i in range(m):
        at = i * size
        s, stored_n = record_head(heads, at)
        ham = np.int64(popcount(s ^ simhash))
        c = 0
        p = at + sig_at
        for r in range(rows):
            if heads[p] == query[2 * r] and heads[p + 1] == query[2 * r + 1]:
                c += 1
            p += 2
        out[0, i], out[1, i], out[2, i] = c, stored_n, ham
        if may_pass(jaccard_of[c], ham, n, stored_n, rules):
            may[kept] = i
            kept += 1
    return out, may[:kept]


@inline
def _set_slots(n):
    """Slots of an open-addressing set for ``n`` values: a power of two, at least 16 and 2n."""
    size = 16
    while size < 2 * n:
        size *= 2
    return size


@inline
def _set_add(table, used, v, mask):
    """Add the uint64 ``v`` to the open-addressing set at ``table`` (uint64) / ``used`` (bool), their
    addresses (:func:`~stream_dedup.addresses.address_of`), linear probing, ``mask`` its size - 1: True if it was not in it
    (:func:`count_distinct`, :func:`distinct_union`)."""
    h = int((v * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)) & mask
    while load_u8(used, h) and u64_item(table, h) != v:
        h = (h + 1) & mask
    if load_u8(used, h):
        return False
    store_u8(used, h, 1)
    set_u64_item(table, h, v)
    return True


@kernel
def distinct_union(a, b):
    """The distinct values of two uint32 arrays, ascending (a verification's candidates: LSH bucket
    members and SimHash hits, an article often in many of its buckets; twin: ``np.union1d``).

    The distinct values are found first (:func:`_set_add`), then only they are sorted: on short
    items ~135 members and hits hold ~20 distinct seqs, and sorting all of them first cost 3.4 us
    of the lookup's ~8.5."""
    n = a.shape[0] + b.shape[0]
    size = _set_slots(n)
    table = np.zeros(size, dtype=np.uint64)
    used = np.zeros(size, dtype=np.bool_)
    out = np.empty(n, dtype=np.uint32)
    k = 0
    for i in range(n):
        v = a[i] if i < a.shape[0] else b[i - a.shape[0]]
        if _set_add(address_of(table), address_of(used), np.uint64(v), size - 1):
            out[k] = v
            k += 1
    distinct = out[:k]
    if k > 32:
        distinct.sort()
    else:  # (a few values: insertion sort)
        for i in range(1, k):
            v = distinct[i]
            j = i - 1
            while j >= 0 and distinct[j] > v:
                distinct[j + 1] = distinct[j]
                j -= 1
            distinct[j + 1] = v
    return distinct


@kernel
def count_distinct(values):
    """Number of distinct uint64 values (an open-addressing set, :func:`_set_add`; no sort)."""
    m = values.shape[0]
    size = _set_slots(m)
    table = np.zeros(size, dtype=np.uint64)
    used = np.zeros(size, dtype=np.bool_)
    distinct = 0
    for i in range(m):
        if _set_add(address_of(table), address_of(used), values[i], size - 1):
            distinct += 1
    return distinct


@inline
def shingle_hashes(token_hashes, k):
    """The 64-bit hash of every word k-shingle (k consecutive token hashes; one shingle of all
    tokens when there are fewer than k).  ``token_hashes`` must not be empty."""
    n = token_hashes.shape[0]
    kk = min(k, n)
    m = n - kk + 1
    sh = np.empty(m, dtype=np.uint64)
    mul = np.uint64(0x9E3779B97F4A7C15)
    for i in range(m):
        acc = np.uint64(0x2545F4914F6CDD1D)
        for j in range(kk):
            acc = (acc ^ token_hashes[i + j]) * mul
        sh[i] = _fmix(acc ^ np.uint64(kk))
    return sh


@kernel
def sketch(token_hashes, k, a_lo, a_hi, b):
    """(distinct shingle count, MinHash minima uint64[num_perm], SimHash) of a token-hash sequence.

    The MinHash runs over every shingle occurrence (a repeated value cannot lower a minimum, so
    the result is that of the distinct set), on the shingle hashes' top 32 bits, which lets LLVM
    use 32x32-bit vector multiplies; the distinct count comes from a hash set, not a sort.
    """
    n = token_hashes.shape[0]
    num_perm = a_lo.shape[0]
    p = np.uint64((1 << 61) - 1)
    mins = np.full(num_perm, p, dtype=np.uint64)
    if n == 0:
        return 0, mins, np.uint64(0)
    return sketch_of_shingles(shingle_hashes(token_hashes, k), a_lo, a_hi, b)


@inline
def sketch_of_shingles(sh, a_lo, a_hi, b):
    """:func:`sketch` from the shingle hashes ``sh`` (not empty) of its token hashes."""
    m = sh.shape[0]
    fp = simhash64(sh)
    top = np.empty(m, dtype=np.uint64)
    for i in range(m):
        top[i] = sh[i] >> np.uint64(32)
    return count_distinct(sh), _minhash_minima(top, a_lo, a_hi, b), fp


@kernel
def word_bitmap(token_hashes, stop, shift):
    """The content-word bitmap of :mod:`stream_dedup.rewrite`: bit ``h >> shift`` set for every token
    hash ``h`` not in ``stop`` (an open-addressing table: power-of-two length, slot ``h & (length - 1)``,
    linear probing, 0 = empty; :func:`stream_dedup.rewrite.stop_table`), as ``2 ** (64 - shift) / 8``
    bytes (bit ``p``: byte ``p >> 3``, bit ``p & 7``). Twin: :func:`stream_dedup.rewrite.word_bitmap_reference`."""
    sh = np.uint64(shift)
    out = np.zeros((1 << (64 - shift)) // 8, dtype=np.uint8)
    mask = np.uint64(stop.shape[0] - 1)
    for t in range(token_hashes.shape[0]):
        h = token_hashes[t]
        i = np.int64(h & mask)
        skip = False
        while stop[i] != 0:
            if stop[i] == h:
                skip = True
                break
            i = np.int64(np.uint64(i + 1) & mask)
        if skip:
            continue
        p = np.int64(h >> sh)
        out[p >> 3] |= np.uint8(1 << (p & 7))
    return out
