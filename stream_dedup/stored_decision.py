"""The stored decision of an article record in a few bytes (:func:`encode`, :func:`decode`).

The index keeps with each article the decision first returned for it (:meth:`Decision.to_stored`:
the values of ``_STORED_FIELDS`` in order, trailing None values dropped), replayed when the id comes
again. As JSON that is 42 bytes for a new article and 114 for a duplicate (dev stream averages);
this form takes 4 and 12. It is exact: ``decode(encode(x))`` is ``orjson.loads(orjson.dumps(x))`` (int, float, None,
str and the methods list as they were), and whatever does not fit it exactly is stored as the
orjson bytes instead, so correctness never depends on the compact form.

Compact form (integers little-endian)::

    0x01      tag: no JSON text starts with it (orjson output starts with [ { " - t f n or a digit)
    header  (3 bytes, 24 bits)
      bit  0       type: 0 "new", 1 "duplicate-of"
      bits 1-11    value i (1..11) of the list is not None; the list ends at its last non-None value
      bits 12-14   method: index in METHODS
      bit  15      direction: 0 "new_in_earlier", 1 "earlier_in_new"
      bits 16-20   methods: bit k set if METHODS[k] is in the list (which is in METHODS order)
      bits 21-23   candidates 0..6, or 7: candidates - 7 follows as a varint
    then, for the values that are present, in list order:
      duplicate_of, matched_id, template_of   a string (below)
      similarity, containment, identity_overlap   uint16 k, the value being k / 10000 (0 <= k <= 10000)
      hamming_distance, candidates (if >= 7)      unsigned LEB128 varint (< 2**64)

A string is a varint ``c``: 0 the article id, 1 the record's cluster root id, 2 the last string
before it in this decision, or ``c - 3`` bytes of UTF-8 ("surrogatepass", as the record's ids) that
follow.

Compact only if: a list of 1 to 12 values whose last is not None; type, method and direction
among the known values; methods a list or tuple of distinct METHODS in METHODS order; floats
(exactly ``float``) equal, bit for bit, to ``k / 10000``; ints (exactly ``int``) in [0, 2**64);
strings exactly ``str``. Anything else (a dict, a bool, 0.1 + 0.2, -0.0, ...) is orjson.
:func:`decode` reads both, so records written as JSON by older versions stay readable.
"""

from __future__ import annotations

from itertools import combinations
from math import copysign
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from .decision import _DIRECTIONS as _DIRECTION_OF_CODE
from .decision import _METHODS_OF_HITS, _STORED_FIELDS, METHODS

if TYPE_CHECKING:
    from .decision import Decision

__all__ = ["EXACT_HEAD", "NEW_HEAD", "TAG", "VERIFIED_HEADS", "decode", "encode", "encode_decision"]

TAG = 0x01
_N = len(_STORED_FIELDS)  # 12
assert _STORED_FIELDS == ("type", "duplicate_of", "similarity", "method", "hamming_distance", "containment",
                          "matched_id", "methods", "candidates", "direction", "template_of", "identity_overlap")
assert len(METHODS) <= 5  # five bits of the header

_TYPES = ("new", "duplicate-of")
_TYPE_CODE = {t: i for i, t in enumerate(_TYPES)}
_METHOD_CODE = {m: i << 12 for i, m in enumerate(METHODS)}
_DIRECTIONS = ("new_in_earlier", "earlier_in_new")
_DIRECTION_CODE = {d: i << 15 for i, d in enumerate(_DIRECTIONS)}
# every subset of METHODS in METHODS order -> its bits in the header (another order is not compact)
_MASK_OF = {sub: sum(1 << (16 + METHODS.index(m)) for m in sub)
            for r in range(len(METHODS) + 1) for sub in combinations(METHODS, r)}
_METHODS_OF = {mask >> 16: list(sub) for sub, mask in _MASK_OF.items()}
_PAD = [[None] * (_N - n) for n in range(_N + 1)]
_BYTE = [bytes((i,)) for i in range(256)]
_INLINE_CANDIDATES = 7  # candidates 0..6 in the header; 7 means "candidates - 7 follows"
_U64 = 1 << 64
_SCALE = 10000


class _NotCompact(Exception):
    """A value that the compact form cannot hold exactly (:func:`encode` stores JSON instead)."""


def _fixed(v: Any) -> bytes:
    """A float equal, bit for bit, to k / 10000 (0 <= k <= 10000, not -0.0) as uint16 k."""
    if type(v) is not float or not 0.0 <= v <= 1.0 or (not v and copysign(1.0, v) < 0.0):  # NaN fails too
        raise _NotCompact
    k = round(v * _SCALE)
    if k / _SCALE != v:
        raise _NotCompact
    return k.to_bytes(2, "little")


