"""The article record of the index (``A`` keys of the ``points`` family): layout and codec.

A record packs, big-endian: first-seen time (f64), SimHash (u64), set size (u32), flags (u8), the
exact hash (16 bytes), the MinHash signature as the index keeps it (the low ``SIGNATURE_BITS`` = 16
bits of each row, :func:`stored_signature`), the UTF-8 lengths of the article id and its cluster
root id (0 if the root is the article itself: ids are never empty), the length of the identity
sketch and the number of passage anchors of the article (:mod:`stream_dedup.passages`, capped at
65,535) (u16 each), the length of the content-word bitmap (u8), both ids (the root only if it
differs), the identity sketch (uint32 BE, :mod:`stream_dedup.identity`), the content-word bitmap
(:mod:`stream_dedup.rewrite`: 64 bytes, none for exact duplicates and empty texts), and the decision
first returned for the article (:mod:`stream_dedup.stored_decision`: a few bytes, else JSON).

Records of older versions (an explicit root id equal to the article id, the decision as JSON) read
the same.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from . import stored_decision

__all__ = ["FLAG_INDEXED", "NO_IDENTITY", "SIGNATURE_BITS", "StoredArticle", "record_exact", "record_id_bytes", "stored_signature"]

_RECORD = struct.Struct(">dQIB16s")  # first_seen, simhash, n_shingles, flags, exact
_LENGTHS = struct.Struct(">HHHHB")   # UTF-8 lengths of the ids, identity sketch length, passage anchors, words
FLAG_INDEXED = 1  # the record has B/S/X entries (exact duplicates and empty texts do not)
SIGNATURE_BITS = 16     # bits kept of each MinHash row in the index (b-bit minwise hashing)
_SIG_DTYPE = np.dtype(">u2")


@dataclass(frozen=True)
class StoredArticle:
    seq: int
    article_id: str
    root_id: str
    first_seen: float
    simhash: int
    n_shingles: int
    exact: bytes
    indexed: bool
    minhash: np.ndarray
    decision_json: bytes  # the stored decision: compact (stored_decision) or JSON (older records, dicts)

    @property
    def decision(self) -> dict | list:
        """The decision first returned for this article (parsed on demand: only replays need it)."""
        return stored_decision.decode(self.decision_json, self.article_id, self.root_id)


NO_IDENTITY = np.zeros(0, dtype=np.uint32)


def _pack_record(first_seen: float, simhash: int, n_shingles: int, indexed: bool, exact: bytes,
                 minhash: np.ndarray, article_id: str, root_id: str, decision: dict | list | bytes,
                 identity: np.ndarray = NO_IDENTITY, anchors: int = 0, words: bytes = b"") -> bytes:
    aid = article_id.encode("utf-8", "surrogatepass")
    if root_id == article_id:
        rid = b""  # length 0: the article is its own root (a new article)
    else:
        rid = root_id.encode("utf-8", "surrogatepass")
        if not rid:
            raise ValueError(f"article {article_id!r}: an empty cluster root id cannot be stored")
    # (bytes: already encoded, stored_decision.encode_decision; JSON for a dict)
    stored = decision if type(decision) is bytes else stored_decision.encode(decision, article_id, root_id)
    return _pack_parts(first_seen, simhash, n_shingles, indexed, exact, stored_signature(minhash).tobytes(), aid, rid,
                       identity.astype(">u4", copy=False).tobytes(), anchors, words, stored)


def _pack_parts(first_seen: float, simhash: int, n_shingles: int, indexed: bool, exact: bytes, signature: bytes,
                aid: bytes, rid: bytes, identity: bytes, anchors: int, words: bytes, stored: bytes) -> bytes:
    """:func:`_pack_record` from its parts as bytes: the stored signature's and the identity
    sketch's (big-endian, as the record keeps them), the ids' UTF-8 (``rid`` empty: the article is
    its own root) and the stored decision (a batch makes the arrays' bytes once for all its articles)."""
    return b"".join((_RECORD.pack(first_seen, simhash, n_shingles, FLAG_INDEXED if indexed else 0, exact), signature,
                     _LENGTHS.pack(len(aid), len(rid), len(identity) >> 2, min(anchors, 0xFFFF), len(words)), aid, rid,
                     identity, words, stored))


def _record_ids(value: bytes | memoryview, num_perm: int) -> tuple[str, str, int]:
    """(article id, cluster root id, offset of the stored decision) of a packed record."""
    pos = _RECORD.size + _SIG_DTYPE.itemsize * num_perm
    id_len, root_len, k, _, w = _LENGTHS.unpack_from(value, pos)
    pos += _LENGTHS.size
    end = pos + id_len + root_len
    # (str(): a record's bytes, or a memoryview of where the record store holds it)
    article_id = str(value[pos:pos + id_len], "utf-8", "surrogatepass")
    # root length 0: the article is its own root (older records spell the id out again)
    root_id = str(value[pos + id_len:end], "utf-8", "surrogatepass") if root_len else article_id
    return article_id, root_id, end + 4 * k + w


def record_id_bytes(value: bytes | memoryview, num_perm: int) -> bytes:
    """The article id of a packed record, as its UTF-8."""
    pos = _RECORD.size + _SIG_DTYPE.itemsize * num_perm
    id_len = _LENGTHS.unpack_from(value, pos)[0]
    pos += _LENGTHS.size
    return bytes(value[pos:pos + id_len])


def record_exact(value: bytes | memoryview) -> bytes:
    """The 16-byte exact hash of a packed record."""
    return bytes(value[_RECORD.size - 16:_RECORD.size])


def _record_identity(value: bytes, num_perm: int) -> np.ndarray:
    """The identity sketch (sorted uint32) of a packed record."""
    pos = _RECORD.size + _SIG_DTYPE.itemsize * num_perm
    id_len, root_len, k, _, _ = _LENGTHS.unpack_from(value, pos)
    start = pos + _LENGTHS.size + id_len + root_len
    return np.frombuffer(value, dtype=">u4", count=k, offset=start).astype(np.uint32)


def _record_words(value: bytes, num_perm: int) -> bytes:
    """The content-word bitmap of a packed record (empty if it has none)."""
    pos = _RECORD.size + _SIG_DTYPE.itemsize * num_perm
    id_len, root_len, k, _, w = _LENGTHS.unpack_from(value, pos)
    start = pos + _LENGTHS.size + id_len + root_len + 4 * k
    return value[start:start + w]


def _record_anchors(value: bytes, num_perm: int) -> int:
    """The number of passage anchors of the article of a packed record."""
    return _LENGTHS.unpack_from(value, _RECORD.size + _SIG_DTYPE.itemsize * num_perm)[3]


def _unpack_record(seq: int, value: bytes, num_perm: int) -> StoredArticle:
    first_seen, simhash, n, flags, exact = _RECORD.unpack_from(value)
    sig = np.frombuffer(value, dtype=_SIG_DTYPE, count=num_perm, offset=_RECORD.size).copy()
    article_id, root_id, decision_at = _record_ids(value, num_perm)
    return StoredArticle(seq, article_id, root_id, first_seen, simhash, n, exact,
                         bool(flags & FLAG_INDEXED), sig, value[decision_at:])


def stored_signature(minhash: np.ndarray) -> np.ndarray:
    """The signature as the index keeps it: the low 16 bits of each row, big-endian (no copy if it is).

    Li & Koenig's b-bit minwise hashing: two rows agree by accident with probability 2^-b when
    their minima differ, so the Jaccard estimate is corrected (:func:`stream_dedup.minhash.bbit_jaccard`);
    at b = 16 that is 1.5e-5, and the stored signature takes 256 bytes instead of 512. LSH bucket
    keys are made of these rows too, so an evicted article's buckets can be found from its record.
    """
    return minhash if minhash.dtype == _SIG_DTYPE else minhash.astype(_SIG_DTYPE)
