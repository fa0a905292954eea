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
key bits and distance of each entry it passes. Entries are never moved but by a growth (incremental:
:meth:`SimhashTable.reserve`; probes walk the draining table's runs too meanwhile), which
drops the removed ones; the table is at most 70 % full (free + removed slots counted as used) and
doubles. 13 bytes a slot at 35-70 % load: ~19-37 bytes per entry, ~190-370 bytes per
indexed article at 10 tables (:attr:`SimhashTable.nbytes`; the ``stream_dedup_simhash_table_bytes``
gauge). Many copies of one story share its SimHash: their entries fill one run, and a probe for
it walks them all, as the RocksDB seek did (no cap: a fingerprint within ``k`` bits is never missed).
"""

from __future__ import annotations

import numpy as np

from . import page_memory
from .jit import compiling, inline, kernel, trusted
from .kernels import popcount
from .list_table import grown_size

if compiling():
    from .addresses import prefetch
    from .kernels import distinct_union
    from .list_table import table_add, table_members
from .next_arrays import NextArrays, headroom

FREE = 0
REMOVED = 255
MAX_TABLES = 254  # tags 1..254
MAX_LOAD = 0.7
PREPARE_LOAD = 0.62  # past this, the next table is allocated and initialised a chunk per add (see reserve)
#: the table doubles (until 2310931 the one-go rehash grew it 2.25x in effect, by a boundary case: a live
#: load of exactly 0.7 / 1.5 counted as too full)
GROWTH = 2.0
_META = 3  # slots used (live or removed) in the table, live entries (in both tables), the migration cursor
#: growth work done per add at least (below these sizes a growth is done at once, as one rehash)
MIN_MIGRATE = 1 << 14
MIGRATE_PER_ENTRY = 4  # (8 before: halved as the list tables', to spread a migration over more adds)
#: the next arrays of a growth (:class:`NextArrays`: dtype and initial value of each): fingerprints, tags, seqs
_NEXT_ARRAYS = ((np.uint64, 0), (np.uint8, FREE), (np.uint32, 0))
_NO_FPS = np.zeros(0, dtype=np.uint64)
_NO_TAGS = np.zeros(0, dtype=np.uint8)
_NO_SEQS = np.zeros(0, dtype=np.uint32)


@inline
def _home(key, table, size):
    """The first slot of the run of (``table``, ``key`` bits): a multiplicative hash scaled to ``size``."""
    h = (key ^ (np.uint64(table) * np.uint64(0xD6E8FEB86659FD93))) * np.uint64(0x9E3779B97F4A7C15)
    return np.int64(((h >> np.uint64(32)) * np.uint64(size)) >> np.uint64(32))


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


@inline
def _probe_run(fps, tags, seqs, t, q, want, mask, max_distance, out, found):
    size = fps.shape[0]
    h = _home(want, t, size)
    while tags[h] != 0:
        if tags[h] == t + 1 and fps[h] & mask == want and popcount(fps[h] ^ q) <= max_distance:
            if found == out.shape[0]:
                grown = np.empty(found * 2, dtype=np.uint32)
                grown[:found] = out
                out = grown
            out[found] = seqs[h]
            found += 1
        h += 1
        if h == size:
            h = 0
    return out, found


@inline
def prefetch_runs(fps, tags, old_fps, old_tags, queries, masks):
    """Start loading the first slot of ``queries[t]``'s run in every table ``t`` (and in the draining
    table while the table grows): a hint, nothing is read (see :func:`simhash_probe`)."""
    size, old_size = fps.shape[0], old_tags.shape[0]
    for t in range(queries.shape[0]):  # every table's first slot loading at once (see list_table.table_members)
        want = queries[t] & masks[t]
        h = _home(want, t, size)
        prefetch(tags, h)
        prefetch(fps, h)
        if old_size:
            h = _home(want, t, old_size)
            prefetch(old_tags, h)
            prefetch(old_fps, h)


@kernel
def simhash_probe(fps, tags, seqs, old_fps, old_tags, old_seqs, queries, masks, max_distance):
    """uint32 seqs of the entries within ``max_distance`` bits of ``queries[t]`` in table ``t`` that
    agree with it on the key bits ``masks[t]`` (an article found in several tables is listed once
    per table); in the draining table too while the table grows."""
    found = 0
    out = np.empty(16, dtype=np.uint32)
    prefetch_runs(fps, tags, old_fps, old_tags, queries, masks)
    for t in range(queries.shape[0]):
        q = queries[t]
        want = q & masks[t]
        out, found = _probe_run(fps, tags, seqs, t, q, want, masks[t], max_distance, out, found)
        if old_tags.shape[0]:
            out, found = _probe_run(old_fps, old_tags, old_seqs, t, q, want, masks[t], max_distance, out, found)
    return out[:found]


@inline
def _remove_one(fps, tags, seqs, t, value, mask, seq):
    size = fps.shape[0]
    h = _home(value & mask, t, size)
    while tags[h] != 0:
        if tags[h] == t + 1 and seqs[h] == seq and fps[h] == value:
            tags[h] = 255
            return True
        h += 1
        if h == size:
            h = 0
    return False


@kernel
def simhash_remove(fps, tags, seqs, old_fps, old_tags, old_seqs, meta, permuted, masks, seq):
    """Take article ``seq`` (filed with ``permuted``) out of every table; an absent entry is ignored."""
    for t in range(permuted.shape[0]):
        if _remove_one(fps, tags, seqs, t, permuted[t], masks[t], seq) or \
                (old_tags.shape[0] > 0 and _remove_one(old_fps, old_tags, old_seqs, t, permuted[t], masks[t], seq)):
            meta[1] -= 1


@kernel
def simhash_migrate(fps, tags, seqs, old_fps, old_tags, old_seqs, masks, meta, steps):
    """Move the live entries of the next ``steps`` slots of the draining table (from the cursor
    ``meta[2]``) into the table, leaving removed marks behind (the runs there stay walkable);
    returns whether the draining table is empty now."""
    size = fps.shape[0]
    end = min(old_tags.shape[0], meta[2] + steps)
    for i in range(meta[2], end):
        tag = old_tags[i]
        if tag == 0 or tag == 255:
            continue
        h = _open_slot(tags, _home(old_fps[i] & masks[tag - 1], tag - 1, size))
        if tags[h] == 0:
            meta[0] += 1
        fps[h] = old_fps[i]
        tags[h] = tag
        seqs[h] = old_seqs[i]
        old_tags[i] = 255
    meta[2] = end
    return end >= old_tags.shape[0]


class SimhashTable:
    """Every permuted table's entries (see the module doc). Single writer."""

    ARRAYS = ("fps", "tags", "seqs", "meta")  # what a snapshot keeps

    def __init__(self, masks: list[int], slots: int = 1 << 12) -> None:
        if len(masks) > MAX_TABLES:
            raise ValueError(f"at most {MAX_TABLES} SimHash tables")
        self.masks = np.array(masks, dtype=np.uint64)
        self.fps = page_memory.zeros(slots, np.uint64)
        self.tags = page_memory.zeros(slots, np.uint8)
        self.seqs = page_memory.zeros(slots, np.uint32)
        self.meta = np.zeros(_META, dtype=np.int64)
        self.loaded()

    def loaded(self) -> None:
        """No growth under way (a new table, or its arrays just set from a snapshot)."""
        self._room = 0  # entries that may be added before reserve must look again (see reserve)
        self.old_fps, self.old_tags, self.old_seqs = _NO_FPS, _NO_TAGS, _NO_SEQS
        self._next: NextArrays | None = None  # the next table's arrays while they are initialised
        if self.meta.shape[0] < _META:  # a snapshot of the format before incremental growth
            self.meta = np.concatenate([self.meta, np.zeros(_META - self.meta.shape[0], dtype=np.int64)])
        self.meta[2] = 0

    def settle(self) -> None:
        """Finish any growth under way (before a snapshot: it keeps one table)."""
        self._room = 0
        self._migrate(self.old_tags.shape[0])
        if self._next is not None:
            self._next.cancel()  # (its next growth prepares another)
        self._next = None

    @property
    def entries(self) -> int:
        """Entries held (one per table and indexed article)."""
        return int(self.meta[1])

    @property
    def nbytes(self) -> int:
        arrays = (self.fps, self.tags, self.seqs, self.old_fps, self.old_tags, self.old_seqs)
        # (the next table's pages are resident as far as it is initialised)
        return sum(a.nbytes for a in arrays) + (self._next.nbytes if self._next is not None else 0)

    def add(self, permuted: np.ndarray, seq: int) -> None:
        """File article ``seq`` with its SimHash permuted for each table (uint64[T])."""
        self.add_many(permuted.reshape(1, -1), np.array([seq], dtype=np.uint32))

    def add_many(self, permuted: np.ndarray, seqs: np.ndarray) -> None:
        """File articles ``seqs`` (uint32[n]) with their SimHash permuted for each table (uint64[n, T]), in order."""
        if permuted.size:
            self.reserve(permuted.size)
            _simhash_add(self.fps, self.tags, self.seqs, self.meta, np.ascontiguousarray(permuted, dtype=np.uint64),
                        self.masks, seqs)

    def probe(self, queries: np.ndarray, max_distance: int) -> np.ndarray:
        """uint32 seqs within ``max_distance`` bits of the query (permuted for each table, uint64[T]),
        found by the tables' key bits; an article may be listed more than once."""
        return _simhash_probe(self.fps, self.tags, self.seqs, self.old_fps, self.old_tags, self.old_seqs,
                             queries, self.masks, max_distance)

    def remove(self, permuted: np.ndarray, seq: int) -> None:
        simhash_remove(self.fps, self.tags, self.seqs, self.old_fps, self.old_tags, self.old_seqs, self.meta,
                       permuted, self.masks, seq)

    def expect(self, slots: int) -> None:
        """Prepare for ``slots`` more entries: a table they fill at most :data:`PREPARE_LOAD` of,
        written on a thread at once and taken by the next adds as a growth's is (as
        :meth:`stream_dedup.list_table.MemberLists.expect`). Nothing while a growth is under way,
        nor where there is room."""
        if self._next is not None or self.old_tags.shape[0]:
            return
        size = self.fps.shape[0]
        if slots > 0 and self.meta.item(0) + slots > PREPARE_LOAD * size:
            self._next = NextArrays(grown_size(size, self.meta.item(1) + slots, PREPARE_LOAD, GROWTH), *_NEXT_ARRAYS)
            self._room = 0

    def reserve(self, entries: int) -> None:
        """Room for ``entries`` more entries: the table kept at most :data:`MAX_LOAD` used.

        Incremental, as :meth:`stream_dedup.list_table.MemberLists.reserve`: past
        :data:`PREPARE_LOAD` the next table is initialised on a thread (:class:`~stream_dedup.next_arrays.NextArrays`), then it becomes the
        table (adds go there) and the old one drains, :data:`MIGRATE_PER_ENTRY` slots per entry
        added; probes and removals look in both meanwhile. A table that would still pass
        :data:`MAX_LOAD` finishes at once."""
        if 0 < entries <= self._room:  # (most adds: no growth under way nor due, as found by a call before)
            self._room -= entries
            return
        meta = self.meta
        size = self.fps.shape[0]
        if self._next is None and not self.old_tags.shape[0] and meta.item(0) + entries <= PREPARE_LOAD * size:
            # no growth under way nor due until more entries than this are added (each takes at most
            # one slot): later calls count them down (MemberLists.reserve)
            self._room = int(PREPARE_LOAD * size - meta.item(0)) - entries
            return
        self._room = 0
        full = meta.item(0) + entries > MAX_LOAD * size
        if self.old_tags.shape[0]:
            self._migrate(self.old_tags.shape[0] if full else MIGRATE_PER_ENTRY * entries + MIN_MIGRATE)
        if self._next is None and meta.item(0) + entries > PREPARE_LOAD * size:
            self._migrate(self.old_tags.shape[0])
            # (the same size if removals made the load)
            new = grown_size(size, meta.item(1) + entries + 0.8 * (MAX_LOAD - PREPARE_LOAD) * size, MAX_LOAD / GROWTH, GROWTH)
            # (fps zeroed now, every page touched a chunk per add, not by the migration's scattered writes)
            self._next = NextArrays(new, *_NEXT_ARRAYS, pace=headroom(meta, 0, MAX_LOAD * size))
        # (installed once its thread has written it; an add that would pass MAX_LOAD meanwhile waits for it)
        if self._next is not None and self._next.ready(wait=full):
            self._install(*self._next.arrays, MIGRATE_PER_ENTRY * entries + MIN_MIGRATE)
        size = self.fps.shape[0]
        if meta.item(0) + entries > MAX_LOAD * size:  # (an add larger than the growth's head start)
            new = grown_size(size, meta.item(1) + entries, MAX_LOAD / GROWTH, GROWTH)
            self._install(page_memory.zeros(new, np.uint64), page_memory.zeros(new, np.uint8), page_memory.zeros(new, np.uint32),
                          size)

    def _install(self, fps: np.ndarray, tags: np.ndarray, seqs: np.ndarray, steps: int) -> None:
        """Make the initialised ``fps``/``tags``/``seqs`` the table (a draining one finished first);
        the table it replaces drains from now on, ``steps`` slots of it at once."""
        self._migrate(self.old_tags.shape[0])
        self.old_fps, self.old_tags, self.old_seqs = self.fps, self.tags, self.seqs
        self.fps, self.tags, self.seqs = fps, tags, seqs
        self._next = None
        self.meta[0] = self.meta[2] = 0
        self._migrate(steps)

    def _migrate(self, steps: int) -> None:
        """Move the entries of the next ``steps`` slots of the draining table; drop it once empty."""
        if self.old_tags.shape[0] and simhash_migrate(self.fps, self.tags, self.seqs, self.old_fps, self.old_tags,
                                                      self.old_seqs, self.masks, self.meta, steps):
            self.old_fps, self.old_tags, self.old_seqs = _NO_FPS, _NO_TAGS, _NO_SEQS
            self.meta[2] = 0

    def as_set(self) -> set[tuple[int, int, int]]:
        """Every live entry as ``(table, permuted, seq)`` (for tests; O(size))."""
        out = set()
        for fps, tags, seqs in ((self.fps, self.tags, self.seqs), (self.old_fps, self.old_tags, self.old_seqs)):
            live = np.flatnonzero((tags != FREE) & (tags != REMOVED))
            out |= set(zip((tags[live] - 1).tolist(), fps[live].tolist(), seqs[live].tolist(), strict=True))
        return out


