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

from .jit import compiling, kernel

if compiling():
    from .identity import identity_sketch_ascii
    from .kernels import fold_utf8, sketch, token_hashes_split, token_hashes_utf8, word_bitmap
    from .passages import winnow

#: status of :func:`fingerprint_folded`: all of it computed; the tokens' fold needs Python; the
#: identity sketch does (the rest is computed)
DONE, TOKENS_NOT_FOLDED, IDENTITY_NOT_FOLDED = 0, 1, 2


@kernel
def fingerprint_folded(buf, is_ascii, t_map, t_lengths, t_offsets, t_pool, t_flags, i_map, i_lengths, i_offsets,
                       i_pool, i_flags, word, seed, k, a_lo, a_hi, b, window, max_anchors, stop, shift, keep_words,
                       identity_on, id_word, id_seed, id_k):
    """The UTF-8 text ``buf`` (``is_ascii`` if it is ASCII): (status, distinct shingles, MinHash
    minima, SimHash, token hashes, anchors, content-word bitmap bytes, identity sketch), as
    :meth:`Fingerprinter.fingerprint_text` computes them (``t_*``: the tokens' fold table,
    ``i_*``: the identity's, :func:`stream_dedup.fold_table._arrays`; the rest its settings).
    With status ``TOKENS_NOT_FOLDED`` nothing is computed; with ``IDENTITY_NOT_FOLDED`` all but
    the identity sketch."""
    no_u64 = np.zeros(0, dtype=np.uint64)
    no_u8 = np.zeros(0, dtype=np.uint8)
    no_u32 = np.zeros(0, dtype=np.uint32)
    if is_ascii:  # folding is lower() on ASCII
        folded = buf.copy()
        for i in range(folded.shape[0]):
            if 65 <= folded[i] <= 90:
                folded[i] += 32
        th = token_hashes_utf8(folded, word, seed)
    else:
        ok, folded, split = fold_utf8(buf, t_map, t_lengths, t_offsets, t_pool, t_flags)
        if not ok:
            return np.int64(TOKENS_NOT_FOLDED), 0, no_u64, np.uint64(0), no_u64, no_u64, no_u8, no_u32
        if split:  # characters tokenised one each
            th = token_hashes_split(folded, word, t_flags, seed)
        else:
            th = token_hashes_utf8(folded, word, seed)
    n, mins, sim = sketch(th, k, a_lo, a_hi, b)
    anchors = winnow(th, k, window)[:max_anchors].copy() if window > 0 else no_u64
    words = word_bitmap(th, stop, shift) if keep_words and th.shape[0] else no_u8
    status = np.int64(DONE)
    identity = no_u32
    if identity_on:
        if is_ascii:
            identity = identity_sketch_ascii(buf, id_word, id_seed, id_k)
        else:
            ok, plain, _ = fold_utf8(buf, i_map, i_lengths, i_offsets, i_pool, i_flags)
            if ok:
                identity = identity_sketch_ascii(plain, id_word, id_seed, id_k)
            else:
                status = np.int64(IDENTITY_NOT_FOLDED)
    return status, n, mins, sim, th, anchors, words, identity
