"""A text's fingerprint in one compiled call, for the text the fold tables hold (most of it).

:meth:`Fingerprinter.fingerprint_text <stream_dedup.fingerprint.Fingerprinter.fingerprint_text>`
runs a chain of kernels: fold by table, token hashes, the MinHash/SimHash sketch, the passage
anchors, the content-word bitmap, and on the unfolded text the identity sketch's fold and scan.
Each is a call from Python with its arguments checked and its arrays boxed, and on a short item
(~90 words) those calls and the Python between them were about a third of its ~21 us.
:func:`fingerprint_folded` makes the same calls, in the same order and on the same arrays, inside
one compiled function, so the fingerprint is the same bit for bit (``tests/engine/test_fingerprint.py``
compares it with the chained calls and with the reference). Where the chain would leave the compiled
path (a character no table holds: the full Unicode fold in Python; an identity text that does not
fold to ASCII) it says so and the caller runs the chain for that text.
"""

from __future__ import annotations

import numpy as np

from .jit import compiling, inline, kernel

if compiling():
    from .identity import _select_kernel, identity_pairs_runs, identity_sketch_ascii
    from .kernels import (
        _murmur3_128_words,
        fold_utf8,
        shingle_hashes,
        sketch,
        sketch_of_shingles,
        token_hashes_split,
        token_hashes_utf8,
        token_runs_utf8,
        word_bitmap,
    )
    from .passages import winnow_shingles

#: status of :func:`fingerprint_folded`: all of it computed; the tokens' fold needs Python; the
#: identity sketch does (the rest is computed)
DONE, TOKENS_NOT_FOLDED, IDENTITY_NOT_FOLDED = 0, 1, 2


@inline
def _same_ascii_words(word, id_word):
    """Whether the tokens' word-byte table and the identity's agree on ASCII (they do: letters,
    digits and ``_``), so that an ASCII text's identity items are its token runs."""
    for c in range(128):
        if word[c] != id_word[c]:
            return False
    return True


@kernel
def fingerprint_folded(buf, is_ascii, t_map, t_lengths, t_offsets, t_pool, t_flags, i_map, i_lengths, i_offsets,
                       i_pool, i_flags, word, seed, k, a_lo, a_hi, b, window, max_anchors, stop, shift, keep_words,
                       identity_on, id_word, id_seed, id_k):
    """:func:`_fingerprint_one` of one text."""
    return _fingerprint_one(buf, is_ascii, t_map, t_lengths, t_offsets, t_pool, t_flags, i_map, i_lengths, i_offsets,
                            i_pool, i_flags, word, seed, k, a_lo, a_hi, b, window, max_anchors, stop, shift,
                            keep_words, identity_on, id_word, id_seed, id_k)


@inline
def _fingerprint_one(buf, is_ascii, t_map, t_lengths, t_offsets, t_pool, t_flags, i_map, i_lengths, i_offsets,
                     i_pool, i_flags, word, seed, k, a_lo, a_hi, b, window, max_anchors, stop, shift, keep_words,
                     identity_on, id_word, id_seed, id_k):
    """The UTF-8 text ``buf`` (``is_ascii`` if it is ASCII): (status, distinct shingles, MinHash
    minima, SimHash, token hashes, anchors, content-word bitmap bytes, identity sketch), as
    :meth:`Fingerprinter.fingerprint_text` computes them (``t_*``: the tokens' fold table,
    ``i_*``: the identity's, :func:`stream_dedup.fold_table._arrays`; the rest its settings).
    With status ``TOKENS_NOT_FOLDED`` nothing is computed; with ``IDENTITY_NOT_FOLDED`` all but
    the identity sketch."""
    # (an empty array is made only where one is returned: each is an allocation, per text)
    status = np.int64(DONE)
    if is_ascii:  # folding is lower() on ASCII, made in the copy the token scan reads
        low, run_starts, run_ends, th = token_runs_utf8(buf, word, seed, True)
        if not identity_on:
            identity = np.zeros(0, dtype=np.uint32)
        elif _same_ascii_words(word, id_word):  # the items are the tokens' runs: no second scan
            identity = _select_kernel(identity_pairs_runs(buf, low, run_starts, run_ends, id_seed), id_k)
        else:
            identity = identity_sketch_ascii(buf, id_word, id_seed, id_k)
    else:
        ok, folded, split = fold_utf8(buf, t_map, t_lengths, t_offsets, t_pool, t_flags)
        if not ok:
            no_u64 = np.zeros(0, dtype=np.uint64)
            return (np.int64(TOKENS_NOT_FOLDED), 0, no_u64, np.uint64(0), no_u64, no_u64, np.zeros(0, dtype=np.uint8),
                    np.zeros(0, dtype=np.uint32))
        if split:  # characters tokenised one each
            th = token_hashes_split(folded, word, t_flags, seed)
        else:
            th = token_hashes_utf8(folded, word, seed)
        identity = np.zeros(0, dtype=np.uint32)
        if identity_on:
            ok, plain, _ = fold_utf8(buf, i_map, i_lengths, i_offsets, i_pool, i_flags)
            if ok:
                identity = identity_sketch_ascii(plain, id_word, id_seed, id_k)
            else:
                status = np.int64(IDENTITY_NOT_FOLDED)
    if th.shape[0]:  # (the shingle hashes made once, for the sketch and the anchors)
        shingles = shingle_hashes(th, k)
        n, mins, sim = sketch_of_shingles(shingles, a_lo, a_hi, b)
        if window > 0:
            anchors = winnow_shingles(shingles, window)[:max_anchors].copy()
        else:
            anchors = np.zeros(0, dtype=np.uint64)
        words = word_bitmap(th, stop, shift) if keep_words else np.zeros(0, dtype=np.uint8)
    else:
        n, mins, sim = sketch(th, k, a_lo, a_hi, b)
        anchors = np.zeros(0, dtype=np.uint64)
        words = np.zeros(0, dtype=np.uint8)
    return status, n, mins, sim, th, anchors, words, identity