def _code(table: dict[str, int], v: Any) -> int:
    """The header bits of a known string value (type, method, direction)."""
    if type(v) is not str or (code := table.get(v)) is None:
        raise _NotCompact
    return code


def _count(v: Any) -> int:
    """An int that a varint holds (0 <= v < 2**64)."""
    if type(v) is not int or not 0 <= v < _U64:
        raise _NotCompact
    return v


def encode(stored: Any, article_id: str, root_id: str) -> bytes:
    """The bytes a record keeps for ``stored``: compact if it fits exactly, else orjson."""
    try:
        return _compact(stored, article_id, root_id)
    except _NotCompact:
        return orjson.dumps(stored)


def _compact(stored: Any, article_id: str, root_id: str) -> bytes:
    """The compact form of ``stored``, or :class:`_NotCompact`.

    The hot path (once per indexed article): the fields are unrolled and the common values are
    table lookups."""
    if type(stored) is not list:
        raise _NotCompact
    n = len(stored)
    if not 0 < n <= _N or stored[-1] is None:
        raise _NotCompact
    return _compact_fields(*(stored + _PAD[n] if n < _N else stored), article_id, root_id)


def encode_decision(decision: Decision, article_id: str, root_id: str) -> bytes:
    """``encode(decision.to_stored(), article_id, root_id)``, the same bytes, read from the
    decision's fields (no list of them built and unpacked: once per indexed article)."""
    d = decision
    try:
        return _compact_fields(d.type, d.duplicate_of, d.similarity, d.method, d.hamming_distance, d.containment,
                               d.matched_id, d.methods, d.candidates, d.direction, d.template_of, d.identity_overlap,
                               article_id, root_id)
    except _NotCompact:
        return orjson.dumps(d.to_stored())


def _duplicate_head(methods: tuple[str, ...], direction: int) -> int:
    """The header bits (:func:`_compact_fields`) of a duplicate's decision (``methods`` found, a
    direction code) but its candidates': type, duplicate_of (its root: the record's), similarity,
    method, hamming distance, containment, matched id, methods, candidates present, and its
    direction if it has one."""
    h = (_TYPE_CODE["duplicate-of"] | 0x2 | 0x4 | _METHOD_CODE[methods[0]] | 0x8 | 0x10 | 0x20 | 0x40
         | _MASK_OF[methods] | 0x80 | 0x100)
    name = _DIRECTION_OF_CODE[direction]
    return h if name is None else h | _DIRECTION_CODE[name] | 0x200


def _compact_fields(typ: Any, dup: Any, sim: Any, method: Any, ham: Any, cont: Any, matched: Any, methods: Any,
                    cand: Any, direction: Any, template: Any, overlap: Any, article_id: str, root_id: str) -> bytes:
    """:func:`_compact` of the values of ``_STORED_FIELDS`` (None: not stored)."""
    h = _code(_TYPE_CODE, typ)
    if methods is not None:  # first: a new article stops after it and candidates
        tm = type(methods)
        if tm is not tuple and tm is not list:
            raise _NotCompact
        try:
            mask = _MASK_OF.get(methods if tm is tuple else tuple(methods))
        except TypeError:  # an unhashable element
            mask = None
        if mask is None or any(type(m) is not str for m in methods):  # (equal to a method's name, not a str)
            raise _NotCompact
        h |= mask | 0x80
    if cand is not None:
        h |= min(_count(cand), _INLINE_CANDIDATES) << 21 | 0x100
    body = b""
    prev = None
    if dup is not None:
        body = _string(dup, article_id, root_id, None)
        prev = dup
        h |= 0x2
    if sim is not None:
        body += _fixed(sim)
        h |= 0x4
    if method is not None:
        h |= _code(_METHOD_CODE, method) | 0x8
    if ham is not None:
        body += _varint(_count(ham))
        h |= 0x10
    if cont is not None:
        body += _fixed(cont)
        h |= 0x20
    if matched is not None:
        body += _string(matched, article_id, root_id, prev)
        prev = matched
        h |= 0x40
    if cand is not None and cand >= _INLINE_CANDIDATES:
        body += _varint(cand - _INLINE_CANDIDATES)
    if direction is not None:
        h |= _code(_DIRECTION_CODE, direction) | 0x200
    if template is not None:
        body += _string(template, article_id, root_id, prev)
        h |= 0x400
    if overlap is not None:
        body += _fixed(overlap)
        h |= 0x800
    return (h << 8 | TAG).to_bytes(4, "little") + body


