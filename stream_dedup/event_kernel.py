"""A run's events written in one compiled call (:func:`write_events`).

The ``dedup`` command writes one JSON event per article (:meth:`Decision.event_json
<stream_dedup.decision.Decision.event_json>`). Made in Python from each article's
:class:`~stream_dedup.decision.Decision` that was ~3 us a record on short items (the decision
object, the ids' escaping, the floats' ``repr``, the f-string): a tenth of the deciding process's
time. After :func:`~stream_dedup.record_kernel.pack_run` has made a run's records, this writes
the events of its new articles (without a look-alike), verified duplicates and exact duplicates
from the numbers :func:`~stream_dedup.decide_kernel.decide_run` left and the ids in the records:
the very text ``event_json`` gives, one event after the other in one array.

The text is fixed but for the ids, two integers and two fractions:

* an id is written as ``json.dumps(..., ensure_ascii=False)`` writes a string: ``"`` and ``\\``
  escaped, the control characters below U+0020 as ``\\n``, ``\\r``, ``\\t``, ``\\b``, ``\\f`` or
  ``\\u00xx``, any other character as its UTF-8;
* a fraction is a Jaccard or containment the compiled rules report rounded to 4 decimals: the
  float nearest ``k / 10000``, whose ``repr`` (what ``json`` writes) is ``0.`` and the four
  digits of ``k`` without trailing zeros (``0.0`` and ``1.0`` at the ends): no shorter decimal
  rounds to the same float, as two decimals of at most four places are more than a float's
  spacing apart.

An article is left to Python (``ends[k]`` equal to the end before it, ``done[k]`` 0) when its event
is not one of those three kinds (a look-alike), when a value is not what this writes (rule bits
outside 1-15, a direction code outside 0-2, a fraction that is not ``k / 10000``), or when an id
holds a lone surrogate (ids are UTF-8 "surrogatepass": Python's text of it is kept, and so is
what writing it does). ``tests/engine/test_event_kernel.py`` compares every event with
``event_json`` on made-up runs through each branch and escape.
"""

from __future__ import annotations

import json

import numpy as np

from .decision import _DIRECTIONS, _METHODS_OF_HITS, _NEW_EVENT
from .jit import compiling, inline, kernel, trusted
from .record_kernel import _LENGTHS, RECORD_HEAD, _at, _be16, _compact_fraction, _grown

if compiling():
    from .addresses import copy_into

__all__ = ["COMPACT_FRAGMENTS", "FRAGMENTS", "write_events"]

# the result's columns this reads (decide_kernel.R_*: tests/engine/test_event_kernel.py checks them)
_R_CANDIDATES, _R_BEST, _R_TEMPLATE, _R_HITS, _R_DIRECTION, _R_HAMMING, _R_JACCARD, _R_CONTAINMENT, _R_AT, \
    _R_EXACT = 0, 1, 2, 4, 5, 6, 7, 8, 12, 14

# the fixed text of the events, in pieces (FRAGMENTS): their numbers
_OPEN, _NEW, _NEW_END, _DUPLICATE, _SIMILARITY, _METHOD, _HAMMING, _CONTAINMENT, _MATCHED, _METHODS, _CANDIDATES, \
    _SEEN = range(12)
_END = 12            # + the direction code: "}" or the direction and "}"
_METHOD_NAME = 15    # + the method key: 0 exact, 1-15 the rule bits (the first method's name, quoted)
_METHOD_LIST = 31    # + the method key: the methods' list


def _fragments(compact: bool = False) -> list[bytes]:
    """The pieces of :data:`FRAGMENTS`; ``compact``: without the spaces after ``:`` and ``,`` (orjson's
    form, the worker's events: ``json.dumps(..., separators=(",", ":"))``)."""
    pieces = ['{"id": ', _NEW_EVENT, ', "seen_before": false}', ', "type": "duplicate-of", "duplicate_of": ',
              ', "similarity": ', ', "method": ', ', "hamming_distance": ', ', "containment": ', ', "matched_id": ',
              ', "methods": ', ', "candidates": ', ', "seen_before": false']
    pieces += ["}" if d is None else f', "direction": {json.dumps(d)}}}' for d in _DIRECTIONS]
    keys = [("exact",), *_METHODS_OF_HITS[1:]]
    pieces += [json.dumps(methods[0]) for methods in keys]
    pieces += [json.dumps(list(methods)) for methods in keys]
    assert len(pieces) == _METHOD_LIST + 16
    if compact:  # (no piece holds these sequences but as the separators)
        pieces = [p.replace('": ', '":').replace(', "', ',"') for p in pieces]
    return [p.encode() for p in pieces]