@kernel
def fingerprint_many(buf, starts, ascii_flags, t_map, t_lengths, t_offsets, t_pool, t_flags, i_map, i_lengths,
                     i_offsets, i_pool, i_flags, word, seed, k, a_lo, a_hi, b, window, max_anchors, stop, shift,
                     keep_words, identity_on, id_word, id_seed, id_k):
    """:func:`fingerprint_folded` of each text of a batch in one call: text ``i`` is
    ``buf[starts[i]:starts[i + 1]]`` (UTF-8; ``ascii_flags[i]`` if ASCII). Returns per text its
    status, distinct shingles, SimHash, the MinHash minima's low 32 bits as rows of one array
    (uint32[n, num_perm]) and the exact hash of its token hashes (uint64[n, 2]: h1, h2 of
    :func:`stream_dedup.hashing.exact_hash`, made here: ~1.2 us a text less than ``mmh3`` on a
    slice of them in Python); the anchors, content-word bitmap bytes and identity sketch of all
    texts each concatenated, with ``ends`` (int64[n, 3]) saying where each text's end in them. A
    text with status ``TOKENS_NOT_FOLDED`` has nothing (take the chain of kernels for it)."""
    n = starts.shape[0] - 1
    status = np.zeros(n, dtype=np.int64)
    counts = np.zeros(n, dtype=np.int64)
    sims = np.zeros(n, dtype=np.uint64)
    mins32 = np.zeros((n, a_lo.shape[0]), dtype=np.uint32)
    exacts = np.zeros((n, 2), dtype=np.uint64)
    ends = np.zeros((n, 3), dtype=np.int64)
    # (each list starts with an empty array of its type: numba types a list by its literal)
    parts_anchors, parts_words = [np.zeros(0, dtype=np.uint64)], [np.zeros(0, dtype=np.uint8)]
    parts_identity = [np.zeros(0, dtype=np.uint32)]
    totals = np.zeros(3, dtype=np.int64)
    for i in range(n):
        st, cnt, mins, sim, th, anchors, words, identity = _fingerprint_one(
            buf[starts[i]:starts[i + 1]], ascii_flags[i], t_map, t_lengths, t_offsets, t_pool, t_flags, i_map,
            i_lengths, i_offsets, i_pool, i_flags, word, seed, k, a_lo, a_hi, b, window, max_anchors, stop, shift,
            keep_words, identity_on, id_word, id_seed, id_k)
        status[i], counts[i], sims[i] = st, cnt, sim
        exacts[i, 0], exacts[i, 1] = _murmur3_128_words(th, seed)
        for j in range(mins.shape[0]):
            mins32[i, j] = np.uint32(mins[j] & np.uint64(0xFFFFFFFF))
        parts_anchors.append(anchors)
        parts_words.append(words)
        parts_identity.append(identity)
        totals[0] += anchors.shape[0]
        totals[1] += words.shape[0]
        totals[2] += identity.shape[0]
        ends[i, 0], ends[i, 1], ends[i, 2] = totals[0], totals[1], totals[2]
    all_anchors = np.empty(totals[0], dtype=np.uint64)
    all_words = np.empty(totals[1], dtype=np.uint8)
    all_identity = np.empty(totals[2], dtype=np.uint32)
    for i in range(n):
        a = ends[i - 1] if i > 0 else np.zeros(3, dtype=np.int64)
        all_anchors[a[0]:ends[i, 0]] = parts_anchors[i + 1]
        all_words[a[1]:ends[i, 1]] = parts_words[i + 1]
        all_identity[a[2]:ends[i, 2]] = parts_identity[i + 1]
    return status, counts, sims, mins32, exacts, ends, all_anchors, all_words, all_identity
