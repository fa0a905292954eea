"""A run's article records made in one compiled call (:func:`pack_run`).

After :func:`~stream_dedup.decide_kernel.decide_run` has decided a run of a batch's articles, each
one's record (:mod:`stream_dedup.index_record`'s layout) is made from the batch's arrays and the
numbers the run left, with its stored decision (:mod:`stream_dedup.stored_decision`'s compact
form), end to end in one array that the record store takes as it is
(:meth:`~stream_dedup.record_store.RecordStore.put_packed`). In Python that was ~4 us a record on
short items (a ``struct`` pack and a join per record, the stored form's bytes, the ids' UTF-8, the
records joined again for the store).

The stored decision is made here for a new article without a look-alike (the header, and the
candidates' varint from 7 on) and for a duplicate the compiled rules verified or found exact (the
header of its rule bits and direction, or the exact one; its root as a reference, Jaccard, Hamming
distance, containment, the matched id as a reference or its UTF-8, the candidates' varint): the
bytes :func:`stream_dedup.stored_decision.encode_decision` makes of its decision. Any other's
stored form (a look-alike, a value the compact form does not hold exactly) comes made by Python
(``given``). ``tests/engine/test_record_kernel.py`` compares both with the Python encoders.

Ids: the run's article ids come as UTF-8 end to end. A match filed earlier in the run has its id and
root in the records made before it here; a match the record store holds has them in its record
there (its root: the root id it keeps, or its own id if it keeps none).
"""

from __future__ import annotations

import math

import numpy as np

from .jit import compiling, inline, kernel, trusted

if compiling():
    from .addresses import copy_into

__all__ = ["RECORD_HEAD", "loose_rows", "pack_run"]

RECORD_HEAD = 37  # first seen, SimHash, set size, flags, exact hash (index_record._RECORD)
_LENGTHS = 9      # the ids' UTF-8 lengths, identity sketch length, anchors, words (index_record._LENGTHS)
_INLINE = 7       # candidates 0..6 in the stored decision's header (stored_decision._INLINE_CANDIDATES)
_TAG = 0x01       # (stored_decision.TAG)
# the result's columns this reads (decide_kernel.R_*: tests/engine/test_record_kernel.py checks them)
_R_CANDIDATES, _R_BEST, _R_HITS, _R_DIRECTION, _R_HAMMING, _R_JACCARD, _R_CONTAINMENT, _R_INDEXED, _R_AT, \
    _R_EXACT = 0, 1, 4, 5, 6, 7, 8, 10, 12, 14


@inline
def _put_be(out, at, v, n):
    """``v`` (an integer) as ``n`` big-endian bytes at ``out[at:]``."""
    v = np.uint64(v)
    for b in range(n):
        out[at + b] = np.uint8((v >> np.uint64(8 * (n - 1 - b))) & np.uint64(0xFF))


@inline
def _be16(buf, at):
    return (np.int64(buf[at]) << 8) | np.int64(buf[at + 1])


@inline
def _varint_size(v):
    n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


@inline
def _put_varint(out, at, v):
    """``v`` (0 <= v < 2**63) as an unsigned LEB128 varint at ``out[at:]``; where it ends."""
    while v >= 0x80:
        out[at] = np.uint8((v & 0x7F) | 0x80)
        v >>= 7
        at += 1
    out[at] = np.uint8(v)
    return at + 1


@inline
def _at(out, buf, kind, i):
    """Byte ``i`` of ``out`` (kind 0: this run's records) or of the store's ``buf`` (kind 1)."""
    return out[i] if kind == 0 else buf[i]


@inline
def _equal(out, buf, kind, at, length, kind2, at2, length2):
    """Whether the bytes at ``at`` (of ``kind``) are those at ``at2`` (of ``kind2``)."""
    if length != length2:
        return False
    for b in range(length):
        if _at(out, buf, kind, at + b) != _at(out, buf, kind2, at2 + b):
            return False
    return True


@inline
def _is_id(out, buf, kind, at, length, id_u8, i0, a_len):
    """Whether the bytes at ``at`` (of ``kind``, as :func:`_at`) are the article's id ``id_u8[i0:i0 + a_len]``."""
    if length != a_len:
        return False
    for b in range(a_len):
        if _at(out, buf, kind, at + b) != id_u8[i0 + b]:
            return False
    return True


@inline
def _fixed(v):
    """The uint16 ``k`` of a value stored as ``k / 10000`` (the caller has checked that it is one)."""
    return np.int64(round(v * 10000.0))


