"""Member lists in memory: an open-addressing hash table of uint64 key -> a capped list of
uint32 article seqs, newest first, grown incrementally (numpy arrays, numba kernels).

Two indexes keep derived lists this way, rebuilt from RocksDB when an index opens
(:mod:`stream_dedup.memory_lists`), RocksDB staying the one durable copy: the LSH band buckets
(:class:`stream_dedup.band_table.BandTable`, bucket key -> the articles filed under it) and the
passage lists of :mod:`stream_dedup.passages` (anchor -> the articles holding it, at most
``--passage-common-docs`` of them).

Layout:

* ``slot_keys[C]`` / ``slot_head[C]``: open addressing with linear probing, at most 80 % full and
  doubled when it would be fuller (so ~40-80 % full), incrementally (:meth:`MemberLists.reserve`:
  no add rehashes the whole table); a slot whose list became empty keeps its key until the next growth;
  :data:`EMPTY` marks a free slot (no key may be it);
* ``node_seq[N]`` / ``node_next[N]``: each list a singly linked list of article seqs, newest
  first, at most ``cap`` long (adding to a full list drops its oldest member, as the RocksDB
  lists did); freed nodes go to a free list;
* a list of one member takes no node: its slot's head holds the member itself, ``-2 - seq``
  (:func:`_inline`; seqs up to :data:`INLINE_MAX`, a larger one gets a node). A head is so
  either ``-1`` (an empty list), a node (``>= 0``) or an inline member (``<= -2``). Most lists
  have one member: at 1,000,000 articles of ``bench/scale.py``, 81 % of the LSH buckets and 96 %
  of the passage lists, whose nodes were ~40 % of the lists' memory.

Memory: 12 bytes a slot, and 8 bytes a member of a list of two or more (node arrays also grown by
half) (:attr:`MemberLists.nbytes`). The next arrays of a growth are written (so faulted in) on a
thread of their own while the adds go on (:mod:`stream_dedup.next_arrays`).
"""

from __future__ import annotations

import numpy as np

from . import page_memory
from .jit import compiling, inline, kernel, trusted
from .next_arrays import NextArrays, headroom

if compiling():
    from .addresses import prefetch

EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)  # a free slot (no key is it: see stream_dedup.band_table.band_keys)
MAX_LOAD = 0.8   # slots used (live or emptied) at most; a growth leaves the live ones at most 0.8 / SLOT_GROWTH
PREPARE_LOAD = 0.7  # past this, the next table is allocated and initialised a chunk per add (see reserve)
#: the slot table doubles, the node arrays grow by half. (Until 2310931 the slot table's one-go rehash
#: grew it 2.25x in effect, by a boundary case: a live load of exactly 0.8 / 1.5 counted as too full.
#: Grown by half incrementally the table ran fuller, and the adds of 1M articles took ~1.7x as long.)
SLOT_GROWTH, GROWTH = 2.0, 1.5
UNCAPPED = 2**31 - 1  # a cap no list reaches
#: meta: slots used (live or emptied) in the table, node high-water mark, free-list head, members, live slots
#: (in both tables), the migration cursor in the draining table, the copy cursor in the old node arrays
_META = 7
#: growth work done per add at least (below these sizes a growth is done at once, as one rehash)
MIN_MIGRATE, MIN_COPY = 1 << 14, 1 << 14
PREPARE_NODES = 0.85  # node arrays this used: the larger ones are allocated, written on a thread, then copied into a chunk per add
#: (16 slots per entry before 89d8287: the band table's migration near 800,000 articles then fell in
#: one or two 20,000-article chunks of ``bench/scale.py``, 71-91 % of the first chunk's rate; 4 spreads
#: it over ~4x as many adds, 81-98 % there over twelve runs; it still ends long before the next growth)
MIGRATE_PER_ENTRY, COPY_PER_ENTRY = 4, 12
#: the largest seq a slot's head holds inline (``-2 - seq`` must fit an int32)
INLINE_MAX = 2**31 - 2
#: the next arrays of a growth (:class:`NextArrays`: dtype and initial value of each): slots (keys, heads), nodes
_SLOT_ARRAYS = ((np.uint64, EMPTY), (np.int32, -1))
_NODE_ARRAYS = ((np.uint32, 0), (np.int32, 0))
_NO_KEYS = np.full(0, EMPTY, dtype=np.uint64)
_NO_HEADS = np.zeros(0, dtype=np.int32)
_NO_SEQS = np.zeros(0, dtype=np.uint32)