def decode(data: bytes, article_id: str, root_id: str) -> Any:
    """The stored decision back from :func:`encode`'s bytes, or from JSON (older records)."""
    if not data or data[0] != TAG:
        return orjson.loads(data)
    try:
        return _expand(data, article_id, root_id)
    except (IndexError, KeyError) as e:  # read past the end, an unknown code
        raise ValueError(f"corrupt stored decision {bytes(data)!r}: {e!r}") from None


def _varint(v: int) -> bytes:
    if v < 0x80:
        return _BYTE[v]
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _string(v: Any, article_id: str, root_id: str, prev: str | None) -> bytes:
    """A string as a reference to the article id, its root or ``prev``, else its UTF-8 bytes."""
    if type(v) is not str:
        raise _NotCompact
    if v == root_id:
        return b"\x01"
    if v == article_id:
        return b"\x00"
    if v == prev:
        return b"\x02"
    raw = v.encode("utf-8", "surrogatepass")
    return _varint(len(raw) + 3) + raw


def _expand(data: bytes, article_id: str, root_id: str) -> list[Any]:
    h = int.from_bytes(data[1:4], "little")
    if len(data) < 4 or (h >> 21 and not h & 0x100):
        raise ValueError(f"corrupt stored decision {bytes(data)!r}: bad header")
    present = (h >> 1) & 0x7FF
    out: list[Any] = [_TYPES[h & 1]] + [None] * present.bit_length()
    pos = 4
    prev = None
    if present & 0x1:
        prev, pos = _read_string(data, pos, article_id, root_id, None)
        out[1] = prev
    if present & 0x2:
        out[2], pos = _read_fixed(data, pos)
    if present & 0x4:
        out[3] = METHODS[(h >> 12) & 7]
    if present & 0x8:
        out[4], pos = _read_varint(data, pos)
    if present & 0x10:
        out[5], pos = _read_fixed(data, pos)
    if present & 0x20:
        prev, pos = _read_string(data, pos, article_id, root_id, prev)
        out[6] = prev
    if present & 0x40:
        out[7] = list(_METHODS_OF[(h >> 16) & 0x1F])
    if present & 0x80:
        c = h >> 21
        if c == _INLINE_CANDIDATES:
            c, pos = _read_varint(data, pos)
            c += _INLINE_CANDIDATES
        out[8] = c
    if present & 0x100:
        out[9] = _DIRECTIONS[(h >> 15) & 1]
    if present & 0x200:
        out[10], pos = _read_string(data, pos, article_id, root_id, prev)
    if present & 0x400:
        out[11], pos = _read_fixed(data, pos)
    if pos != len(data):
        raise ValueError(f"corrupt stored decision {bytes(data)!r}: {len(data) - pos} bytes left over")
    return out


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        b = data[pos]  # IndexError past the end
        pos += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            return v, pos
        shift += 7


def _read_fixed(data: bytes, pos: int) -> tuple[float, int]:
    k = data[pos] | data[pos + 1] << 8  # IndexError past the end
    if k > _SCALE:
        raise ValueError(f"corrupt stored decision {bytes(data)!r}: {k} / {_SCALE}")
    return k / _SCALE, pos + 2


def _read_string(data: bytes, pos: int, article_id: str, root_id: str, prev: str | None) -> tuple[str, int]:
    c = data[pos]  # IndexError past the end
    if c < 3:
        if c == 0:
            return article_id, pos + 1
        if c == 1:
            return root_id, pos + 1
        if prev is None:
            raise ValueError(f"corrupt stored decision {bytes(data)!r}: no string before")
        return prev, pos + 1
    c, pos = _read_varint(data, pos)
    end = pos + c - 3
    if end > len(data):
        raise ValueError(f"corrupt stored decision {bytes(data)!r}: truncated string")
    return data[pos:end].decode("utf-8", "surrogatepass"), end


#: the header bits of a verified duplicate's decision but its candidates', by its rule bits (1-15) and direction
#: code (0-2), for the compiled records (:func:`stream_dedup.record_kernel.pack_run`; row 0 unused)
VERIFIED_HEADS = np.array([[0] * len(_DIRECTION_OF_CODE)]
                          + [[_duplicate_head(_METHODS_OF_HITS[hits], d) for d in range(len(_DIRECTION_OF_CODE))]
                             for hits in range(1, 16)], dtype=np.int64)
#: the header bits of an exact duplicate's decision but its candidates' (:func:`stream_dedup.decision.exact_copy`)
EXACT_HEAD = _duplicate_head(("exact",), 0)
#: the header bits of a new article's decision without a look-alike but its candidates'
#: (``Decision(type="new", candidates=k)``: type, methods (none) and candidates present)
NEW_HEAD = _TYPE_CODE["new"] | _MASK_OF[()] | 0x80 | 0x100
