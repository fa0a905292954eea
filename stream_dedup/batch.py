"""The index as one batch of decisions sees it: RocksDB as it was when the batch began, overlaid by
what the batch has written so far, and the batch's writes applied in one ``WriteBatch`` at the end.

:class:`BatchView` has the read methods the engine's decision needs (:meth:`seq_of`,
:meth:`exact_match`, :meth:`article`, :meth:`lookup`, :meth:`compare`, the passage lists) and
answers each from the batch's own writes first, then from the values it has read (it reads each
key of the index at most once: :meth:`prefetch` reads the ids and exact hashes of the whole batch
in one multi-get), then from RocksDB. The index is not written while a batch runs (a single
writer), so what was read stays true until the batch's own writes replace it. The SimHash tables
are probed in the index's :class:`~stream_dedup.simhash_table.SimhashTable` and in the batch's
entries, keyed by table and key bits; the LSH buckets in the index's
:class:`~stream_dedup.band_table.BandTable` and in the batch's own bucket members (both
:class:`_Members`). The bucket keys and permuted SimHashes of the batch's articles are computed for
all of them at once (:meth:`Prepared.all_keys`).

:meth:`commit` writes everything, the index state and the last checkpoint of each name included, in one atomic
write (a crash leaves the whole batch applied or none of it), then files the batch's articles in
the index's buckets. A batch that raises before :meth:`commit` leaves the index as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING

import numpy as np
from rocksdict import WriteBatch

from .band_table import BandTable
from .fingerprint import Fingerprint
from .index import _POINTS, _U64, DEFAULT, Entry, Index, Lookup, _id_key, _u64
from .index_record import StoredArticle, _unpack_record, stored_signature
from .passages import NO_ANCHORS

if TYPE_CHECKING:
    from .decision import Decision
    from .engine import Deduplicator
    from .simhash import PermutedTables

__all__ = ["BatchView", "Prepared", "run_batch"]
_UNKNOWN = object()  # a key not read yet
NO_KEYS = np.zeros(0, dtype=np.uint64)  # the bucket keys of an article without shingles
_NO_MEMBERS: list[int] = []  # a bucket the batch has no member in (read only)


def run_batch(engine: Deduplicator, ids: list[str], fingerprint: Callable[[int], Fingerprint], nows: Sequence[float],
              checkpoints: Sequence[tuple[str, int] | None] | None,
              receipts: Sequence[bytes | None] | None) -> list[Decision]:
    """The decisions of ``engine`` on ``ids`` (first seen at ``nows``) in order
    (:meth:`Deduplicator.decide_batch`): read the batch's ids, fingerprint the unknown ones
    (``fingerprint(i)``), read their exact hashes (one multi-get each), decide one by one in a
    :class:`BatchView`, write once."""
    view = BatchView(engine.index, engine.tables.key_masks)
    if len(ids) > 1:  # (a batch of one reads its keys one at a time: a multi-get of one key costs more)
        view.prefetch([view.id_key(i) for i in ids])
    prepared: list[Prepared | None] = [None] * len(ids)
    fresh: set[str] = set()
    for i, article_id in enumerate(ids):
        if article_id not in fresh and view.seq_of(article_id) is None:  # else a replay
            fresh.add(article_id)
            prepared[i] = Prepared.of(fingerprint(i), engine.config.num_perm)
    todo = [p for p in prepared if p is not None]
    if len(todo) > 1:
        view.prefetch([b"X" + p.fp.exact for p in todo])
        Prepared.all_keys([p for p in todo if p.fp.n_shingles > 0], engine.index.buckets, engine.tables)
    decisions = [engine._decide(view, article_id, prepared[i], nows[i], checkpoints[i] if checkpoints else None,
                                receipts[i] if receipts else None) for i, article_id in enumerate(ids)]
    view.commit()
    return decisions


@dataclass(slots=True)
class Prepared:
    """An article to decide on: its fingerprint, its stored signature (converted once for keys,
    verification and record), and, once asked for, its bucket keys and permuted SimHashes."""
    fp: Fingerprint
    sig: np.ndarray
    buckets: np.ndarray | None = None
    permuted: np.ndarray | None = None

    @classmethod
    def of(cls, fp: Fingerprint, num_perm: int) -> Prepared:
        if fp.minhash.shape[0] != num_perm:
            raise ValueError(f"fingerprint has {fp.minhash.shape[0]} permutations, index uses {num_perm}")
        return cls(fp, stored_signature(fp.minhash))

    @staticmethod
    def all_keys(todo: list[Prepared], buckets: BandTable, tables: PermutedTables) -> None:
        """:meth:`keys` of each of ``todo`` (articles with shingles) in two kernel calls for all of
        them (rows of the batch's arrays; per article, the two calls and their conversions cost ~7 us)."""
        if len(todo) < 2:
            return
        keys = buckets.keys(np.stack([p.sig for p in todo]))
        permuted = tables.permute_many(np.array([p.fp.simhash for p in todo], dtype=np.uint64))
        for p, k, q in zip(todo, keys, permuted, strict=True):
            p.buckets, p.permuted = k, q

    def keys(self, buckets: BandTable, tables: PermutedTables) -> tuple[np.ndarray, np.ndarray]:
        """(LSH bucket keys, SimHash permuted for each table); none for an empty text."""
        if self.buckets is None:
            has_shingles = self.fp.n_shingles > 0
            self.buckets = buckets.keys(self.sig) if has_shingles else NO_KEYS
            self.permuted = tables.permute_array(self.fp.simhash) if has_shingles else NO_KEYS
        return self.buckets, self.permuted


class BatchView:
    """Reads through the batch's writes; writes kept until :meth:`commit` (see the module doc)."""

    def __init__(self, index: Index, table_masks: list[int]) -> None:
        self.index = index
        self.next_seq = index.next_seq
        self.count = index.count
        self.num_perm = index.num_perm
        self.known: dict[str, dict[bytes, bytes | None]] = {_POINTS: {}}  # read or written
        self.batch = WriteBatch(raw_mode=True)  # the batch's writes (a later put of a key wins)
        self.families = index._cf  # the handles of the families but the default one
        self.writes = 0
        self.checkpoints: dict[str, int] = {}  # name -> the batch's last checkpoint offset (put at commit)
        self.masks = table_masks
        # (key bits | table << 64) -> the batch's seqs in that SimHash table slot; seq -> its permuted SimHashes
        self.tables = _Members()
        self.permuted_of: dict[int, list[int]] = {}
        self.table_tags = [table << 64 for table in range(len(table_masks))]
        self.id_keys: dict[str, bytes] = {}
        self.buckets, self.lists, self.simhash = index.lists()  # loaded or built now if not: before this batch's write
        self.filed: list[tuple[np.ndarray, int]] = []  # (bucket keys, seq) of the batch's indexed articles
        # their bucket keys -> the batch's members, oldest first (most lookups share none of the keys)
        self.own_members = _Members()
        self.hashed: list[tuple[np.ndarray, int]] = []  # (permuted SimHash, seq) of the batch's indexed articles
        self.joined: list[tuple[np.ndarray, int]] = []  # (anchors, seq): the passage lists the batch's articles join
        # the same, as lists: anchor -> the batch's members, oldest first
        self.own_lists = _Members()
        self._probed: _Probed | None = None  # what the last lookup computed, for the insert of the same article

    # -- reads ------------------------------------------------------------------------------
    def get(self, keys: list[bytes], family: str = _POINTS) -> list[bytes | None]:
        """Values of ``keys``: the batch's, else read (once) from the index."""
        known = self.known[family]
        missing = [k for k in keys if k not in known]
        if missing:
            known.update(zip(missing, self.index.get(missing, family), strict=True))
        return [known[k] for k in keys]

    prefetch = get  # read many keys in one multi-get ahead of the decisions that need them

    def get_one(self, key: bytes, family: str = _POINTS) -> bytes | None:
        """The value of ``key``, as :meth:`get` (a single read on a miss)."""
        known = self.known[family]
        v = known.get(key, _UNKNOWN)
        if v is _UNKNOWN:
            v = known[key] = self.index.get(key, family)
        return v

    def id_key(self, article_id: str) -> bytes:
        key = self.id_keys.get(article_id)
        if key is None:
            key = self.id_keys[article_id] = _id_key(article_id)
        return key

    def seq_of(self, article_id: str) -> int | None:
        v = self.get_one(self.id_key(article_id))
        return None if v is None else int.from_bytes(v, "big")

    def exact_match(self, exact: bytes) -> int | None:
        v = self.get_one(b"X" + exact)
        return None if v is None else int.from_bytes(v, "big")

    def article(self, seq: int) -> StoredArticle | None:
        v = self.get_one(b"A" + _u64(seq))
        return None if v is None else _unpack_record(seq, v, self.num_perm)

    def compare(self, seqs: list[int], minhash: np.ndarray) -> tuple[list[int], np.ndarray, list[tuple], list[bytes]]:
        """:meth:`Index.compare` on the records as the batch sees them."""
        pack = _U64.pack  # (_u64 inlined: ~20 candidates a call)
        return self.index.compare(seqs, minhash, self.get([b"A" + pack(s) for s in seqs]))

    def lookup(self, bucket_keys: np.ndarray, permuted: np.ndarray, max_distance: int) -> Lookup:
        """:meth:`Index.lookup` with the batch's bucket members and SimHash table entries."""
        keys = bucket_keys.tolist() if self.own_members else []
        shares = bool(keys) and not self.own_members.isdisjoint(keys)
        if shares:
            ends = np.empty(bucket_keys.shape[0], dtype=np.int64)
            members = self.buckets.lookup(bucket_keys, ends)
            found = self.index.lookup(bucket_keys, permuted, max_distance, members)
            self._batch_members(keys, members, ends, found.lsh)
        else:
            found = self.index.lookup(bucket_keys, permuted, max_distance)
        probed = _Probed(bucket_keys, keys or None, not shares, permuted)
        if self.tables and len(permuted):
            first, more, permuted_of = self.tables.first, self.tables.more, self.permuted_of
            probed.values = queries = permuted.tolist()
            probed.table_keys = [query & mask | tag for query, mask, tag in zip(queries, self.masks, self.table_tags,
                                                                                strict=True)]
            for table, key in enumerate(probed.table_keys):
                oldest = first.get(key)
                if oldest is None:  # (most probes)
                    continue
                probed.tables_disjoint = False
                query = queries[table]
                for seq in (oldest, *more[key]) if key in more else (oldest,):
                    if (permuted_of[seq][table] ^ query).bit_count() <= max_distance:
                        found.simhash.add(seq)
        self._probed = probed
        return found

    def _batch_members(self, bucket_keys: list[int], members: np.ndarray, ends: np.ndarray, lsh: set[int]) -> None:
        """Add the batch's members of ``bucket_keys`` to ``lsh`` (which holds the index's,
        ``members`` ending at ``ends`` bucket by bucket); a bucket they take over its cap is read as
        it will be after the commit (only its newest ``cap`` members).

        The batch's members are in a :class:`_Members` (:attr:`own_members`): filed by :meth:`insert`
        (one dict update), not in a :class:`BandTable` filed and probed through kernels at each lookup
        (~50 us a lookup that shares a bucket with the batch, half the short items').
        """
        first, more = self.own_members.first, self.own_members.more
        shared = [key for key in bucket_keys if key in first]  # (a few of the 37 keys at most)
        if not shared:
            return
        own_count = len(shared)
        for key in shared:
            lsh.add(first[key])
            later = more.get(key)
            if later is not None:
                lsh.update(later)
                own_count += len(later)
        cap = self.buckets.cap
        if members.shape[0] + own_count <= cap:  # (then no bucket can be over its cap: most lookups)
            return
        own = self.own_members.get_many(bucket_keys)
        e = ends.tolist()
        starts = [0, *e[:-1]]
        if any(len(seqs) + end - start > cap for seqs, start, end in zip(own, starts, e, strict=True)):
            lsh.clear()
            listed = members.tolist()
            for seqs, start, end in zip(own, starts, e, strict=True):  # each bucket newest first: the batch's, then the index's
                lsh.update((seqs[::-1] + listed[start:end])[:cap])

    @property
    def passages(self) -> _PassageLists:
        """The passage lists as :func:`stream_dedup.passages.lookup` reads them: the index's and the batch's."""
        return _PassageLists(self)

    def lookup_lists(self, anchors: np.ndarray, ends: np.ndarray | None = None) -> np.ndarray:
        """The members of the passage lists of ``anchors``, list after list (``ends``: where each ends):
        each list the index's members, then the batch's (newest first).

        The batch's are in a :class:`_Members` (:attr:`own_lists`, filed by :meth:`insert`): a short item
        has ~2 anchors, where merging a kernel-probed table's lists in numpy took ~40 us a lookup.
        """
        if ends is None:
            ends = np.empty(anchors.shape[0], dtype=np.int64)
        members = self.lists.lookup(anchors, ends)
        if not self.own_lists:
            return members
        own = self.own_lists.get_many(anchors.tolist())
        if not any(own):
            return members
        listed, merged, start = members.tolist(), [], 0
        for i, (seqs, end) in enumerate(zip(own, ends.tolist(), strict=True)):
            merged += listed[start:end]
            merged += seqs[::-1]
            start, ends[i] = end, len(merged)
        return np.array(merged, dtype=members.dtype)

    # -- writes -----------------------------------------------------------------------------
    def insert(self, *, checkpoint: tuple[str, int] | None, receipt: bytes | None = None, **article) -> int:
        """:meth:`Index.insert` into the batch: the article gets the next seq, its writes wait for :meth:`commit`."""
        seq = self.index.check_seq(self.next_seq)
        self.next_seq, self.count = seq + 1, self.count + 1
        self._put(self.index.article_entries(seq, **article, id_key=self.id_key(article["article_id"])))
        # the lists and disjointness the lookup of this article computed, if it was the last lookup (the batch's
        # members have not changed since: every insert clears it), see _Probed
        probed, self._probed = self._probed, None
        permuted = article["permuted"]
        if article["index_sketches"] and len(permuted):
            self.hashed.append((permuted, seq))
            if probed is not None and probed.permuted is permuted and probed.table_keys is not None:
                self.permuted_of[seq] = probed.values
                self.tables.add(probed.table_keys, seq, probed.tables_disjoint)
            else:
                values = self.permuted_of[seq] = permuted.tolist()
                self.tables.add([p & mask | tag for p, mask, tag in zip(values, self.masks, self.table_tags,
                                                                        strict=True)], seq)
        keys = article["bucket_keys"]
        if article["index_sketches"] and len(keys):
            self.filed.append((keys, seq))
            if probed is not None and probed.bucket_keys is keys and probed.keys is not None:
                self.own_members.add(probed.keys, seq, probed.keys_disjoint)
            else:
                self.own_members.add(keys.tolist(), seq)
        joins = article.get("postings", (NO_ANCHORS, b""))[0]
        if joins.shape[0]:
            self.joined.append((joins, seq))
            self.own_lists.add(joins.tolist(), seq)
        if checkpoint is not None or receipt is not None:
            self.mark(checkpoint, receipt, False)
        return seq

    def mark(self, checkpoint: tuple[str, int] | None, receipt: bytes | None = None, replayed: bool = False) -> None:
        """:meth:`Index.mark` into the batch. The checkpoint of each name is put once, at :meth:`commit`,
        with the batch's last offset for it (the last put of a key wins: the same write, without
        a put per article)."""
        if receipt is not None:
            self._put([entry for entry in self.index.mark_entries(checkpoint, receipt, replayed)
                       if entry[0] != DEFAULT])  # (the checkpoint: below)
        if checkpoint is not None:
            self.checkpoints[checkpoint[0]] = checkpoint[1]
            self.writes += 1

    def _put(self, entries: list[Entry]) -> None:
        put, families, known = self.batch.put, self.families, self.known
        for family, key, value in entries:
            if family == DEFAULT:
                put(key, value)
            else:
                put(key, value, families[family])
                if family in known:
                    known[family][key] = value
        self.writes += len(entries)

    def commit(self) -> None:
        """Write the batch (and the index state) in one atomic write; the index then counts its articles."""
        if not self.writes:
            return
        index = self.index
        if self.checkpoints:
            self._put([entry for name, offset in self.checkpoints.items()
                       for entry in index.mark_entries((name, offset), None, False)])
            self.checkpoints = {}
        index.next_seq, index.count = self.next_seq, self.count
        _, key, value = index.state_entry()
        self.batch.put(key, value)
        index.lists_behind = True
        index.db.write(self.batch)
        self.batch, self.writes = WriteBatch(raw_mode=True), 0
        self.buckets.file(self.filed)
        self.lists.file(self.joined)
        if self.hashed:
            self.simhash.add_many(np.stack([p for p, _ in self.hashed]),
                                  np.array([seq for _, seq in self.hashed], dtype=np.uint32))
        self.filed, self.own_members = [], _Members()
        self.hashed, self.tables, self.permuted_of = [], _Members(), {}
        self.joined, self.own_lists = [], _Members()
        self._probed = None
        index.lists_behind = False


class _Probed:
    """What :meth:`BatchView.lookup` computed for an article that :meth:`BatchView.insert` needs again
    when it files the same article (the same arrays, no insert between): its bucket keys and table
    keys as lists, and whether the batch had filed none of them: not a second ``tolist`` of each,
    the table keys again and two ``isdisjoint`` checks (short stream, in process: 905 -> 861 ms,
    ~6 us an article)."""

    __slots__ = ("bucket_keys", "keys", "keys_disjoint", "permuted", "values", "table_keys", "tables_disjoint")

    def __init__(self, bucket_keys: np.ndarray, keys: list[int] | None, keys_disjoint: bool,
                 permuted: np.ndarray) -> None:
        self.bucket_keys, self.keys, self.keys_disjoint = bucket_keys, keys, keys_disjoint
        self.permuted = permuted
        self.values: list[int] | None = None      # permuted.tolist()
        self.table_keys: list[int] | None = None  # their keys in the batch's table members (lookup's probes)
        self.tables_disjoint = True               # no table key filed (meaningful with table_keys)


class _Members:
    """key -> the seqs filed under it, oldest first (:meth:`get`): the batch's bucket members,
    SimHash table entries and passage list members.

    Most articles share none of their keys with the batch's earlier ones: their keys go into a dict
    of the first member in one ``dict.update`` (no list per key: 37 appends and lists cost twice as
    much); the later members of a key are in a dict of lists."""

    __slots__ = ("first", "more")

    def __init__(self) -> None:
        self.first: dict[int, int] = {}
        self.more: dict[int, list[int]] = {}

    def __bool__(self) -> bool:
        return bool(self.first)

    def add(self, keys: list[int], seq: int, disjoint: bool = False) -> None:
        """File ``seq`` under each of ``keys`` (a key given twice is filed twice). ``disjoint``: the
        caller knows that no key of ``keys`` is filed yet (False: not known, it is checked)."""
        first, more = self.first, self.more
        if disjoint or first.keys().isdisjoint(keys):
            before = len(first)
            first.update(zip(keys, repeat(seq)))
            if len(first) - before == len(keys):
                return
            counts: dict[int, int] = {}
            for key in keys:
                counts[key] = counts.get(key, 0) + 1
            for key, count in counts.items():
                if count > 1:
                    more[key] = [seq] * (count - 1)
            return
        for key in keys:
            if key in first:
                later = more.get(key)
                if later is None:
                    more[key] = [seq]
                else:
                    later.append(seq)
            else:
                first[key] = seq

    def get(self, key: int) -> list[int]:
        """The seqs filed under ``key``, oldest first (an empty list shared by all absent keys: read only)."""
        seq = self.first.get(key)
        if seq is None:
            return _NO_MEMBERS
        later = self.more.get(key)
        return [seq] if later is None else [seq, *later]

    def get_many(self, keys: list[int]) -> list[list[int]]:
        """:meth:`get` of each of ``keys``."""
        first, more = self.first, self.more
        return [_NO_MEMBERS if (seq := first.get(key)) is None else [seq, *more[key]] if key in more else [seq]
                for key in keys]

    def isdisjoint(self, keys: Iterable[int]) -> bool:
        return self.first.keys().isdisjoint(keys)


class _PassageLists:
    """The passage lists of a :class:`BatchView` (``lookup`` as :class:`~stream_dedup.list_table.MemberLists` has it)."""

    __slots__ = ("lookup",)

    def __init__(self, view: BatchView) -> None:
        self.lookup = view.lookup_lists