@inline
def _home(slot_keys, key):
    """Where ``key``'s probe starts: the top 32 bits of a multiplicative hash scaled to the table's
    size (any size works)."""
    size = slot_keys.shape[0]
    return np.int64((((key * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)) * np.uint64(size)) >> np.uint64(32))


@inline
def _slot_of(slot_keys, key):
    """The slot holding ``key``, or the free slot where it would go (linear probing from its home)."""
    size = slot_keys.shape[0]
    h = _home(slot_keys, key)
    while slot_keys[h] != key and slot_keys[h] != EMPTY:
        h += 1
        if h == size:
            h = 0
    return h


@inline
def _put(array, mirror, meta, node, value):
    """``array[node] = value``, and in ``mirror`` too if the node is already copied there (while the
    node arrays grow, below the copy cursor ``meta[6]``: see :meth:`MemberLists.reserve`)."""
    array[node] = value
    if node < meta[6]:
        mirror[node] = value


@inline
def _draining(old_keys, meta):
    """Whether a growth is under way: the old table still holds keys not moved (from ``meta[5]`` on)."""
    return meta[5] < old_keys.shape[0]


@inline
def _old_slot(old_keys, meta, key):
    """The slot of ``key`` in the draining table if the table is migrating and holds it there, else -1."""
    if not _draining(old_keys, meta):
        return np.int64(-1)
    h = _slot_of(old_keys, key)
    return h if old_keys[h] != EMPTY else np.int64(-1)


@inline
def _inline(seq):
    """The head of a list whose one member is ``seq`` (``seq <= INLINE_MAX``), and back: ``-2 - x``."""
    return np.int64(-2) - np.int64(seq)


@inline
def _alloc(node_seq, node_next, mirror_seq, mirror_next, meta, seq, after):
    """A node holding ``seq`` followed by ``after`` (a free one, else the next never used)."""
    node = meta[2]
    if node >= 0:
        meta[2] = np.int64(node_next[node])
    else:
        node = meta[1]
        meta[1] += 1
    _put(node_seq, mirror_seq, meta, node, seq)
    _put(node_next, mirror_next, meta, node, after)
    return node


@inline
def _move_slot(slot_keys, slot_head, old_keys, old_head, meta, j):
    """Move the list of the draining table's slot ``j`` into the table (its key is not there);
    the old slot keeps its key with an empty list (probes through it still work)."""
    h = _slot_of(slot_keys, old_keys[j])
    slot_keys[h] = old_keys[j]
    slot_head[h] = old_head[j]
    old_head[j] = -1
    meta[0] += 1
    return h


@inline
def prefetch_homes(slot_keys, slot_head, old_keys, old_head, meta, keys):
    """Start loading the home slot of each of ``keys`` (and, while the table drains, its slot in the
    old table too): a hint, nothing is read (see :func:`table_members`)."""
    draining = _draining(old_keys, meta)  # (a key not moved yet is in the old table)
    for i in range(keys.shape[0]):
        h = _home(slot_keys, keys[i])
        prefetch(slot_keys, h)
        prefetch(slot_head, h)
        if draining:
            h = _home(old_keys, keys[i])
            prefetch(old_keys, h)
            prefetch(old_head, h)


