"""The persistent index: article records in RocksDB; LSH buckets, passage lists, SimHash and key tables in memory.

One RocksDB (via rocksdict, raw bytes) with four column families. Every integer is big-endian,
so byte order is numeric order and a prefix seek is a range scan:

=========  =========================================  ===========================  ====================
family     key                                        value                        what for
=========  =========================================  ===========================  ====================
points     ``A`` seq(8)                               article record (below)       verify, replay
points     ``D`` seq(8)                               anchors it added (6 bytes)   remove, evict
time       first_seen ms(8) seq(8)                    empty                        retention order
receipts   token (the caller orders it)               offset(8) replayed(1)        delivery receipts
default    ``M`` name                                 bytes                        state, checkpoints
=========  =========================================  ===========================  ====================

Why families: the point-lookup keys (every read of the hot path) live in a hash-indexed memtable
(``hash_link_list`` keyed by their first 9 bytes, which the layout makes near-unique), where a put
or get costs a hash probe instead of ~20 cache-missing skip-list hops. Only the retention order
and the receipts need a total order, and they have plain skip lists. SST files use bloom filters,
so absent keys skip disk reads. Formats 9 and older had ``passages`` and ``simhash`` families too:
opening such an index drops them (their content is now in memory).

``seq`` is a dense internal number given in arrival order. The LSH buckets are not in RocksDB: they
are derived from the records' signatures and kept in a :class:`~stream_dedup.band_table.BandTable`
(at most ``max_bucket`` members each, the newest kept), loaded from the latest snapshot (written at
close, by :meth:`Index.snapshot_lists` and :meth:`Index.start_snapshot`) with what changed since
applied, or built from the records, when the index is first used after opening
(:attr:`Index.buckets`, :mod:`stream_dedup.lists_snapshot`, :mod:`stream_dedup.memory_lists`), and
updated after each write that RocksDB accepted, so a crash loses nothing that is not rebuilt from
the records. The permuted SimHash tables are kept the same
way (:class:`~stream_dedup.simhash_table.SimhashTable`, rebuilt from the records' SimHash), and so
are the id and exact-hash tables (:mod:`stream_dedup.key_tables`: article id -> seq for replays and
removals, exact hash -> seq for exact copies; rebuilt from the records' ids and exact hashes; the
``I`` and ``X`` keys of formats 10 and older).

The article record packs first-seen time, SimHash, set size, exact
hash, the MinHash signature (its low ``SIGNATURE_BITS`` = 16 bits per row, BE: b-bit minwise hashing,
see :func:`stored_signature`), the article id and its cluster root id (length-prefixed
UTF-8; length 0 when the article is its own root), the identity sketch (uint32 BE,
length-prefixed), and the decision first returned for it, replayed when the id comes again
(:mod:`stream_dedup.stored_decision`: a few bytes; JSON in records of format 9 and older, still read).

The posting lists of :mod:`stream_dedup.passages` (anchor -> the articles holding it) are in memory
too (:attr:`Index.passage_lists`), rebuilt from the ``D`` keys (the anchors each article added) when
the index is first used after opening, like the LSH buckets.

All writes of one batch of articles (:mod:`stream_dedup.batch`; one article for ``process``) go
in one ``WriteBatch`` across families: a crash leaves a batch either fully indexed or absent.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rocksdict import MemtableFactory, Options, Rdict, ReadOptions, WriteBatch, WriteOptions

from . import key_tables, lists_snapshot, memory_lists
from .band_table import BandTable
from .index_options import MemoryBudget, cache_counts
from .index_record import (
    _LENGTHS,
    _RECORD,
    _SIG_DTYPE,
    NO_IDENTITY,
    SIGNATURE_BITS,
    StoredArticle,
    _pack_record,
    _record_identity,
    _record_ids,
    _record_words,
    _unpack_record,
    record_exact,
    stored_signature,
)
from .jit import trusted
from .kernels import distinct_union, screen_candidates
from .list_table import MemberLists
from .passages import DELETE_PREFIX, NO_ANCHORS, PASSAGES, anchors_of
from .record_store import RecordStore
from .simhash import PermutedTables
from .simhash_table import SimhashTable, lookup_candidates

log = logging.getLogger(__name__)
_U64 = struct.Struct(">Q")
_STATE = struct.Struct(">QQ")        # next seq, count
_MAX_SEQ = 2**32 - 1                  # seqs are never reused (retention included): 4.3 billion articles (uint32 in buckets)
_RECEIPT = struct.Struct(">QB")      # checkpoint offset the delivery was applied at, 1 if its decision was a replay
# 5: 16-bit signature rows and LSH bucket keys, 4-byte bucket members, records hold the identity
# sketch, ordered delivery receipts in their own family (3: 32-bit rows, 8-byte members);
# 6: passage anchors (posting lists, D deletion lists, anchor count in the record);
# 7: records hold the content-word bitmap of the rewrite rule (stream_dedup.rewrite);
# 8: no LSH bucket keys (``B``) in RocksDB: they are kept in memory;
# 9: no passage lists in RocksDB either (rebuilt from the ``D`` keys);
# 10: no SimHash tables either (rebuilt from the records); records store the decision compactly and
# no root id for a new article, ``I`` and ``X`` values are 4-byte seqs (all still read the old way);
# 11: no ``I`` (id) and ``X`` (exact hash) keys either (the key tables in memory, rebuilt from the records).
# 7 to 10 are converted on opening.
_SCHEMA = 11
_CONVERTED = (7, 8, 9, 10)  # older formats converted by dropping what moved to memory
_LEGACY_FAMILIES = ("simhash", PASSAGES)  # families of formats 9 and older, dropped on opening
_NO_MEMBERS = np.zeros(0, dtype=np.uint32)
#: a closing index writes no new lists' snapshot when the valid one is at most this share of the index
#: behind it (Index.snapshot_fresh)
CLOSE_SNAPSHOT_BEHIND = 0.01
RECORD_CACHE_MAX = 64 << 20  # bytes of recent article records kept in memory at most (Index.records)
_MIN_RECORD = _RECORD.size + _LENGTHS.size  # a record's bytes but its signature, at least (ids may be empty)
_POINTS, _TIME, _RECEIPTS = "points", "time", "receipts"
DEFAULT = "default"  # the family of the state, checkpoints and settings
Entry = tuple[str, bytes, bytes]  # a write: (family, key, value)
_POINT_PREFIX = 9    # bytes hashed by the points memtable: namespace + 8 well-spread bytes


# slots, not frozen: one is built per article on the hot path (frozen costs ~0.1 us per field); read-only by convention
@dataclass(slots=True)
class Lookup:
    members: np.ndarray             # uint32 members of the signature's LSH buckets (one per bucket held in)
    near: np.ndarray                # uint32 entries of the SimHash tables within the probe distance (one per table)

    @property
    def lsh(self) -> set[int]:
        return set(self.members.tolist())

    @property
    def simhash(self) -> set[int]:
        return set(self.near.tolist())

    def candidates(self) -> list[int]:
        """Every seq found, once, ascending (compiled: ~120 bucket members an article on short
        items, ~20 distinct; sets of them cost ~5 us)."""
        return _distinct_union(self.members, self.near).tolist()


def _u64(n: int) -> bytes:
    return _U64.pack(n)


class Index:
    """Key layout and primitive operations; the decision logic lives in :mod:`stream_dedup.engine`."""

    def __init__(self, path: str | Path, num_perm: int, settings: dict, max_bucket: int = 256,
                 memory: int = 2 << 30, durable_writes: bool = True, tables: PermutedTables | None = None,
                 banding: tuple[int, int] = (0, 0)) -> None:
        """``memory``: RocksDB's budget in bytes (block cache, filters and memtables; see
        :mod:`stream_dedup.index_options`). ``tables``: the permuted SimHash tables' layout (by
        default 3 bits in 5 blocks).
        ``banding``: the LSH (bands, rows) that the bucket keys are made with (see
        :class:`~stream_dedup.band_table.BandTable`)."""
        self.path = Path(path)
        self.max_bucket = max_bucket
        self.banding = banding
        self.tables = PermutedTables() if tables is None else tables
        self._lists: memory_lists.Lists | None = None
        self.lists_behind = False  # set while the lists and RocksDB differ (a write in one and not yet in the other)
        self.logged_deletions: int | None = None  # deletions logged since the lists' snapshot (None: no snapshot)
        self.snapshot_generation = 0  # +1 each time a snapshot is made valid or dropped (lists_snapshot)
        self.snapshot_next_seq: int | None = None  # the valid snapshot holds the seqs below this (None: none known)
        self._snapshot_writer: lists_snapshot.BackgroundSnapshot | None = None
        self.snapshot_on_close = True  # write the lists' snapshot at close (not for a throwaway index)
        self.path.mkdir(parents=True, exist_ok=True)
        self.num_perm = num_perm
        self._head_size = _RECORD.size + _SIG_DTYPE.itemsize * num_perm  # (a record's fixed-size head: screen)
        self.budget = budget = MemoryBudget(memory)
        # the records read or written lately (a record never changes; a deleted one leaves), in one
        # buffer the verification kernel reads (record_store)
        self.record_cache_limit = min(RECORD_CACHE_MAX, memory // 64)
        self.record_store = RecordStore(self.record_cache_limit, _MIN_RECORD + _SIG_DTYPE.itemsize * num_perm)
        opts = self._opts = budget.db_options()
        families = {
            _POINTS: budget.table_options(_POINT_PREFIX, MemtableFactory.hash_link_list(budget.hash_buckets)),
            _TIME: budget.table_options(),
            _RECEIPTS: budget.table_options(),  # ordered: a consumer sweeps ranges of them
        }
        legacy = [name for name in _LEGACY_FAMILIES if name in _families_of(self.path)]
        self.db = Rdict(str(self.path), opts, column_families={**families, **{
            name: budget.table_options() for name in legacy}})
        self._points = self.db.get_column_family(_POINTS)
        self._time = self.db.get_column_family(_TIME)
        self._receipts = self.db.get_column_family(_RECEIPTS)
        self._cf = {name: self.db.get_column_family_handle(name) for name in families}
        self.durable_writes = durable_writes
        if not durable_writes:
            wo = WriteOptions()
            wo.disable_wal = True
            self.db.set_write_options(wo)
        self._ordered_read = ReadOptions()
        self._ordered_read.set_total_order_seek(True)
        self._check_settings(settings, legacy)
        state = self.db.get(b"Mstate")
        self.next_seq, self.count = (0, 0) if state is None else _STATE.unpack(state)

    # -- metadata ---------------------------------------------------------------------------
    def _check_settings(self, settings: dict, legacy: list[str]) -> None:
        wanted = json.dumps({"schema": _SCHEMA, **settings}, sort_keys=True).encode()
        stored = self.db.get(b"Msettings")
        if stored is not None and stored != wanted and stored in [
                json.dumps({"schema": old, **settings}, sort_keys=True).encode() for old in _CONVERTED]:
            # formats 7-10 -> 11: the buckets, passage lists, SimHash tables, id and exact-hash keys move
            # to memory; a snapshot of the lists (without the key tables) and its deletion log are dropped
            for first, end in ((b"B", b"C"), (b"I", b"J"), (b"X", b"Y")):
                self._points.delete_range(first, end)
            self.db.delete(lists_snapshot.TOKEN_KEY)
            self.db.delete_range(lists_snapshot.DELETION_PREFIX, lists_snapshot.DELETIONS_END)
            for name in legacy:
                self.db.drop_column_family(name)
            legacy = []
            stored = None
        if stored is None:
            self.db.put(b"Msettings", wanted)
        elif stored != wanted:
            self.close()
            schema = json.loads(stored).get("schema")
            if schema != _SCHEMA:
                raise ValueError(
                    f"the index in {self.path} is in format {schema} (an older stream-dedup); this version reads "
                    f"format {_SCHEMA} ({SIGNATURE_BITS}-bit signatures) and cannot convert it. Rebuild the index "
                    f"in a new --state directory (or delete {self.path}).")
            raise ValueError(
                f"the index in {self.path} was built with different settings ({stored.decode()}); "
                f"this run needs {wanted.decode()}. Use another --state directory or the original settings.")

    def memory_stats(self) -> dict[str, int]:
        """The memory budget, the block cache's usage (memtables charged to it included) and its
        hit and miss counts since the index was opened."""
        hits, misses = cache_counts(self._opts.get_statistics())
        return {"memory_budget_bytes": self.budget.memory,
                "band_table_bytes": self._lists.buckets.nbytes if self._lists is not None else 0,
                "passage_lists_bytes": self._lists.passages.nbytes if self._lists is not None else 0,
                "simhash_table_bytes": self._lists.simhash.nbytes if self._lists is not None else 0,
                "key_tables_bytes": self._lists.ids.nbytes + self._lists.exacts.nbytes if self._lists is not None else 0,
                "record_store_bytes": self.record_store.nbytes,
                "block_cache_usage_bytes": self.budget.cache.get_usage(),
                "block_cache_pinned_bytes": self.budget.cache.get_pinned_usage(),
                "memtable_bytes": self.budget.write_buffers.get_usage(),
                "block_cache_hits": hits, "block_cache_misses": misses}

    def checkpoint(self, name: str) -> int | None:
        v = self.db.get(b"Mckpt:" + name.encode())
        return None if v is None else _U64.unpack(v)[0]

    @property
    def buckets(self) -> BandTable:
        """The LSH buckets (loaded or built with the other lists on first use: :meth:`lists`)."""
        return self.lists().buckets

    @property
    def passage_lists(self) -> MemberLists:
        """The passage posting lists (loaded or built with the other lists on first use: :meth:`lists`)."""
        return self.lists().passages

    @property
    def simhash_table(self) -> SimhashTable:
        """The permuted SimHash tables (loaded or built with the other lists on first use: :meth:`lists`)."""
        return self.lists().simhash

    def lists(self) -> memory_lists.Lists:
        """The in-memory LSH buckets, passage lists and SimHash tables: from the latest snapshot if it
        is this index's, with the articles indexed after it filed again, else built from RocksDB
        (:mod:`stream_dedup.lists_snapshot`, :mod:`stream_dedup.memory_lists`); logged with the time it took."""
        if self._lists is None:
            began = time.monotonic()
            lists = lists_snapshot.load(self)
            how = "loaded from their snapshot and brought up to date" if lists is not None else "built from the index"
            self._lists = lists or memory_lists.build(self)
            if self.count:
                log.info("in-memory lists of %d articles %s in %.2f s", self.count, how, time.monotonic() - began)
        return self._lists

    def drop_lists(self) -> None:
        """Forget the in-memory lists (they no longer match RocksDB): built again from it when next used."""
        self._lists = None
        self.lists_behind = False

    def scan(self, prefix: bytes, start: bytes = b""):
        """``(key, value)`` of the points family's keys that start with ``prefix``, in key order
        (from ``prefix + start`` on)."""
        return self._scan(self._points, prefix, start)

    def scan_meta(self, prefix: bytes):
        """``(key, value)`` of the default family's keys that start with ``prefix``, in key order."""
        return self._scan(self.db, prefix)

    def _scan(self, family: Rdict, prefix: bytes, start: bytes = b""):
        it = family.iter(self._ordered_read)
        it.seek(prefix + start)
        n = len(prefix)
        while it.valid():
            key = it.key()
            if key[:n] != prefix:
                break
            yield key, it.value()
            it.next()
        del it

    def key_counts(self) -> Counter:
        """Keys per family (``A D`` of points, ``T`` time, ``M`` metadata); O(n)."""
        counts: Counter = Counter(bytes(k[:1]) for k in self._points.keys(read_opt=self._ordered_read))
        counts[b"T"] = sum(1 for _ in self._time.keys())
        counts[b"M"] = sum(1 for _ in self.db.keys())
        return +counts

    # -- reads ------------------------------------------------------------------------------
    def seq_of(self, article_id: str) -> int | None:
        """The seq of the indexed article ``article_id`` (its key's, checked against its record), or None."""
        return self.lists().ids.checked(key_tables.id_keys([article_id]), self.records,
                                        lambda _, r: _record_ids(r, self.num_perm)[0] == article_id)[0]

    def exact_match(self, exact: bytes) -> int | None:
        """The seq of the indexed article whose exact hash is ``exact`` (checked against its record), or None."""
        return self.lists().exacts.checked(key_tables.exact_keys([exact]), self.records,
                                           lambda _, r: record_exact(r) == exact)[0]

    def article(self, seq: int) -> StoredArticle | None:
        v = self._points.get(b"A" + _u64(seq))
        return None if v is None else _unpack_record(seq, v, self.num_perm)

    def get(self, keys, family: str = _POINTS):
        """The values of the list ``keys`` in the points family (one multi-get; None: absent), or of one key."""
        return self._points.get(keys) if keys else []

    def records(self, seqs: list[int]) -> list[bytes | None]:
        """The raw records of ``seqs`` (None: not indexed), through the store of the records read or
        written lately (:attr:`record_store`, ``min(64 MB, --memory / 64)`` bytes: outside the
        RocksDB budget, like the in-memory lists). On short items 96 % of a verification's candidate
        reads are of records read before (the same stories are candidates again and again)."""
        out = self.record_store.get_many(seqs)
        if None in out:
            missing = [s for s, v in zip(seqs, out, strict=True) if v is None]
            read = dict(zip(missing, self._points.get([b"A" + _u64(s) for s in missing]), strict=True))
            out = [read[s] if v is None else v for s, v in zip(seqs, out, strict=True)]
            self.cache_records([(s, v) for s, v in read.items() if v is not None])
        return out

    def cache_records(self, items: list[tuple[int, bytes]]) -> None:
        """Keep ``(seq, record)`` pairs in the record store (the oldest half of it dropped when full)."""
        put = self.record_store.put
        for seq, value in items:
            put(seq, value)

    def articles(self, seqs: list[int]) -> list[StoredArticle]:
        if not seqs:
            return []
        values = self._points.get([b"A" + _u64(s) for s in seqs])
        return [_unpack_record(s, v, self.num_perm) for s, v in zip(seqs, values, strict=True) if v is not None]

    def screen(self, seqs: list[int], minhash: np.ndarray, simhash: int, n_shingles: int, jaccard_of: np.ndarray,
               rules: np.ndarray, values: list[bytes | None] | None = None
               ) -> tuple[list[int], list[bytes], list[int], list[int], list[int], list[int]]:
        """The candidates ``seqs`` of an article (its signature ``minhash``, or its
        :func:`stored_signature`; its SimHash and shingle count) screened in one compiled pass over
        their record heads (:func:`~stream_dedup.kernels.screen_candidates`), without decoding whole records.

        Returns the seqs still indexed, their raw records (read the ids of one with :meth:`ids`),
        and per candidate the number of equal signature rows, its shingle count, the Hamming
        distance of its SimHash, then the indices of those a text rule may pass (``jaccard_of`` and
        ``rules``: :meth:`Deduplicator._screen_rules`). ``values``: the records of ``seqs`` if the
        caller has read them.
        """
        if values is None:
            values = self.records(seqs)
        if None in values:  # an evicted candidate (rare)
            found = [(s, v) for s, v in zip(seqs, values, strict=True) if v is not None]
            seqs, values = [s for s, _ in found], [v for _, v in found]
        if not values:
            return [], [], [], [], [], []
        raw = values
        size = self._head_size
        heads = np.frombuffer(b"".join([v[:size] for v in raw]), dtype=np.uint8)
        query = np.ascontiguousarray(stored_signature(minhash)).view(np.uint8)
        table, may = _screen(heads, size, _RECORD.size, query, np.uint64(simhash), n_shingles, jaccard_of, rules)
        agree, ns, hams = table.tolist()
        return seqs, raw, agree, ns, hams, may.tolist()

    def ids(self, value: bytes | memoryview) -> tuple[str, str]:
        """(article id, cluster root id) of a raw record (its bytes, or a view of them)."""
        return _record_ids(value, self.num_perm)[:2]

    def identity(self, value: bytes) -> np.ndarray:
        """The identity sketch of a raw record (see :mod:`stream_dedup.identity`)."""
        return _record_identity(value, self.num_perm)

    def words(self, value: bytes) -> bytes:
        """The content-word bitmap of a raw record (see :mod:`stream_dedup.rewrite`)."""
        return _record_words(value, self.num_perm)

    def lookup(self, bucket_keys: np.ndarray, permuted: np.ndarray, max_distance: int = 64) -> Lookup:
        """Members of the LSH buckets ``bucket_keys`` (uint64, :meth:`BandTable.keys`), and every
        SimHash within ``max_distance`` bits.

        ``permuted`` is the query's SimHash permuted for each table (uint64[T], :meth:`PermutedTables.permute_array`;
        empty: no SimHash probe). A probe reads every entry that agrees with the query on the table's
        key bits, with no cap, so no fingerprint within ``max_distance`` of the query is ever missed;
        entries farther away are dropped (Hamming distance is the same on permuted values).
        """
        lists = self.lists()
        members = lists.buckets.lookup(bucket_keys) if len(bucket_keys) else _NO_MEMBERS
        sim = lists.simhash.probe(permuted, max_distance) if len(permuted) else _NO_MEMBERS
        return Lookup(members, sim)

    def candidates(self, bucket_keys: np.ndarray, permuted: np.ndarray, max_distance: int) -> np.ndarray:
        """:meth:`lookup`'s seqs (uint32), each once, ascending (:meth:`Lookup.candidates`), in one
        compiled call (:func:`~stream_dedup.simhash_table.lookup_candidates`: two lookups and their
        union were three calls, each boxing its arrays)."""
        lists = self.lists()
        s = lists.simhash
        return _lookup_candidates(*lists.buckets._args, bucket_keys, s.fps, s.tags, s.seqs, s.old_fps, s.old_tags,
                                  s.old_seqs, permuted, s.masks, max_distance)

    # -- writes -----------------------------------------------------------------------------
    def insert(self, *, checkpoint: tuple[str, int] | None, receipt: bytes | None = None, **article) -> int:
        """Index one article in one atomic write: :meth:`article_writes` (its keyword arguments),
        the index state, and the ``checkpoint`` and ``receipt`` marks (see :meth:`mark`); filed in
        the in-memory lists. A batch of one (:class:`~stream_dedup.batch.BatchView`, as the engine
        writes): a write that raises takes the article out of the lists again."""
        from .batch import BatchView

        view = BatchView(self)
        try:
            seq = view.insert(checkpoint=checkpoint, receipt=receipt, **article)
            view.commit()
        except BaseException:
            view.rollback()
            raise
        return seq

    def check_seq(self, seq: int) -> int:
        """``seq``, if the LSH buckets can name it (else OverflowError)."""
        if seq > _MAX_SEQ:
            raise OverflowError(f"the index in {self.path} has numbered {seq:,} articles, the most its LSH "
                                f"buckets can name; rebuild it in a new directory")
        return seq

    def article_writes(self, seq: int, *, article_id: str, first_seen: float, simhash: int, n_shingles: int,
                       exact: bytes, minhash: np.ndarray, root_id: str, decision: dict | list | bytes,
                       index_sketches: bool, identity: np.ndarray = NO_IDENTITY, anchors: int = 0, words: bytes = b"",
                       postings: tuple[np.ndarray, bytes] = (NO_ANCHORS, b"")) -> tuple[list[tuple[bytes, bytes]], bytes]:
        """The writes that index article ``seq``: ``(key, value)`` pairs of the points family, its
        record first, and its key in the time family (an empty value).

        (Its LSH bucket keys, its SimHash permuted for each table, its id and its exact hash are filed
        in the in-memory lists by the caller, :class:`~stream_dedup.batch.BatchView`: not written here.)
        ``anchors`` is its number of passage anchors, ``postings`` the anchors whose passage lists it
        joins and their ``D`` value (:func:`stream_dedup.passages.posting_writes`): only the ``D`` key
        is written here; the caller files the article in :attr:`passage_lists` once the write is done.
        """
        return record_writes(seq, _pack_record(first_seen, simhash, n_shingles, index_sketches, exact, minhash,
                                               article_id, root_id, decision, identity, anchors, words),
                             postings[1], first_seen)

    def state_entry(self) -> Entry:
        """The write that stores the index state (next seq, count)."""
        return DEFAULT, b"Mstate", _STATE.pack(self.next_seq, self.count)

    def mark_entries(self, checkpoint: tuple[str, int] | None, receipt: bytes | None,
                     replayed: bool) -> list[Entry]:
        """The writes of a checkpoint and a delivery receipt (see :meth:`receipt`)."""
        out: list[Entry] = []
        if checkpoint is not None:
            out.append((DEFAULT, b"Mckpt:" + checkpoint[0].encode(), _u64(checkpoint[1])))
        if receipt is not None:
            offset = checkpoint[1] if checkpoint is not None else 0
            out.append((_RECEIPTS, receipt, _RECEIPT.pack(offset, 1 if replayed else 0)))
        return out

    def write(self, entries: list[Entry]) -> None:
        """Apply ``(family, key, value)`` writes in one atomic ``WriteBatch``."""
        wb = WriteBatch(raw_mode=True)
        put, cf = wb.put, self._cf
        for family, key, value in entries:
            if family == DEFAULT:
                put(key, value)
            else:
                put(key, value, cf[family])
        self.db.write(wb)

    def mark(self, checkpoint: tuple[str, int] | None, receipt: bytes | None = None,
             replayed: bool = False) -> None:
        """Store a checkpoint and/or a delivery receipt (see :meth:`receipt`) in one atomic write."""
        self.write(self.mark_entries(checkpoint, receipt, replayed))

    def receipt(self, token: bytes) -> tuple[int, bool] | None:
        """``(checkpoint offset, replayed)`` stored with the delivery ``token``, or None.

        A token names one input record (the caller chooses it, e.g. its topic, partition and
        offset, big-endian so that a partition's receipts are one ordered range).  It lets a
        consumer that may see the same input twice tell a second delivery from a first one.
        """
        v = self._receipts.get(token)
        if v is None:
            return None
        offset, flags = _RECEIPT.unpack(v)
        return offset, bool(flags & 1)

    def delete_receipts(self, begin: bytes, end: bytes) -> None:
        """Drop the receipts whose tokens sort in ``[begin, end)`` (one range tombstone)."""
        self._receipts.delete_range(begin, end)

    def passages_added(self, seq: int) -> bytes | None:
        """The anchors article ``seq`` added to the passage lists (6 bytes each), if any."""
        return self._points.get(DELETE_PREFIX + _u64(seq))

    def delete(self, art: StoredArticle, bucket_keys: np.ndarray, permuted: np.ndarray,
               anchors: np.ndarray | None = None) -> None:
        """Remove every key of ``art`` in one atomic write, then its LSH bucket entries (``bucket_keys``),
        SimHash table entries (``permuted``) and passage list entries (``anchors``: those it added;
        by default read from its ``D`` key)."""
        lists = self.lists()
        added = self.passages_added(art.seq)
        if anchors is None:
            anchors = anchors_of(added)
        points = self._cf[_POINTS]
        wb = WriteBatch(raw_mode=True)
        s8 = _u64(art.seq)
        wb.delete(b"A" + s8, points)
        self.record_store.delete(art.seq)
        wb.delete(_u64(int(art.first_seen * 1000)) + s8, self._cf[_TIME])
        wb.delete(DELETE_PREFIX + s8, points)
        self.count -= 1
        wb.put(b"Mstate", _STATE.pack(self.next_seq, self.count))
        lists_snapshot.log_deletion(self, wb, art, added)  # the lists' snapshot holds it: undone at a restart from it
        self.lists_behind = True
        self.db.write(wb)
        lists.ids.remove(key_tables.id_keys([art.article_id]), art.seq)  # (a key holding another seq keeps it)
        if art.indexed:
            lists.exacts.remove(key_tables.exact_keys([art.exact]), art.seq)
        if art.indexed and len(bucket_keys):
            lists.buckets.remove(bucket_keys, art.seq)
        if art.indexed and len(permuted):
            lists.simhash.remove(np.asarray(permuted, dtype=np.uint64), art.seq)
        lists.passages.remove(anchors, art.seq)
        self.lists_behind = False

    def oldest(self, before: float, limit: int) -> list[int]:
        """Seqs first seen before ``before`` (epoch seconds), oldest first."""
        it = self._time.iter()
        it.seek_to_first()
        out: list[int] = []
        bound = int(before * 1000)
        while it.valid() and len(out) < limit:
            key = it.key()
            if _U64.unpack_from(key, 0)[0] >= bound:
                break
            out.append(_U64.unpack_from(key, 8)[0])
            it.next()
        del it
        return out

    def disk_bytes(self) -> int:
        """Bytes of the RocksDB index on disk: every file of its directory but the lists' snapshot
        (:meth:`snapshot_bytes`)."""
        with os.scandir(self.path) as entries:
            return files_bytes(entries, snapshot=False)

    def snapshot_bytes(self) -> int:
        """Bytes of the in-memory lists' snapshot files in the index directory (the latest, and the
        next one while it is written)."""
        with os.scandir(self.path) as entries:
            return files_bytes(entries, snapshot=True)

    def snapshot_fresh(self) -> bool:
        """Whether the valid snapshot is so little behind the index that writing another when it
        closes is not worth it: the articles indexed since it and the deletions logged since, which
        the next open files again and applies (:func:`stream_dedup.lists_snapshot.load`), are at
        most :data:`CLOSE_SNAPSHOT_BEHIND` of the index. On the 1M index, writing the 1.1 GB took
        0.87-0.93 s of a one-record run's close, and filing 1 % of it again ~0.15 s."""
        if self.snapshot_next_seq is None or self.logged_deletions is None:
            return False
        behind = self.next_seq - self.snapshot_next_seq + self.logged_deletions
        return 0 <= behind <= CLOSE_SNAPSHOT_BEHIND * self.count

    def _snapshot_at_close(self) -> None:
        """The lists' snapshot written as the index closes, unless the valid one is fresh enough."""
        if self.snapshot_fresh():
            log.info("in-memory lists' snapshot kept, not written again: the articles indexed since it (%d) are at "
                     "most %.0f %% of the index and are filed again at the next open",
                     self.next_seq - self.snapshot_next_seq, 100 * CLOSE_SNAPSHOT_BEHIND)
            return
        self.snapshot_lists()

    def sync_for_exit(self) -> None:
        """Make everything written durable without flushing the memtables, for a process that ends
        next without closing the index (the ``dedup`` command:
        :func:`stream_dedup.cli.process_end.release_state`): the lists' snapshot (if
        :attr:`snapshot_on_close`, and unless the valid one is :meth:`snapshot_fresh`), then the
        write-ahead log synced to disk. The next open replays
        the log into the memtables and flushes them, as after a crash. Measured on 7,431 short items
        (scratch script): 12-13 ms, where closing took 46-57 ms (its flush sorts the hash memtable
        into a skip list, ~2 us a key); the next open 69-118 ms instead of 23-29. An index written
        without its log (``durable_writes=False``) is flushed instead."""
        self._stop_snapshot_writer()
        if self.snapshot_on_close:
            self._snapshot_at_close()
        if self.durable_writes:
            self.db.flush_wal(True)
        else:
            self.flush()

    def flush(self) -> None:
        for name in (_POINTS, _TIME):
            self.db.get_column_family(name).flush()
        self.db.flush()

    def snapshot_lists(self) -> bool:
        """Write the in-memory lists' snapshot (:mod:`stream_dedup.lists_snapshot`) if they are loaded
        and agree with RocksDB (not in the middle of a batch): a restart after a crash then loads it
        and files again only what changed since. True if it was written; an error is logged, not
        raised (the lists are then built from RocksDB at the next open)."""
        if self.lists_behind or self._lists is None:
            return False
        self._stop_snapshot_writer()
        try:
            lists_snapshot.save(self, self._lists)
        except OSError as exc:
            log.warning("could not write the in-memory lists' snapshot in %s: %s", self.path, exc)
            return False
        return True

    def start_snapshot(self) -> bool:
        """Write the lists' snapshot, its sync to disk in a thread while this process goes on
        (:class:`~stream_dedup.lists_snapshot.BackgroundSnapshot`); :meth:`snapshot_done` makes it
        valid once synced. False if the lists are not loaded, a batch is under way, one is still
        being synced, or the file could not be written (logged)."""
        if self.lists_behind or self._lists is None or self._snapshot_writer is not None:
            return False
        try:
            self._snapshot_writer = lists_snapshot.BackgroundSnapshot(self)
        except OSError as exc:
            log.warning("could not write the in-memory lists' snapshot in %s: %s", self.path, exc)
            return False
        return True

    def snapshot_done(self, block: bool = False) -> tuple[bool, float, float] | None:
        """None while no background snapshot has ended since the last call; else (written and now
        valid, seconds from its start to now, seconds the caller waited for the file's write)."""
        writer = self._snapshot_writer
        if writer is None:
            return None
        written = writer.poll(self, block)
        if written is None:
            return None
        self._snapshot_writer = None
        return written, time.monotonic() - writer.began, writer.paused

    def _stop_snapshot_writer(self) -> None:
        if self._snapshot_writer is not None:
            self._snapshot_writer.cancel()
            self._snapshot_writer = None

    def close(self) -> None:
        """Write the in-memory lists' snapshot (:meth:`snapshot_lists`; not if the valid one is
        :meth:`snapshot_fresh`), then close the database; the family handles are dropped too (they
        keep it open otherwise)."""
        self._stop_snapshot_writer()
        if self.snapshot_on_close:
            # the records' memtable is flushed on RocksDB's thread while the snapshot is written here
            # (close waits for it): 0.05 s of a 7,431 short-item run's close, 0.02-0.03 s of it overlapped
            self._points.flush(False)
            self._snapshot_at_close()
        self.db.close()
        self._points = self._time = self._receipts = None  # type: ignore[assignment]
        self._cf = {}


