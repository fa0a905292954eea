"""The permuted SimHash tables (:class:`~stream_dedup.simhash.PermutedTables`) in memory.

Each indexed article has one entry per table: its SimHash permuted for that table, and its seq. A
probe in table ``t`` wants every entry of ``t`` whose permuted value agrees with the query's on the
table's key bits (its first ``key_bits(t)`` bits, 25 or more), then keeps those within the
Hamming distance ``k`` of the query. In RocksDB these were 10 keys of 17 bytes per article (at the
default 3-of-5 blocks), about 160 bytes per article on disk, and a seek per table per probe.
Like the LSH buckets they are *derived* data: every entry is computed again from the SimHash that
each article record keeps. So they live here, rebuilt from the records or loaded from the
snapshot of the index's last close (:mod:`stream_dedup.memory_lists`); RocksDB keeps the one
durable copy.

Layout: one open-addressing table with linear probing for all tables' entries, three parallel
arrays per slot: ``fps`` (uint64, the permuted SimHash), ``tags`` (uint8: 0 a free slot, 255 a
removed entry, else the table number + 1) and ``seqs`` (uint32). An entry's home slot is a hash of
its table and its key bits, so every entry of one key is in the run of occupied slots that starts
at that home: a probe walks the run (removed entries included) until a free slot, and checks table,
key bits and distance of each entry it passes. Entries are never moved but by a rehash, which
drops the removed ones; the table is at most 70 % full (free + removed slots counted as used) and
grows by half. 13 bytes a slot at 47-70 % load: ~19-28 bytes per entry, ~190-280 bytes per
indexed article at 10 tables (:attr:`SimhashTable.nbytes`; the ``stream_dedup_simhash_table_bytes``
gauge). Many copies of one story share its SimHash: their entries fill one run, and a probe for
it walks them all, as the RocksDB seek did (no cap: a fingerprint within ``k`` bits is never missed).
"""

from __future__ import annotations

import numpy as np

from .jit import inline, kernel

FREE = 0
REMOVED = 255
MAX_TABLES = 254  # tags 1..254
MAX_LOAD = 0.7
GROWTH = 1.5
_META = 2  # slots used (live or removed), live entries


@inline
def _home(key, table, size):
    """The first slot of the run of (``table``, ``key`` bits): a multiplicative hash scaled to ``size``."""
    h = (key ^ (np.uint64(table) * np.uint64(0xD6E8FEB86659FD93))) * np.uint64(0x9E3779B97F4A7C15)
    return np.int64(((h >> np.uint64(32)) * np.uint64(size)) >> np.uint64(32))


@inline
def _popcount(x):
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return (x * np.uint64(0x0101010101010101)) >> np.uint64(56)


@inline
def _open_slot(tags, h):
    """The first free or removed slot from ``h`` on (linear probing, wrapping around)."""
    size = tags.shape[0]
    while tags[h] != 0 and tags[h] != 255:
        h += 1
        if h == size:
            h = 0
    return h


@kernel
def simhash_add(fps, tags, seqs, meta, permuted, masks, numbers):
    """File article ``numbers[i]`` (uint32[n]) in every table: ``permuted[i, t]`` (uint64[n, T])
    under table ``t``, keyed by ``permuted[i, t] & masks[t]``. The caller has made room
    (:meth:`SimhashTable.reserve`)."""
    size = fps.shape[0]
    for i in range(permuted.shape[0]):
        for t in range(permuted.shape[1]):
            h = _open_slot(tags, _home(permuted[i, t] & masks[t], t, size))
            if tags[h] == 0:
                meta[0] += 1
            fps[h] = permuted[i, t]
            tags[h] = t + 1
            seqs[h] = numbers[i]
            meta[1] += 1


@kernel
def simhash_probe(fps, tags, seqs, queries, masks, max_distance):
    """uint32 seqs of the entries within ``max_distance`` bits of ``queries[t]`` in table ``t`` that
    agree with it on the key bits ``masks[t]`` (an article found in several tables is listed once
    per table)."""
    size = fps.shape[0]
    found = 0
    out = np.empty(16, dtype=np.uint32)
    for t in range(queries.shape[0]):
        q = queries[t]
        want = q & masks[t]
        h = _home(want, t, size)
        while tags[h] != 0:
            if tags[h] == t + 1 and fps[h] & masks[t] == want and _popcount(fps[h] ^ q) <= max_distance:
                if found == out.shape[0]:
                    grown = np.empty(found * 2, dtype=np.uint32)
                    grown[:found] = out
                    out = grown
                out[found] = seqs[h]
                found += 1
            h += 1
            if h == size:
                h = 0
    return out[:found]