@kernel
def table_members(slot_keys, slot_head, node_seq, node_next, old_keys, old_head, mirror_seq, mirror_next, meta, keys, ends):
    """The members of the buckets ``keys`` (uint64[m]), bucket after bucket, each newest first;
    ``ends[i]`` (int64[m]) is set to where bucket ``i``'s members end in the result. Every key's
    home slot is prefetched before the first probe (the misses of a table larger than the caches
    overlap: 1.83 -> 1.30 us for 37 keys in a 50 MB table, a scratch timing)."""
    m = keys.shape[0]
    prefetch_homes(slot_keys, slot_head, old_keys, old_head, meta, keys)
    heads = np.empty(m, dtype=np.int64)
    total = 0
    for i in range(m):
        h = _slot_of(slot_keys, keys[i])
        if slot_keys[h] != EMPTY:
            node = np.int64(slot_head[h])
        else:
            j = _old_slot(old_keys, meta, keys[i])
            node = np.int64(old_head[j]) if j >= 0 else np.int64(-1)
        heads[i] = node
        if node <= -2:  # one member, inline
            total += 1
        while node >= 0:
            total += 1
            node = np.int64(node_next[node])
        ends[i] = total
    out = np.empty(total, dtype=np.uint32)
    c = 0
    for i in range(m):
        node = heads[i]
        if node <= -2:
            out[c] = np.uint32(_inline(node))
            c += 1
        while node >= 0:
            out[c] = node_seq[node]
            c += 1
            node = np.int64(node_next[node])
    return out


@kernel
def table_add(slot_keys, slot_head, node_seq, node_next, old_keys, old_head, mirror_seq, mirror_next, meta, keys, seqs, cap):
    """File ``seqs[i]`` under the key ``keys[i]`` (uint64[m], uint32[m]), newest first; a list over
    ``cap`` members loses its oldest. The caller has made room (:meth:`MemberLists.reserve`)."""
    for i in range(keys.shape[0]):
        key = keys[i]
        h = _slot_of(slot_keys, key)
        if slot_keys[h] == EMPTY:
            j = _old_slot(old_keys, meta, key)
            if j >= 0 and old_head[j] != -1:  # still in the draining table: moved first
                h = _move_slot(slot_keys, slot_head, old_keys, old_head, meta, j)
            else:
                slot_keys[h] = key
                slot_head[h] = -1
                meta[0] += 1
        head = np.int64(slot_head[h])
        seq = seqs[i]
        meta[3] += 1
        if head <= -2 and cap <= 1:  # the one member, inline, is replaced: as if the list were empty
            meta[3] -= 1
            head = np.int64(-1)
        elif head == -1:
            meta[4] += 1
        if head == -1 and np.int64(seq) <= INLINE_MAX:  # the list's one member, inline
            slot_head[h] = _inline(seq)
            continue
        if head <= -2:  # the inline member takes a node: the list gets two
            head = _alloc(node_seq, node_next, mirror_seq, mirror_next, meta, _inline(head), -1)
        node = _alloc(node_seq, node_next, mirror_seq, mirror_next, meta, seq, head)
        slot_head[h] = node
        count = 1
        while count < cap and node >= 0:  # the cap-th member, whose successors go
            node = np.int64(node_next[node])
            count += 1
        if node >= 0:
            drop = np.int64(node_next[node])
            _put(node_next, mirror_next, meta, node, -1)
            while drop >= 0:
                after = np.int64(node_next[drop])
                _put(node_next, mirror_next, meta, drop, meta[2])
                meta[2] = drop
                meta[3] -= 1
                drop = after


@kernel
def table_remove(slot_keys, slot_head, node_seq, node_next, old_keys, old_head, mirror_seq, mirror_next, meta, keys, seq):
    """Take article ``seq`` out of the buckets ``keys`` (uint64[m]); absent members are ignored."""
    for i in range(keys.shape[0]):
        h = _slot_of(slot_keys, keys[i])
        heads = slot_head
        if slot_keys[h] == EMPTY:
            h = _old_slot(old_keys, meta, keys[i])
            if h < 0:
                continue
            heads = old_head
        prev = np.int64(-1)
        node = np.int64(heads[h])
        if node <= -2:  # one member inline
            if _inline(node) == seq:
                heads[h] = -1
                meta[4] -= 1
                meta[3] -= 1
            continue
        while node >= 0 and node_seq[node] != seq:
            prev = node
            node = np.int64(node_next[node])
        if node < 0:
            continue
        after = np.int64(node_next[node])
        if prev < 0:
            heads[h] = after
            if after < 0:
                meta[4] -= 1
        else:
            _put(node_next, mirror_next, meta, prev, after)
        _put(node_next, mirror_next, meta, node, meta[2])
        meta[2] = node
        meta[3] -= 1