def _joined(pieces: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    return np.frombuffer(b"".join(pieces), dtype=np.uint8), np.cumsum([0, *map(len, pieces)]).astype(np.int64)


#: the events' fixed text end to end (FRAGMENTS[0]) and where each piece begins (FRAGMENTS[1], one more: the end)
FRAGMENTS = _joined(_fragments())
#: the same in the compact form (the worker's events: orjson's output of the same values)
COMPACT_FRAGMENTS = _joined(_fragments(compact=True))


@inline
def _put_piece(out, p, text, text_at, piece):
    n = text_at[piece + 1] - text_at[piece]
    copy_into(out, p, text, text_at[piece], n)
    return p + n


@inline
def _put_int(out, p, v):
    """``v`` (0 <= v) in decimal at ``out[p:]``; where it ends."""
    digits = 1
    t = v
    while t >= 10:
        t //= 10
        digits += 1
    for b in range(digits - 1, -1, -1):
        out[p + b] = np.uint8(48 + v % 10)
        v //= 10
    return p + digits


@inline
def _put_fraction(out, p, v):
    """``repr(v)`` of a value that is ``k / 10000`` (:func:`~stream_dedup.record_kernel._compact_fraction`) at ``out[p:]``; where it ends."""
    k = np.int64(round(v * 10000.0))
    out[p + 1] = np.uint8(46)  # "."
    if k == 10000 or k == 0:
        out[p] = np.uint8(49 if k else 48)
        out[p + 2] = np.uint8(48)
        return p + 3
    out[p] = np.uint8(48)
    digits = 4
    while k % 10 == 0:
        k //= 10
        digits -= 1
    for b in range(digits + 1, 1, -1):
        out[p + b] = np.uint8(48 + k % 10)
        k //= 10
    return p + digits + 2


@inline
def _plain(records, buf, kind, at, length):
    """Whether the id at ``at`` (of ``kind``, as :func:`~stream_dedup.record_kernel._at`) holds no lone surrogate."""
    for b in range(length - 1):
        if _at(records, buf, kind, at + b) == 0xED and _at(records, buf, kind, at + b + 1) >= 0xA0:
            return False
    return True


@inline
def _put_id(out, p, records, buf, kind, at, length):
    """The id at ``at`` (of ``kind``) as a JSON string (``ensure_ascii=False``) at ``out[p:]``; where it ends."""
    out[p] = np.uint8(34)
    p += 1
    for b in range(length):
        c = _at(records, buf, kind, at + b)
        if c == 34 or c == 92:  # " \
            out[p], out[p + 1] = np.uint8(92), c
            p += 2
        elif c >= 0x20:
            out[p] = c
            p += 1
        else:
            out[p] = np.uint8(92)
            if c == 10:
                out[p + 1] = np.uint8(110)  # \n
            elif c == 13:
                out[p + 1] = np.uint8(114)  # \r
            elif c == 9:
                out[p + 1] = np.uint8(116)  # \t
            elif c == 8:
                out[p + 1] = np.uint8(98)   # \b
            elif c == 12:
                out[p + 1] = np.uint8(102)  # \f
            else:
                out[p + 1], out[p + 2], out[p + 3], out[p + 4] = np.uint8(117), np.uint8(48), np.uint8(48), \
                    np.uint8(48 + (c >> 4))
                d = c & 15
                out[p + 5] = np.uint8(48 + d if d < 10 else 87 + d)  # (lowercase, as json writes it)
                p += 4
            p += 2
    out[p] = np.uint8(34)
    return p + 1


@kernel
def write_events(result, start, stop, seq0, records, record_ends, sig_size, buf, text, text_at, ends, done, roots):
    """The events of articles ``start:stop`` of a batch (seqs from ``seq0``) end to end in the array
    returned, article ``k``'s ending at ``ends[k]``, ``done[k]`` 1 if written here (see the module
    doc for those left to Python); ``roots[k]``: where a duplicate's root id is in its event (the
    JSON string's inside, the id's very bytes), -1 if escaped there (or not a duplicate written here).

    ``result``: :func:`~stream_dedup.decide_kernel.decide_run`'s rows; ``records``, ``record_ends``:
    the run's records (:func:`~stream_dedup.record_kernel.pack_run`), ``sig_size`` their stored
    signatures' bytes; ``buf``: the record store's, where the held matches' records are
    (``R_AT``); ``text``, ``text_at``: :data:`FRAGMENTS`."""
    n = stop - start
    out = np.empty(max(1, n * 512), dtype=np.uint8)
    p = np.int64(0)
    for k in range(n):
        res = result[start + k]
        best = np.int64(res[_R_BEST])
        r0 = record_ends[k - 1] if k else np.int64(0)
        q = r0 + RECORD_HEAD + sig_size
        a_len, rid_len = _be16(records, q), _be16(records, q + 2)
        a_at = q + _LENGTHS
        ends[k] = p
        done[k] = 0
        roots[k, 0] = roots[k, 1] = -1
        if not _plain(records, buf, 0, a_at, a_len):
            continue
        if best < 0:
            if res[_R_TEMPLATE] >= 0:  # (a look-alike)
                continue
            out = _grown(out, p, 6 * a_len + 512)
            p = _put_piece(out, p, text, text_at, _OPEN)
            p = _put_id(out, p, records, buf, 0, a_at, a_len)
            p = _put_piece(out, p, text, text_at, _NEW)
            p = _put_int(out, p, np.int64(res[_R_CANDIDATES]))
            p = _put_piece(out, p, text, text_at, _NEW_END)
        else:
            jaccard, containment = res[_R_JACCARD], res[_R_CONTAINMENT]
            if res[_R_EXACT] != 0:
                key, direction = np.int64(0), np.int64(0)
            else:
                if not (1.0 <= res[_R_HITS] <= 15.0 and 0.0 <= res[_R_DIRECTION] <= 2.0):
                    continue
                key, direction = np.int64(res[_R_HITS]), np.int64(res[_R_DIRECTION])
            if not (_compact_fraction(jaccard) and _compact_fraction(containment)):
                continue
            # the root: this record's (its own id if it keeps none); the matched article's id
            root_at, root_len = (a_at + a_len, rid_len) if rid_len else (a_at, a_len)
            at = np.int64(res[_R_AT])
            if at < 0:  # (filed earlier in this run)
                j = best - seq0
                mq = (record_ends[j - 1] if j else np.int64(0)) + RECORD_HEAD + sig_size
                m_kind, m_at, m_len = np.int64(0), mq + _LENGTHS, _be16(records, mq)
            else:  # (held: its record in the store)
                mq = at + RECORD_HEAD + sig_size
                m_kind, m_at, m_len = np.int64(1), mq + _LENGTHS, _be16(buf, mq)
            if not (_plain(records, buf, 0, root_at, root_len) and _plain(records, buf, m_kind, m_at, m_len)):
                continue
            out = _grown(out, p, 6 * (a_len + root_len + m_len) + 512)
            p = _put_piece(out, p, text, text_at, _OPEN)
            p = _put_id(out, p, records, buf, 0, a_at, a_len)
            p = _put_piece(out, p, text, text_at, _DUPLICATE)
            q = p
            p = _put_id(out, p, records, buf, 0, root_at, root_len)
            if p - q == root_len + 2:  # (nothing escaped)
                roots[k, 0], roots[k, 1] = q + 1, p - 1
            p = _put_piece(out, p, text, text_at, _SIMILARITY)
            p = _put_fraction(out, p, jaccard)
            p = _put_piece(out, p, text, text_at, _METHOD)
            p = _put_piece(out, p, text, text_at, _METHOD_NAME + key)
            p = _put_piece(out, p, text, text_at, _HAMMING)
            p = _put_int(out, p, np.int64(res[_R_HAMMING]))
            p = _put_piece(out, p, text, text_at, _CONTAINMENT)
            p = _put_fraction(out, p, containment)
            p = _put_piece(out, p, text, text_at, _MATCHED)
            p = _put_id(out, p, records, buf, m_kind, m_at, m_len)
            p = _put_piece(out, p, text, text_at, _METHODS)
            p = _put_piece(out, p, text, text_at, _METHOD_LIST + key)
            p = _put_piece(out, p, text, text_at, _CANDIDATES)
            p = _put_int(out, p, np.int64(res[_R_CANDIDATES]))
            p = _put_piece(out, p, text, text_at, _SEEN)
            p = _put_piece(out, p, text, text_at, _END + direction)
        ends[k] = p
        done[k] = 1
    return out[:p]


_write_events = trusted(write_events)