@kernel
def lookup_candidates(slot_keys, slot_head, node_seq, node_next, old_keys, old_head, mirror_seq, mirror_next, meta,
                      keys, fps, tags, seqs, old_fps, old_tags, old_seqs, queries, masks, max_distance):
    """An article's candidates in one call: the distinct seqs, ascending, of the members of its LSH
    buckets ``keys`` (:func:`~stream_dedup.list_table.table_members` on the band table's arrays)
    and of the SimHash entries within ``max_distance`` bits of ``queries``
    (:func:`simhash_probe` on a SimHash table's), as
    :func:`~stream_dedup.kernels.distinct_union` of the two."""
    ends = np.empty(keys.shape[0], dtype=np.int64)
    members = table_members(slot_keys, slot_head, node_seq, node_next, old_keys, old_head, mirror_seq, mirror_next,
                            meta, keys, ends)
    near = simhash_probe(fps, tags, seqs, old_fps, old_tags, old_seqs, queries, masks, max_distance)
    return distinct_union(members, near)


@kernel
def file_article(slot_keys, slot_head, node_seq, node_next, old_keys, old_head, mirror_seq, mirror_next, meta,
                 bucket_keys, fps, tags, seqs, s_meta, permuted, masks, p_slot_keys, p_slot_head, p_node_seq,
                 p_node_next, p_old_keys, p_old_head, p_mirror_seq, p_mirror_next, p_meta, joins, seq, cap, p_cap):
    """An article's filing in one call: ``seq`` under its LSH bucket keys ``bucket_keys`` in the band
    table (:func:`~stream_dedup.list_table.table_add` on its arrays, lists of at most ``cap``), in
    every SimHash table with its SimHash ``permuted`` for each (:func:`simhash_add`), and under the
    passage anchors ``joins`` in the passage lists (``p_*``, at most ``p_cap``); any of the three may
    be empty. The caller has made room in each (their ``reserve``)."""
    n = max(bucket_keys.shape[0], permuted.shape[0], joins.shape[0])
    numbers = np.full(max(n, 1), seq, dtype=np.uint32)
    if bucket_keys.shape[0]:
        table_add(slot_keys, slot_head, node_seq, node_next, old_keys, old_head, mirror_seq, mirror_next, meta,
                  bucket_keys, numbers[:bucket_keys.shape[0]], cap)
    if permuted.shape[0]:
        simhash_add(fps, tags, seqs, s_meta, permuted.reshape((1, permuted.shape[0])), masks, numbers[:1])
    if joins.shape[0]:
        table_add(p_slot_keys, p_slot_head, p_node_seq, p_node_next, p_old_keys, p_old_head, p_mirror_seq,
                  p_mirror_next, p_meta, joins, numbers[:joins.shape[0]], p_cap)


# the hot calls: the table's own arrays, the queries a kernel's uint64 output (jit.trusted)
_simhash_add, _simhash_probe = trusted(simhash_add), trusted(simhash_probe)
_file_article = trusted(file_article)  # the lists' own arrays, the keys kernels' uint64 outputs (BatchView.insert)
