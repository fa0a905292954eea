"""LSH band buckets (and passage lists) in memory: open-addressing hash tables of member lists,
rebuilt from the index.

Banding LSH (:mod:`stream_dedup.lsh`) files every indexed article under one bucket per band. Kept
in RocksDB, that was 37 read-modify-write puts per article (each bucket value a list of members),
about 60 % of the bytes the index wrote and stored, and the writes, flushes and compactions that
made the rate fall as the index grew. The buckets are *derived* data: every one can be computed
again from the 16-bit signature rows each article record keeps (:func:`band_keys` on the record
bytes). So they live in memory, and :class:`BandTable` is loaded from the snapshot the index's last close
wrote, or rebuilt from the records (:mod:`stream_dedup.memory_lists`); RocksDB stays the one
durable copy.

Layout (numpy arrays, the operations are numba kernels):

* a bucket key is a ``uint64``: for ``r <= 3`` rows it is the band number (16 bits) and the rows
  (16 bits each) packed, so two signatures share a bucket iff the band agrees (no collision to
  reason about); for ``r > 3`` it is a 64-bit mix of them (a false collision, ~n/2^64 per lookup,
  only adds a candidate that verification then rejects);
* ``slot_keys[C]`` / ``slot_head[C]``: open addressing with linear probing, at most 80 % full and
  grown by half when it would be fuller (so 53-80 % full); a slot whose list became empty keeps its
  key until the next rehash;
* ``node_seq[N]`` / ``node_next[N]``: each bucket a singly linked list of article seqs, newest
  first, at most ``cap`` long (adding to a full bucket drops its oldest member, as the RocksDB
  lists did); freed nodes go to a free list.

Memory: 12 bytes a slot and 8 bytes a member (node arrays also grown by half): ~25-32 bytes per
band entry, ~1 KB per indexed article at 37 bands (:attr:`MemberLists.nbytes`; the
``stream_dedup_band_table_bytes`` gauge). Rebuilding reads every article record once (~13 s per
million articles); loading the snapshot reads one file of about the lists' size.

The posting lists of :mod:`stream_dedup.passages` (anchor -> the articles holding it, at most
``--passage-common-docs`` of them) are :class:`MemberLists` too, rebuilt from the anchors each
article's ``D`` key lists.
"""

from __future__ import annotations

import numpy as np

from .jit import inline, kernel

EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)  # a free slot (no key has it: see band_keys)
MAX_LOAD = 0.8   # slots used (live or emptied) at most; a rehash leaves the live ones at most 0.8 / GROWTH
GROWTH = 1.5
UNCAPPED = 2**31 - 1  # a cap no list reaches
_META = 5  # meta: slots used (live or emptied), node high-water mark, free-list head, members, live slots


@inline
def _slot_of(slot_keys, key):
    """The slot holding ``key``, or the free slot where it would go (linear probing from its home,
    the top 32 bits of a multiplicative hash scaled to the table's size: any size works)."""
    size = slot_keys.shape[0]
    h = np.int64((((key * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)) * np.uint64(size)) >> np.uint64(32))
    while slot_keys[h] != key and slot_keys[h] != EMPTY:
        h += 1
        if h == size:
            h = 0
    return h


@kernel
def band_keys(rows, bands, r):
    """uint64[n, bands]: the bucket key of every band of each row of ``rows`` (uint16[n, num_perm],
    the signatures' stored 16-bit values as raw bytes read natively: the same bytes give the same keys)."""
    n = rows.shape[0]
    out = np.empty((n, bands), dtype=np.uint64)
    for i in range(n):
        for b in range(bands):
            if r <= 3:
                k = np.uint64(b) << np.uint64(48)
                for j in range(r):
                    k |= np.uint64(rows[i, b * r + j]) << np.uint64(16 * (r - 1 - j))
            else:
                k = np.uint64(b) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(0x2545F4914F6CDD1D)
                for j in range(r):
                    k = (k ^ np.uint64(rows[i, b * r + j])) * np.uint64(0xFF51AFD7ED558CCD)
                    k ^= k >> np.uint64(29)
                if k == EMPTY:
                    k = EMPTY - np.uint64(1)
            out[i, b] = k
    return out