@kernel
def simhash_remove(fps, tags, seqs, meta, permuted, masks, seq):
    """Take article ``seq`` (filed with ``permuted``) out of every table; an absent entry is ignored."""
    size = fps.shape[0]
    for t in range(permuted.shape[0]):
        h = _home(permuted[t] & masks[t], t, size)
        while tags[h] != 0:
            if tags[h] == t + 1 and seqs[h] == seq and fps[h] == permuted[t]:
                tags[h] = 255
                meta[1] -= 1
                break
            h += 1
            if h == size:
                h = 0


@kernel
def simhash_rehash(fps, tags, seqs, masks, new_fps, new_tags, new_seqs):
    """Move the live entries into the (all-free) new arrays, in slot order; returns how many moved."""
    size = new_fps.shape[0]
    moved = 0
    for i in range(fps.shape[0]):
        tag = tags[i]
        if tag == 0 or tag == 255:
            continue
        h = _open_slot(new_tags, _home(fps[i] & masks[tag - 1], tag - 1, size))  # (none removed there)
        new_fps[h] = fps[i]
        new_tags[h] = tag
        new_seqs[h] = seqs[i]
        moved += 1
    return moved


class SimhashTable:
    """Every permuted table's entries (see the module doc). Single writer."""

    ARRAYS = ("fps", "tags", "seqs", "meta")  # what a snapshot keeps

    def __init__(self, masks: list[int], slots: int = 1 << 12) -> None:
        if len(masks) > MAX_TABLES:
            raise ValueError(f"at most {MAX_TABLES} SimHash tables")
        self.masks = np.array(masks, dtype=np.uint64)
        self.fps = np.zeros(slots, dtype=np.uint64)
        self.tags = np.zeros(slots, dtype=np.uint8)
        self.seqs = np.zeros(slots, dtype=np.uint32)
        self.meta = np.zeros(_META, dtype=np.int64)

    @property
    def entries(self) -> int:
        """Entries held (one per table and indexed article)."""
        return int(self.meta[1])

    @property
    def nbytes(self) -> int:
        return self.fps.nbytes + self.tags.nbytes + self.seqs.nbytes

    def loaded(self) -> None:
        """Called once the arrays are set from a snapshot."""

    def settle(self) -> None:
        """Finish any growth under way (before a snapshot)."""

    def add(self, permuted: np.ndarray, seq: int) -> None:
        """File article ``seq`` with its SimHash permuted for each table (uint64[T])."""
        self.add_many(permuted.reshape(1, -1), np.array([seq], dtype=np.uint32))

    def add_many(self, permuted: np.ndarray, seqs: np.ndarray) -> None:
        """File articles ``seqs`` (uint32[n]) with their SimHash permuted for each table (uint64[n, T]), in order."""
        if permuted.size:
            self.reserve(permuted.size)
            simhash_add(self.fps, self.tags, self.seqs, self.meta, np.ascontiguousarray(permuted, dtype=np.uint64),
                        self.masks, seqs)

    def probe(self, queries: np.ndarray, max_distance: int) -> np.ndarray:
        """uint32 seqs within ``max_distance`` bits of the query (permuted for each table, uint64[T]),
        found by the tables' key bits; an article may be listed more than once."""
        return simhash_probe(self.fps, self.tags, self.seqs, queries, self.masks, max_distance)

    def remove(self, permuted: np.ndarray, seq: int) -> None:
        simhash_remove(self.fps, self.tags, self.seqs, self.meta, permuted, self.masks, seq)

    def reserve(self, entries: int) -> None:
        """Room for ``entries`` more entries: the table kept at most :data:`MAX_LOAD` used."""
        size = self.fps.shape[0]
        if self.meta[0] + entries <= MAX_LOAD * size:
            return
        while self.meta[1] + entries > MAX_LOAD * size / GROWTH:  # the same size if removals made the load
            size = int(size * GROWTH) + 1
        fps, tags, seqs = np.zeros(size, dtype=np.uint64), np.zeros(size, dtype=np.uint8), np.zeros(size, dtype=np.uint32)
        self.meta[0] = self.meta[1] = simhash_rehash(self.fps, self.tags, self.seqs, self.masks, fps, tags, seqs)
        self.fps, self.tags, self.seqs = fps, tags, seqs

    def as_set(self) -> set[tuple[int, int, int]]:
        """Every live entry as ``(table, permuted, seq)`` (for tests; O(size))."""
        live = np.flatnonzero((self.tags != FREE) & (self.tags != REMOVED))
        return set(zip((self.tags[live] - 1).tolist(), self.fps[live].tolist(), self.seqs[live].tolist(), strict=True))