def files_bytes(entries: Iterable[os.DirEntry], snapshot: bool) -> int:
    """Bytes of the regular files among ``entries`` (of an index directory) that are (``snapshot``)
    or are not the lists' snapshot files. A file deleted after the directory was listed counts 0:
    RocksDB deletes a compaction's inputs and old logs at any time, and a stats line at that moment
    ended a 1M ``dedup`` run at 620,000 records (``FileNotFoundError`` from the stat)."""
    total = 0
    for entry in entries:
        if entry.is_file() and entry.name.startswith(lists_snapshot.SNAPSHOT_FILE) == snapshot:
            try:
                total += entry.stat().st_size
            except FileNotFoundError:
                continue
    return total


def record_writes(seq: int, record: bytes, passages: bytes,
                  first_seen: float) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """:meth:`Index.article_writes` of an article whose record is packed: its ``A`` and ``D`` (if
    ``passages``) writes, and its key in the time family."""
    points, times = run_writes(seq, [record], [passages], [first_seen])
    return points, times[0]


def run_writes(seq0: int, records: list[bytes], passages: list[bytes],
               first_seen: Sequence[float]) -> tuple[list[tuple[bytes, bytes]], list[bytes]]:
    """:func:`record_writes` of consecutive articles from seq ``seq0``: all their point writes in
    order, and their keys in the time family."""
    points: list[tuple[bytes, bytes]] = []
    times: list[bytes] = []
    pack = _U64.pack
    for k, (record, passage, now) in enumerate(zip(records, passages, first_seen, strict=True)):
        s8 = pack(seq0 + k)
        points.append((b"A" + s8, record))
        if passage:
            points.append((DELETE_PREFIX + s8, passage))
        times.append(pack(int(now * 1000)) + s8)
    return points, times


def _families_of(path: Path) -> list[str]:
    """The column families of the RocksDB in ``path`` (none if there is none yet)."""
    if not (path / "CURRENT").exists():
        return []
    return Rdict.list_cf(str(path), Options(raw_mode=True))


_screen = trusted(screen_candidates)
_lookup_candidates = trusted(lookup_candidates)  # the lists' own arrays, the keys kernels' uint64 outputs
_distinct_union = trusted(distinct_union)  # the tables' uint32 outputs (jit.trusted)