@kernel
def table_members(slot_keys, slot_head, node_seq, node_next, keys, ends):
    """The members of the buckets ``keys`` (uint64[m]), bucket after bucket, each newest first;
    ``ends[i]`` (int64[m]) is set to where bucket ``i``'s members end in the result."""
    m = keys.shape[0]
    heads = np.empty(m, dtype=np.int64)
    total = 0
    for i in range(m):
        h = _slot_of(slot_keys, keys[i])
        node = np.int64(slot_head[h]) if slot_keys[h] != EMPTY else np.int64(-1)
        heads[i] = node
        while node >= 0:
            total += 1
            node = node_next[node]
        ends[i] = total
    out = np.empty(total, dtype=np.uint32)
    c = 0
    for i in range(m):
        node = heads[i]
        while node >= 0:
            out[c] = node_seq[node]
            c += 1
            node = node_next[node]
    return out


@kernel
def table_add(slot_keys, slot_head, node_seq, node_next, meta, keys, seqs, cap):
    """File ``seqs[i]`` under the key ``keys[i]`` (uint64[m], uint32[m]), newest first; a list over
    ``cap`` members loses its oldest. The caller has made room (:meth:`MemberLists.reserve`)."""
    for i in range(keys.shape[0]):
        key = keys[i]
        h = _slot_of(slot_keys, key)
        if slot_keys[h] == EMPTY:
            slot_keys[h] = key
            slot_head[h] = -1
            meta[0] += 1
        if slot_head[h] < 0:
            meta[4] += 1
        node = meta[2]
        if node >= 0:
            meta[2] = node_next[node]
        else:
            node = meta[1]
            meta[1] += 1
        node_seq[node] = seqs[i]
        node_next[node] = slot_head[h]
        slot_head[h] = node
        meta[3] += 1
        count = 1
        while count < cap and node >= 0:  # the cap-th member, whose successors go
            node = node_next[node]
            count += 1
        if node >= 0:
            drop = np.int64(node_next[node])
            node_next[node] = -1
            while drop >= 0:
                after = np.int64(node_next[drop])
                node_next[drop] = meta[2]
                meta[2] = drop
                meta[3] -= 1
                drop = after


@kernel
def table_remove(slot_keys, slot_head, node_seq, node_next, meta, keys, seq):
    """Take article ``seq`` out of the buckets ``keys`` (uint64[m]); absent members are ignored."""
    for i in range(keys.shape[0]):
        h = _slot_of(slot_keys, keys[i])
        if slot_keys[h] == EMPTY:
            continue
        prev = np.int64(-1)
        node = np.int64(slot_head[h])
        while node >= 0 and node_seq[node] != seq:
            prev = node
            node = node_next[node]
        if node < 0:
            continue
        if prev < 0:
            slot_head[h] = node_next[node]
            if slot_head[h] < 0:
                meta[4] -= 1
        else:
            node_next[prev] = node_next[node]
        node_next[node] = meta[2]
        meta[2] = node
        meta[3] -= 1


@kernel
def table_rehash(slot_keys, slot_head, new_keys, new_head):
    """Move the non-empty buckets into the (larger or same-size, all-EMPTY) ``new_keys``/``new_head``;
    returns how many moved."""
    moved = 0
    for h in range(slot_keys.shape[0]):
        if slot_keys[h] != EMPTY and slot_head[h] >= 0:
            j = _slot_of(new_keys, slot_keys[h])
            new_keys[j] = slot_keys[h]
            new_head[j] = slot_head[h]
            moved += 1
    return moved


def list_sizes(ends: np.ndarray) -> np.ndarray:
    """The size of each list from where each ends (``ends`` of :meth:`MemberLists.lookup`)."""
    sizes = ends.copy()
    sizes[1:] -= ends[:-1]
    return sizes