@inline
def _compact_fraction(v):
    """Whether the compact form holds ``v`` exactly: ``k / 10000`` for an integer 0 <= k <= 10000, not -0.0
    (stored_decision._fixed; NaN is not)."""
    if not 0.0 <= v <= 1.0 or (v == 0.0 and math.copysign(1.0, v) < 0.0):
        return False
    return round(v * 10000.0) / 10000.0 == v


@kernel
def loose_rows(result, start, stop):
    """The verified duplicates among articles ``start:stop`` (their positions in the run) whose
    decision the compact form cannot hold exactly (rule bits outside 1-15, a direction code outside
    0-2, a Jaccard or containment not ``k / 10000``): Python makes their stored form (JSON)
    before :func:`pack_run`, which makes the others'."""
    out = np.empty(stop - start, dtype=np.int64)
    n = 0
    for k in range(stop - start):
        res = result[start + k]
        if res[_R_BEST] < 0 or res[_R_EXACT] != 0:
            continue
        if not (1.0 <= res[_R_HITS] <= 15.0 and 0.0 <= res[_R_DIRECTION] <= 2.0
                and _compact_fraction(res[_R_JACCARD]) and _compact_fraction(res[_R_CONTAINMENT])):
            out[n] = k
            n += 1
    return out[:n]


@inline
def _grown(out, used, need):
    """``out``, or a copy twice as large if ``need`` more bytes do not fit after ``used``."""
    if used + need <= out.shape[0]:
        return out
    bigger = np.empty(max(2 * out.shape[0], used + need), dtype=np.uint8)
    copy_into(bigger, 0, out, 0, used)
    return bigger


