"""The index's two key tables in memory: article id -> seq, and exact hash -> seq.

Every article's id is looked up when it arrives (a known id is a replay: its stored decision is
returned again), and every new article's exact hash (the 128-bit hash of its normalised text: an
indexed article with the same one makes it an exact copy). Until format 10 these were RocksDB
keys, ``I`` + id hash + id and ``X`` + exact hash, read with a multi-get per batch and written
with each article: ~2 µs a record of multi-gets and ~0.5 µs of memtable inserts on the deciding
thread, and ~60 % of what RocksDB's flush thread sorted (~4-5 µs a record), then compacted again
and again (README, *Not done yet* before format 11). Like the LSH buckets they are now derived
from the article records (each record holds its id and exact hash) and kept in memory:
:class:`~stream_dedup.list_table.MemberLists` with a cap of one member, the member held in its
slot (12 bytes a slot, 40-80 % full: ~15-30 bytes an article each), rebuilt or loaded from the
lists' snapshot when an index opens (:mod:`stream_dedup.memory_lists`,
:mod:`stream_dedup.lists_snapshot`).

Keys are 64 bits: the id's is its 64-bit mmh3 (the hash the ``I`` key held), the exact hash's its
two halves XORed (any of its bits changes the key). Two different ids (or texts) with the same key are possible (about once in 2^64 /
n lookups against n articles: ~10^13 at a million), so a hit is never taken on trust: the
caller checks it against the record it names (:meth:`Index.seq_of
<stream_dedup.index.Index.seq_of>`, :meth:`BatchView.seqs_of
<stream_dedup.batch.BatchView.seqs_of>`), whose id and exact hash are stored in full. A key's
one member is its newest article's: an id is indexed again only after its article was removed,
an exact hash only after its indexed article was (else the article is a replay, or an exact
copy, not indexed). On a collision the newer article takes the key: the older one is then found
by its near-duplicate sketches only (the exact copy of it is still called a duplicate, with
similarity 1.0), and a replay of the older id decides again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import mmh3
import numpy as np

from .list_table import EMPTY, MemberLists

__all__ = ["ID_SEED", "KeyTable", "exact_key", "exact_keys", "id_key", "id_keys", "raw_id_keys"]

ID_SEED = 0x1D5EED  # the seed of the ids' mmh3 (the ``I`` keys' up to format 10)
_NO_SEQS = np.zeros(0, dtype=np.int64)


def id_key(article_id: str) -> int:
    """The key of an article id: the 64-bit mmh3 of its UTF-8."""
    return int(id_keys([article_id])[0])


def id_keys(ids: Sequence[str]) -> np.ndarray:
    """:func:`id_key` of each of ``ids`` (uint64)."""
    return raw_id_keys([i.encode("utf-8", "surrogatepass") for i in ids])


def raw_id_keys(raws: Sequence[bytes]) -> np.ndarray:
    """:func:`id_key` of ids given as their UTF-8 (uint64)."""
    hash64, seed = mmh3.hash64, ID_SEED
    keys = np.array([hash64(raw, seed, signed=False)[0] for raw in raws], dtype=np.uint64)
    keys[keys == EMPTY] = EMPTY - np.uint64(1)
    return keys


def exact_key(exact: bytes) -> int:
    """The key of a 16-byte exact hash: its two 8-byte halves (big-endian) XORed."""
    return int(exact_keys([exact])[0])


def exact_keys(exacts: Sequence[bytes] | np.ndarray) -> np.ndarray:
    """:func:`exact_key` of each of ``exacts`` (a list of 16-byte strings, or the ``V16`` field of
    record heads), uint64."""
    raw = b"".join(exacts) if isinstance(exacts, list) else np.ascontiguousarray(exacts).tobytes()
    halves = np.frombuffer(raw, dtype=">u8").astype(np.uint64)
    keys = halves[::2] ^ halves[1::2]
    keys[keys == EMPTY] = EMPTY - np.uint64(1)
    return keys


class KeyTable(MemberLists):
    """A key -> seq table: :class:`~stream_dedup.list_table.MemberLists` of one member each (a new
    member replaces the one held)."""

    def __init__(self, slots: int = 1 << 12, nodes: int = 1 << 6) -> None:
        super().__init__(1, slots, nodes)

    def seqs(self, keys: np.ndarray) -> np.ndarray:
        """The seq held under each of ``keys`` (uint64[m]), -1 where none (int64[m])."""
        m = keys.shape[0]
        if not m:
            return _NO_SEQS
        ends = np.empty(m, dtype=np.int64)
        members = self.lookup(keys, ends)
        out = np.full(m, -1, dtype=np.int64)
        if members.shape[0]:
            held = np.diff(ends, prepend=0) > 0
            out[held] = members
        return out

    def checked(self, keys: np.ndarray, records: Callable[[list[int]], list[bytes | None]],
                same: Callable[[int, bytes], bool]) -> list[int | None]:
        """The seq held under each of ``keys``, or None: a hit is kept only if ``same(i, record)``
        holds for the record ``records([seq])`` gives (a 64-bit key may be another id's or text's)."""
        seqs = self.seqs(keys)
        out: list[int | None] = [None] * seqs.shape[0]
        if not seqs.shape[0] or seqs.max() < 0:  # (most batches: no replay, no exact copy)
            return out
        hits = np.flatnonzero(seqs >= 0).tolist()
        found = seqs[hits].tolist()
        for i, seq, record in zip(hits, found, records(found), strict=True):
            if record is not None and same(i, record):
                out[i] = seq
        return out