class MemberLists:
    """Lists of uint32 members under uint64 keys, at most ``cap`` each (see the module doc). Single writer."""

    def __init__(self, cap: int, slots: int = 1 << 12, nodes: int = 1 << 12) -> None:
        self.cap = cap
        self.slot_keys = np.full(slots, EMPTY, dtype=np.uint64)
        self.slot_head = np.full(slots, -1, dtype=np.int32)
        self.node_seq = np.zeros(nodes, dtype=np.uint32)
        self.node_next = np.full(nodes, -1, dtype=np.int32)
        self.meta = np.zeros(_META, dtype=np.int64)
        self.meta[2] = -1

    @property
    def members(self) -> int:
        """Entries held (one per key and member)."""
        return int(self.meta[3])

    @property
    def nbytes(self) -> int:
        return self.slot_keys.nbytes + self.slot_head.nbytes + self.node_seq.nbytes + self.node_next.nbytes

    def lookup(self, keys: np.ndarray, ends: np.ndarray | None = None) -> np.ndarray:
        """uint32 members of the lists ``keys`` (uint64[m]), list after list, newest first
        (a member of several lists appears once for each); ``ends`` (int64[m]), if given, gets
        where each list's members end."""
        if ends is None:
            ends = np.empty(keys.shape[0], dtype=np.int64)
        return table_members(self.slot_keys, self.slot_head, self.node_seq, self.node_next, keys, ends)

    def add_entries(self, keys: np.ndarray, seqs: np.ndarray) -> None:
        """File ``seqs[i]`` (uint32[m]) under ``keys[i]`` (uint64[m]), in order."""
        if keys.shape[0]:
            self.reserve(keys.shape[0])
            table_add(self.slot_keys, self.slot_head, self.node_seq, self.node_next, self.meta, keys, seqs, self.cap)

    def file(self, pairs: list[tuple[np.ndarray, int]]) -> None:
        """File each ``(keys, seq)`` in order: ``seq`` under every key of ``keys`` (uint64)."""
        if pairs:  # (one np.repeat for the seqs: a np.full per pair cost ~1 us each)
            self.add_entries(np.concatenate([keys for keys, _ in pairs]),
                             np.repeat(np.array([seq for _, seq in pairs], dtype=np.uint32),
                                       [keys.shape[0] for keys, _ in pairs]))

    def remove(self, keys: np.ndarray, seq: int) -> None:
        """Take ``seq`` out of the lists ``keys`` (uint64[m])."""
        if keys.shape[0]:
            table_remove(self.slot_keys, self.slot_head, self.node_seq, self.node_next, self.meta, keys, seq)

    def as_dict(self) -> dict[int, list[int]]:
        """Every non-empty list (for tests and inspection; O(size))."""
        live = np.flatnonzero((self.slot_keys != EMPTY) & (self.slot_head >= 0))
        keys = self.slot_keys[live]
        ends = np.empty(keys.shape[0], dtype=np.int64)
        members = self.lookup(keys, ends).tolist()
        starts = [0, *ends.tolist()][:keys.shape[0]]
        return {k: members[a:b] for k, a, b in zip(keys.tolist(), starts, ends.tolist(), strict=True)}

    def reserve(self, entries: int) -> None:
        """Room for ``entries`` more entries: more nodes, and slots kept at most :data:`MAX_LOAD` used."""
        meta = self.meta
        if meta[1] + entries > self.node_seq.shape[0]:
            n = self.node_seq.shape[0]
            while meta[1] + entries > n:
                n = int(n * GROWTH) + 1
            seq, nxt = np.zeros(n, dtype=np.uint32), np.full(n, -1, dtype=np.int32)
            seq[:meta[1]], nxt[:meta[1]] = self.node_seq[:meta[1]], self.node_next[:meta[1]]
            self.node_seq, self.node_next = seq, nxt
        size = self.slot_keys.shape[0]
        if meta[0] + entries > MAX_LOAD * size:
            while meta[4] + entries > MAX_LOAD * size / GROWTH:  # the same size if emptied lists made the load
                size = int(size * GROWTH) + 1
            keys, head = np.full(size, EMPTY, dtype=np.uint64), np.full(size, -1, dtype=np.int32)
            meta[0] = meta[4] = table_rehash(self.slot_keys, self.slot_head, keys, head)
            self.slot_keys, self.slot_head = keys, head


class BandTable(MemberLists):
    """The LSH buckets of an index: a list of article seqs per bucket key, the newest ``cap`` kept."""

    def __init__(self, bands: int, rows: int, cap: int, slots: int = 1 << 12, nodes: int = 1 << 12) -> None:
        super().__init__(cap, slots, nodes)
        self.bands, self.rows = bands, rows

    def keys(self, rows: np.ndarray) -> np.ndarray:
        """uint64[n, bands] bucket keys of 16-bit signatures (``[n, num_perm]``, or one signature: then
        ``uint64[bands]``). The kernel reads the big-endian bytes the records keep (no copy for ``>u2``)."""
        one = rows.ndim == 1
        be = rows.astype(">u2", copy=False)
        raw = np.ascontiguousarray(be.view(np.uint16).reshape(1 if one else rows.shape[0], -1))
        out = band_keys(raw, self.bands, self.rows)
        return out[0] if one else out

    def add(self, keys: np.ndarray, seqs: np.ndarray) -> None:
        """File ``seqs[i]`` (uint32[n]) under each of ``keys[i]`` (uint64[n, bands]), in order."""
        if keys.shape[0]:
            self.add_entries(keys.ravel(), np.repeat(seqs, keys.shape[1]))