@kernel
def pack_run(result, start, stop, seq0, rows, first_seen, simhashes, sizes, exacts, signature_u8, sig_size,
             identity_u8, identity_at, anchors_at, words, has_words, id_u8, id_at, given_u8, given_at, verified_heads,
             exact_head, new_head, buf, ends):
    """The records of articles ``start:stop`` of a batch (seqs from ``seq0``), end to end in the
    array returned, record ``k`` ending at ``ends[k]`` (the caller puts them in the record store:
    :meth:`~stream_dedup.record_store.RecordStore.put_packed`).

    Per article of the batch: its ``result`` row (:mod:`stream_dedup.decide_kernel`) and its
    ``rows`` entry into the per-row arrays: ``simhashes``, ``sizes``, ``exacts`` (uint8[m, 16]),
    stored signatures (``signature_u8``: ``sig_size`` big-endian bytes a row), identity sketches
    (``identity_u8``, big-endian, row ``r``'s from ``identity_at[r]``), ``anchors_at`` (its
    anchors' count), content-word bitmaps (``words``, ``has_words``). Per article of the run:
    ``first_seen`` (the float64's bits), its id (``id_u8[id_at[k]:id_at[k + 1]]``) and its stored
    decision if Python made it (``given_u8[given_at[k]:given_at[k + 1]]``; empty: made here).
    ``verified_heads[hits, direction]``, ``exact_head`` and ``new_head``: the stored decisions' header bits
    (:mod:`stream_dedup.stored_decision`). ``buf``: the record store's, where the held matches'
    records are (``R_AT``)."""
    n = stop - start
    # (room for all but the held roots and the stored decisions' longer ids: grown if they do not fit)
    room = n * (RECORD_HEAD + sig_size + _LENGTHS + 64 + 24) + id_u8.shape[0] + given_u8.shape[0]
    for k in range(n):
        r = rows[start + k]
        room += 4 * (identity_at[r + 1] - identity_at[r])
    out = np.empty(max(room, 1), dtype=np.uint8)
    used = np.int64(0)
    # where each record of the run keeps its article id and its root id (in ``out``)
    aid_at = np.zeros(n, dtype=np.int64)
    root_at = np.zeros(n, dtype=np.int64)
    root_len = np.zeros(n, dtype=np.int64)
    for k in range(n):
        res = result[start + k]
        r = rows[start + k]
        i0, a_len = id_at[k], id_at[k + 1] - id_at[k]
        best = np.int64(res[_R_BEST])
        # the match's id and the root (kind, at, length); the root is the article's own id if no match
        m_kind, m_at, m_len = np.int64(0), np.int64(0), np.int64(0)
        rid_len = np.int64(0)
        if best >= 0:
            at = np.int64(res[_R_AT])
            if at < 0:  # (filed earlier in this run)
                j = best - seq0
                m_kind, m_at, m_len = np.int64(0), aid_at[j], id_at[j + 1] - id_at[j]
                rk, ra, rl = np.int64(0), root_at[j], root_len[j]
            else:  # (held: its record's ids)
                p = at + RECORD_HEAD + sig_size
                held_len, held_root = _be16(buf, p), _be16(buf, p + 2)
                m_kind, m_at, m_len = np.int64(1), p + _LENGTHS, held_len
                rk, ra, rl = np.int64(1), p + _LENGTHS + (held_len if held_root else 0), \
                    held_root if held_root else held_len
            if not _is_id(out, buf, rk, ra, rl, id_u8, i0, a_len):  # (a root that is the article is not stored)
                rid_len = rl
        indexed = res[_R_INDEXED] != 0
        w = 64 if indexed and has_words[r] else 0
        k_id = identity_at[r + 1] - identity_at[r]
        given = given_at[k + 1] - given_at[k]
        candidates = np.int64(res[_R_CANDIDATES])
        stored = given
        matched_code = np.int64(-1)  # (0: the article's id, 1: its root, -1: the id's bytes)
        if not given:
            stored = 4 + (_varint_size(candidates - _INLINE) if candidates >= _INLINE else 0)
            if best >= 0:  # (stored_decision._string: the root first, then the article's id)
                if _equal(out, buf, m_kind, m_at, m_len, rk, ra, rl):
                    matched_code = 1
                elif _is_id(out, buf, m_kind, m_at, m_len, id_u8, i0, a_len):
                    matched_code = 0
                stored += 1 + 2 + _varint_size(np.int64(res[_R_HAMMING])) + 2
                stored += 1 if matched_code >= 0 else _varint_size(m_len + 3) + m_len
        need = RECORD_HEAD + sig_size + _LENGTHS + a_len + rid_len + 4 * k_id + w + stored
        out = _grown(out, used, need)
        p = used
        # the head: first seen, SimHash, set size, flags, exact hash; the stored signature
        _put_be(out, p, first_seen[k], 8)
        _put_be(out, p + 8, simhashes[r], 8)
        _put_be(out, p + 16, sizes[r], 4)
        out[p + 20] = np.uint8(1 if indexed else 0)
        for b in range(16):
            out[p + 21 + b] = exacts[r, b]
        p += RECORD_HEAD
        copy_into(out, p, signature_u8, r * sig_size, sig_size)
        p += sig_size
        # the lengths, the ids, the identity sketch, the words
        _put_be(out, p, a_len, 2)
        _put_be(out, p + 2, rid_len, 2)
        _put_be(out, p + 4, k_id, 2)
        _put_be(out, p + 6, min(anchors_at[r + 1] - anchors_at[r], 0xFFFF), 2)
        out[p + 8] = np.uint8(w)
        p += _LENGTHS
        aid_at[k] = p
        copy_into(out, p, id_u8, i0, a_len)
        p += a_len
        if rid_len:  # (a match's root that is not the article: only after a match)
            # (copied before the root's place is noted: a root in ``out`` is read from where it was)
            for b in range(rid_len):
                out[p + b] = _at(out, buf, rk, ra + b)
            root_at[k], root_len[k] = p, rid_len
        else:
            root_at[k], root_len[k] = aid_at[k], a_len
        p += rid_len
        copy_into(out, p, identity_u8, 4 * identity_at[r], 4 * k_id)
        p += 4 * k_id
        if w:
            for b in range(w):
                out[p + b] = words[r, b]
            p += w
        # the stored decision
        if given:
            copy_into(out, p, given_u8, given_at[k], given)
            p += given
        else:
            if best >= 0:
                h = exact_head if res[_R_EXACT] != 0 else \
                    verified_heads[np.int64(res[_R_HITS]), np.int64(res[_R_DIRECTION])]
            else:
                h = new_head
            h |= min(candidates, _INLINE) << 21
            v = (h << 8) | _TAG
            for b in range(4):
                out[p + b] = np.uint8((v >> (8 * b)) & 0xFF)
            p += 4
            if best >= 0:
                out[p] = 1  # (the duplicate of: its root, the record's own)
                p += 1
                f = _fixed(res[_R_JACCARD])
                out[p], out[p + 1] = np.uint8(f & 0xFF), np.uint8(f >> 8)
                p = _put_varint(out, p + 2, np.int64(res[_R_HAMMING]))
                f = _fixed(res[_R_CONTAINMENT])
                out[p], out[p + 1] = np.uint8(f & 0xFF), np.uint8(f >> 8)
                p += 2
                if matched_code >= 0:
                    out[p] = np.uint8(matched_code)
                    p += 1
                else:
                    p = _put_varint(out, p, m_len + 3)
                    for b in range(m_len):
                        out[p + b] = _at(out, buf, m_kind, m_at + b)
                    p += m_len
            if candidates >= _INLINE:
                p = _put_varint(out, p, candidates - _INLINE)
        used = p
        ends[k] = used
    return out[:used]


_pack_run, _loose_rows = trusted(pack_run), trusted(loose_rows)