@kernel
def table_migrate(slot_keys, slot_head, old_keys, old_head, meta, steps):
    """Move the non-empty lists of the next ``steps`` slots of the draining table (from the cursor
    ``meta[5]`` on) into the table; returns whether the draining table is empty now."""
    end = min(old_keys.shape[0], meta[5] + steps)
    for j in range(meta[5], end):
        if old_keys[j] != EMPTY and old_head[j] != -1:
            _move_slot(slot_keys, slot_head, old_keys, old_head, meta, j)
    meta[5] = end
    return end >= old_keys.shape[0]


def grown_size(size: int, used: float, load: float, growth: float) -> int:
    """``size``, grown by ``growth`` (as few times as needed, none if it does) until ``used`` slots
    fill at most ``load`` of it (the growths of :class:`MemberLists` and the SimHash tables)."""
    while used > load * size:
        size = int(size * growth) + 1
    return size


def list_sizes(ends: np.ndarray) -> np.ndarray:
    """The size of each list from where each ends (``ends`` of :meth:`MemberLists.lookup`)."""
    sizes = ends.copy()
    sizes[1:] -= ends[:-1]
    return sizes


class MemberLists:
    """Lists of uint32 members under uint64 keys, at most ``cap`` each (see the module doc). Single writer.

    Growth is incremental, so that no add pays for a whole rehash or copy (:meth:`reserve`): while
    a table grows there are two, the table and the *draining* one (``old_keys``/``old_head``), and
    each key's list is in exactly one of them; while the node arrays grow, the larger ones
    (``mirror_seq``/``mirror_next``) are filled by a copy a chunk per add, every write below the
    copy cursor going to both, and replace the node arrays once complete.
    """

    def __init__(self, cap: int, slots: int = 1 << 12, nodes: int = 1 << 12) -> None:
        self.cap = cap
        self.slot_keys = page_memory.full(slots, EMPTY, np.uint64)
        self.slot_head = page_memory.full(slots, -1, np.int32)
        self.node_seq = page_memory.zeros(nodes, np.uint32)
        self.node_next = page_memory.full(nodes, -1, np.int32)
        self.meta = np.zeros(_META, dtype=np.int64)
        self.meta[2] = -1
        self._settled()

    def _settled(self) -> None:
        """No growth under way (a new or loaded table)."""
        self._room = 0  # entries that may be added before reserve must look again (see reserve)
        self.old_keys, self.old_head, self.mirror_seq, self.mirror_next = _NO_KEYS, _NO_HEADS, _NO_SEQS, _NO_HEADS
        self._next_nodes: NextArrays | None = None  # the larger node arrays while they are initialised
        self._next: NextArrays | None = None  # the next table's keys and heads while they are initialised
        if self.meta.shape[0] < _META:  # a snapshot of the format before incremental growth
            self.meta = np.concatenate([self.meta, np.zeros(_META - self.meta.shape[0], dtype=np.int64)])
        self.meta[5] = self.meta[6] = 0

    def loaded(self) -> None:
        """Called once the arrays are set from a snapshot."""
        self._settled()

    def settle(self) -> None:
        """Finish any growth under way (before a snapshot: it keeps one table and one pair of node arrays)."""
        self._room = 0
        self.mirror_seq, self.mirror_next = _NO_SEQS, _NO_HEADS  # (the node arrays are complete)
        if self._next_nodes is not None:
            self._next_nodes.cancel()
            self._next_nodes = None
        self.meta[6] = 0
        self._migrate(self.old_keys.shape[0])
        if self._next is not None:
            self._next.cancel()  # (its next growth prepares another)
        self._next = None

    @property
    def _args(self) -> tuple:
        return (self.slot_keys, self.slot_head, self.node_seq, self.node_next,
                self.old_keys, self.old_head, self.mirror_seq, self.mirror_next, self.meta)

    @property
    def members(self) -> int:
        """Entries held (one per key and member)."""
        return int(self.meta[3])

    @property
    def nbytes(self) -> int:
        arrays = (self.slot_keys, self.slot_head, self.node_seq, self.node_next,
                  self.old_keys, self.old_head)
        # (the next table's and the larger node arrays' pages are resident as far as they are written)
        return (sum(a.nbytes for a in (*arrays, self.mirror_seq, self.mirror_next))
                + sum(n.nbytes for n in (self._next, self._next_nodes) if n is not None))

    def lookup(self, keys: np.ndarray, ends: np.ndarray | None = None) -> np.ndarray:
        """uint32 members of the lists ``keys`` (uint64[m]), list after list, newest first
        (a member of several lists appears once for each); ``ends`` (int64[m]), if given, gets
        where each list's members end."""
        if ends is None:
            ends = np.empty(keys.shape[0], dtype=np.int64)
        return _table_members(*self._args, keys, ends)

    def add_entries(self, keys: np.ndarray, seqs: np.ndarray) -> None:
        """File ``seqs[i]`` (uint32[m]) under ``keys[i]`` (uint64[m]), in order."""
        if keys.shape[0]:
            self.reserve(keys.shape[0])
            _table_add(*self._args, keys, seqs, self.cap)

    def file(self, pairs: list[tuple[np.ndarray, int]]) -> None:
        """File each ``(keys, seq)`` in order: ``seq`` under every key of ``keys`` (uint64)."""
        if pairs:  # (one np.repeat for the seqs: a np.full per pair cost ~1 us each)
            self.add_entries(np.concatenate([keys for keys, _ in pairs]),
                             np.repeat(np.array([seq for _, seq in pairs], dtype=np.uint32),
                                       [keys.shape[0] for keys, _ in pairs]))

    def remove(self, keys: np.ndarray, seq: int) -> None:
        """Take ``seq`` out of the lists ``keys`` (uint64[m])."""
        if keys.shape[0]:
            table_remove(*self._args, keys, seq)

    def as_dict(self) -> dict[int, list[int]]:
        """Every non-empty list (for tests and inspection; O(size))."""
        keys = np.concatenate([self.slot_keys[(self.slot_keys != EMPTY) & (self.slot_head != -1)],
                               self.old_keys[(self.old_keys != EMPTY) & (self.old_head != -1)]])
        ends = np.empty(keys.shape[0], dtype=np.int64)
        members = self.lookup(keys, ends).tolist()
        starts = [0, *ends.tolist()][:keys.shape[0]]
        return {k: members[a:b] for k, a, b in zip(keys.tolist(), starts, ends.tolist(), strict=True)}

    def reserve(self, entries: int) -> None:
        """Room for ``entries`` more entries: more nodes, and slots kept at most :data:`MAX_LOAD` used.

        Neither grows in one go (a rehash of every list in one add stalled that add: seconds at a
        few million articles). Nodes: past :data:`PREPARE_NODES` of them used, larger arrays are
        allocated and written on a thread (:class:`~stream_dedup.next_arrays.NextArrays`: their page
        faults taken on another core), then each add copies the next :data:`COPY_PER_ENTRY` nodes
        per entry into them; the kernels keep reading the node arrays and write a node in both if it
        is already copied; once all are they replace the node arrays. Slots: past
        :data:`PREPARE_LOAD` the next table is allocated and initialised on a thread, while adds
        still go to the table; once it is ready it becomes the table and the old one drains, :data:`MIGRATE_PER_ENTRY` slots per
        entry added (a key still there is moved first when added to). Both finish long before the
        next growth; a table that would still pass :data:`MAX_LOAD` finishes at once."""
        if 0 < entries <= self._room:  # (most adds: no growth under way nor due, as found by a call before)
            self._room -= entries
            return
        meta = self.meta
        nodes = 2 * entries  # an entry may take two: its own, and one for the member it joins inline
        # (meta.item: a numpy int64 compared with a float costs ~2.5 us, an int ~0.05)
        if self._next is None and self._next_nodes is None and not self.mirror_seq.shape[0] \
                and not self.old_keys.shape[0] and meta.item(1) + nodes <= PREPARE_NODES * self.node_seq.shape[0] \
                and meta.item(0) + entries <= PREPARE_LOAD * self.slot_keys.shape[0]:
            # no growth under way nor due. Until more entries than this are added (each takes at most
            # one slot and two nodes; a removal only frees them), none is: later calls count them down
            # instead of looking again (~0.4 us a call; the growth methods set it to 0)
            self._room = int(min((PREPARE_NODES * self.node_seq.shape[0] - meta.item(1)) // 2,
                                 PREPARE_LOAD * self.slot_keys.shape[0] - meta.item(0))) - entries
            return
        self._room = 0
        if self.mirror_seq.shape[0]:
            self._copy_nodes(COPY_PER_ENTRY * entries + MIN_COPY)
        else:
            if self._next_nodes is None and meta.item(1) + nodes > PREPARE_NODES * self.node_seq.shape[0]:
                n = grown_size(self.node_seq.shape[0], meta.item(1) + nodes, PREPARE_NODES, GROWTH)
                # (written on a thread, paced by the nodes used towards the current arrays' end: done
                # with about half the headroom left, 7.5 % of the nodes; copying all nodes then takes
                # 1 / COPY_PER_ENTRY = 8.3 % of them in entries, and most entries take no node (new
                # single-member lists), so the copy ends first. bench/scale.py: the chunk of a node
                # growth ran slower with these filled flat out, f50d668, reverted)
                self._next_nodes = NextArrays(n, *_NODE_ARRAYS, pace=headroom(meta, 1, self.node_seq.shape[0]))
            # copied into once written (unless the nodes run out first: then wait for them)
            if self._next_nodes is not None \
                    and self._next_nodes.ready(wait=meta.item(1) + nodes > self.node_seq.shape[0]):
                self.mirror_seq, self.mirror_next = self._next_nodes.arrays
                self._next_nodes = None
                meta[6] = 0
                self._copy_nodes(COPY_PER_ENTRY * entries + MIN_COPY)
        if meta.item(1) + nodes > self.node_seq.shape[0]:  # (an add larger than the copy's head start)
            self._copy_nodes(self.node_seq.shape[0])
            if meta.item(1) + nodes > self.node_seq.shape[0]:
                n = grown_size(self.node_seq.shape[0], meta.item(1) + nodes, 1.0, GROWTH)
                seq, nxt = page_memory.zeros(n, np.uint32), page_memory.full(n, -1, np.int32)
                seq[:meta[1]], nxt[:meta[1]] = self.node_seq[:meta[1]], self.node_next[:meta[1]]
                self.node_seq, self.node_next = seq, nxt
        size = self.slot_keys.shape[0]
        full = meta.item(0) + entries > MAX_LOAD * size
        if self.old_keys.shape[0]:
            self._migrate(self.old_keys.shape[0] if full else MIGRATE_PER_ENTRY * entries + MIN_MIGRATE)
            full = meta.item(0) + entries > MAX_LOAD * size
        if self._next is None and meta.item(0) + entries > PREPARE_LOAD * size:
            self._migrate(self.old_keys.shape[0])
            # (the same size if emptied lists made the load)
            new = grown_size(size, meta.item(4) + entries + 0.8 * (MAX_LOAD - PREPARE_LOAD) * size,
                             MAX_LOAD / SLOT_GROWTH, SLOT_GROWTH)
            self._next = NextArrays(new, *_SLOT_ARRAYS, pace=headroom(meta, 0, MAX_LOAD * size))
        # (installed once its thread has written it; an add that would pass MAX_LOAD meanwhile waits for it)
        if self._next is not None and self._next.ready(wait=full):
            self._install(*self._next.arrays, MIGRATE_PER_ENTRY * entries + MIN_MIGRATE)
        size = self.slot_keys.shape[0]
        if meta.item(0) + entries > MAX_LOAD * size:  # (an add larger than the growth's head start)
            new = grown_size(size, meta.item(4) + entries, MAX_LOAD / SLOT_GROWTH, SLOT_GROWTH)
            self._install(page_memory.full(new, EMPTY, np.uint64), page_memory.full(new, -1, np.int32), size)

    def expect(self, slots: int, nodes: int) -> None:
        """Prepare for ``slots`` more slots used and ``nodes`` more nodes, when a caller knows how
        much is coming (:func:`stream_dedup.memory_lists.expect`): arrays large enough for all of
        it (slots at most :data:`PREPARE_LOAD` used, nodes :data:`PREPARE_NODES`) are written on a
        thread at once and taken by the next adds as a growth's are (:meth:`reserve`), instead of
        the table doubling step by step on the way (each step writes a fresh table: about twice the
        memory in all, and memory new to the process costs ~2.2 ms a MB to touch on the VM measured,
        :mod:`stream_dedup.next_arrays`). Nothing while a growth is under way, nor where there is room."""
        if self._next is not None or self._next_nodes is not None or self.old_keys.shape[0] \
                or self.mirror_seq.shape[0]:
            return
        meta = self.meta
        size, n = self.slot_keys.shape[0], self.node_seq.shape[0]
        if slots > 0 and meta.item(0) + slots > PREPARE_LOAD * size:
            self._next = NextArrays(grown_size(size, meta.item(4) + slots, PREPARE_LOAD, SLOT_GROWTH), *_SLOT_ARRAYS)
            self._room = 0
        if nodes > 0 and meta.item(1) + nodes > PREPARE_NODES * n:
            self._next_nodes = NextArrays(grown_size(n, meta.item(1) + nodes, PREPARE_NODES, GROWTH), *_NODE_ARRAYS)
            self._room = 0

    def _install(self, keys: np.ndarray, head: np.ndarray, steps: int) -> None:
        """Make the initialised ``keys``/``head`` the table (a draining one finished first); the
        table it replaces drains from now on, ``steps`` slots of it at once."""
        self._migrate(self.old_keys.shape[0])
        self.old_keys, self.old_head = self.slot_keys, self.slot_head
        self.slot_keys, self.slot_head = keys, head
        self._next = None
        self.meta[0] = self.meta[5] = 0
        self._migrate(steps)

    def _copy_nodes(self, steps: int) -> None:
        """Copy the next ``steps`` nodes into the larger node arrays; they replace the node arrays once all are."""
        n = self.node_seq.shape[0]
        if self.mirror_seq.shape[0]:
            start = int(self.meta[6])
            end = min(n, start + steps)
            self.mirror_seq[start:end] = self.node_seq[start:end]
            self.mirror_next[start:end] = self.node_next[start:end]
            self.meta[6] = end
            if end == n:
                self.node_seq, self.node_next = self.mirror_seq, self.mirror_next
                self.mirror_seq, self.mirror_next = _NO_SEQS, _NO_HEADS
                self.meta[6] = 0

    def _migrate(self, steps: int) -> None:
        """Move the lists of the next ``steps`` slots of the draining table; drop it once empty."""
        if self.old_keys.shape[0] and table_migrate(self.slot_keys, self.slot_head, self.old_keys, self.old_head,
                                                    self.meta, steps):
            self.old_keys, self.old_head = _NO_KEYS, _NO_HEADS
            self.meta[5] = 0


# the hot calls: the table's own arrays, keys uint64[m] and seqs uint32[m] made by the engine (jit.trusted)
_table_members, _table_add = trusted(table_members), trusted(table_add)
