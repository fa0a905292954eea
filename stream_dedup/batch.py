"""The index as one batch of decisions sees it: RocksDB as it was when the batch began, overlaid by
what the batch has written so far, and the batch's writes applied in one ``WriteBatch`` at the end.

:class:`BatchView` has the read methods the engine's decision needs (:meth:`seqs_of`,
:meth:`exact_seqs`, :meth:`article`, :meth:`lookup`, :meth:`compare`, the passage lists) and
answers each from the batch's own writes first, then from the index: its in-memory tables (the ids
and exact hashes of a whole batch in one lookup each, :mod:`stream_dedup.key_tables`) and the
records, each read at most once. The index is not written while a batch runs (a single
writer), so what was read stays true until the batch's own writes replace it. The bucket keys and
permuted SimHashes of the batch's articles are computed for all of them at once, by the ``dedup``
command's fingerprint processes when they fingerprinted them (:class:`KeyMaker`): a
:class:`~stream_dedup.fingerprint_batch.FingerprintBatch` goes into the compiled decisions' arrays
as it is (:func:`_batch_builder`), without a fingerprint object per article.

The in-memory lists (LSH buckets, SimHash tables, passage lists: :mod:`stream_dedup.memory_lists`)
are derived from RocksDB, and :meth:`insert` files each article in them at once, as one-by-one
decisions do: the next article's lookup is one probe of each (no overlay of the batch's own
members to merge: lookups 53 -> 25 us a dev article). Until the commit the lists are ahead of
RocksDB (``Index.lists_behind``: no snapshot is written meanwhile). The key tables (id -> seq,
exact hash -> seq) are filed at the commit instead, once RocksDB has the batch: until then the
batch's own ids and exact hashes are answered from its own writes.

:meth:`commit` writes everything, the index state and the last checkpoint of each name included, in
one atomic write (a crash leaves the whole batch applied or none of it). A batch that raises
before it (an interrupt included) leaves RocksDB as it was and :meth:`rollback` takes its articles
out of the lists again; where filing one made a bucket at its cap drop its oldest member (not
undone in place), the lists are dropped and built again from RocksDB when next used.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from rocksdict import WriteBatch

from .band_table import BandTable, bucket_keys
from .batch_decisions import _WORD_BYTES, Builder, EventBatch, FiledRun, _joined, decide_all
from .fingerprint import Fingerprint
from .fingerprint_batch import FingerprintBatch
from .index import _POINTS, _TIME, DEFAULT, Entry, Index, Lookup, _u64, run_writes
from .index_record import (
    NO_IDENTITY,
    StoredArticle,
    _record_ids,
    _unpack_record,
    record_exact,
    stored_signature,
)
from .key_tables import exact_keys, id_keys
from .passages import NO_ANCHORS
from .record_store import _store_put
from .simhash_table import _file_article

if TYPE_CHECKING:
    from .decision import Decision
    from .engine import Deduplicator
    from .list_table import MemberLists
    from .simhash import PermutedTables
    from .simhash_table import SimhashTable

__all__ = ["BatchKeys", "BatchPrepared", "BatchView", "KeyMaker", "Prepared", "run_batch"]
_UNKNOWN = object()  # a key not read yet
NO_KEYS = np.zeros(0, dtype=np.uint64)  # the bucket keys of an article without shingles
_UINT64 = np.dtype(np.uint64)


def run_batch(engine: Deduplicator, ids: list[str],
              fingerprints: Callable[[list[int]], list[Fingerprint] | FingerprintBatch],
              nows: Sequence[float], checkpoints: Sequence[tuple[str, int] | None] | None,
              receipts: Sequence[bytes | None] | None, events: EventBatch | None = None) -> list[Decision | str]:
    """The decisions of ``engine`` on ``ids`` (first seen at ``nows``) in order
    (:meth:`Deduplicator.decide_batch`; with ``events``, :meth:`Deduplicator.decide_batch_events`:
    the events the compiled calls write in place of their decisions): look the batch's ids up, fingerprint the unknown ones
    (``fingerprints(positions)``: theirs, in one call, as a list or a
    :class:`~stream_dedup.fingerprint_batch.FingerprintBatch`), look their exact hashes up (one
    key-table lookup each, :mod:`stream_dedup.key_tables`), decide in a :class:`BatchView`, write once."""
    view = BatchView(engine.index)
    stored = view.seqs_of(ids)
    fresh: set[str] = set()
    unknown: list[int] = []  # the positions of the first occurrence of each id not indexed (else a replay)
    for i, (article_id, seq) in enumerate(zip(ids, stored, strict=True)):
        if seq is None and article_id not in fresh:
            fresh.add(article_id)
            unknown.append(i)
    prepared: Sequence[Prepared | None] = [None] * len(ids)
    builder = None
    if unknown:
        found = fingerprints(unknown)
        if isinstance(found, FingerprintBatch):  # (its arrays straight into the compiled decisions', if it can)
            builder = _batch_builder(view, found, unknown, len(ids), engine)
            if builder is not None:
                prepared = BatchPrepared(found, unknown, builder, engine.config.num_perm)
            else:
                found = found.fingerprints()
        if builder is None:
            prepared = _prepared(found, unknown, len(ids), engine.config.num_perm)  # type: ignore[arg-type]
            if sum(p is not None for p in prepared) > 1:
                builder = _builder(view, prepared, engine)  # type: ignore[arg-type]
    try:
        if builder is None:
            decisions = [engine._decide(view, article_id, prepared[i], nows[i], checkpoints[i] if checkpoints else None,
                                        receipts[i] if receipts else None) for i, article_id in enumerate(ids)]
        else:
            decisions = decide_all(engine, view, ids, prepared, builder, nows, checkpoints, receipts, events)
        view.commit()
    except BaseException:  # (an interrupt too: the lists must not keep articles RocksDB never got)
        view.rollback()
        raise
    return decisions


def _prepared(fps: list[Fingerprint], positions: list[int], n: int, num_perm: int) -> list[Prepared | None]:
    """The prepared articles of a batch of ``n``: ``fps`` at ``positions``, None elsewhere."""
    prepared: list[Prepared | None] = [None] * n
    if len(fps) > 1 and all(fp.minhash.shape == (num_perm,) for fp in fps):
        # (their stored signatures converted in one call: rows of one array)
        sigs = stored_signature(np.stack([fp.minhash for fp in fps]))
        for i, fp, sig in zip(positions, fps, sigs, strict=True):
            prepared[i] = Prepared(fp, sig)
    else:
        for i, fp in zip(positions, fps, strict=True):
            prepared[i] = Prepared.of(fp, num_perm)
    return prepared


def _builder(view: BatchView, prepared: list[Prepared | None], engine: Deduplicator) -> Builder | None:
    """The compiled decisions' arrays (:mod:`stream_dedup.batch_decisions`) for the batch's articles
    with shingles (their keys made here for all), and for each the exact duplicate it may be
    (:func:`_exact_to`)."""
    positions = [i for i, p in enumerate(prepared) if p is not None and p.fp.n_shingles > 0]
    if len(positions) < 2:
        return None
    chosen: list[Prepared] = [prepared[i] for i in positions]  # type: ignore[misc]
    fps = [p.fp for p in chosen]
    signatures = np.stack([p.sig for p in chosen])
    simhashes = np.array([fp.simhash for fp in fps], dtype=np.uint64)
    exacts = [fp.exact for fp in fps]
    identity, identity_at = _joined([fp.identity for fp in fps], np.uint32)
    anchors, anchors_at = _joined([fp.anchors for fp in fps], np.uint64)
    return Builder(len(prepared), positions, [Builder.takes(p) for p in chosen], engine.index.buckets.keys(signatures),
                   engine.tables.permute_many(simhashes), signatures, simhashes,
                   np.array([fp.n_shingles for fp in fps], dtype=np.int64), exacts, [fp.words for fp in fps], identity,
                   identity_at, anchors, anchors_at, _exact_to(view, positions, exacts, len(prepared)))


def _batch_builder(view: BatchView, batch: FingerprintBatch, positions: list[int], n: int,
                   engine: Deduplicator) -> Builder | None:
    """:func:`_builder` from a :class:`~stream_dedup.fingerprint_batch.FingerprintBatch` of the articles
    at ``positions`` (its rows), its arrays taken as they are and its :class:`BatchKeys` if made for
    this index (a fingerprint process makes them: off the deciding core): no
    :class:`~stream_dedup.fingerprint.Fingerprint` per article. Rows without shingles, or computed
    otherwise (``batch.whole``), are left to Python (:class:`BatchPrepared`). None (take
    :func:`_builder`) if fewer than two rows are left, or the signatures are not of this index."""
    m = len(positions)
    if m < 2 or batch.minhash.shape != (m, engine.config.num_perm):
        return None
    starts = batch.starts()
    keys = batch.keys
    maker = KeyMaker.of(engine)
    if keys is None or keys.made_for != maker.made_for:
        keys = maker(batch)
    exacts = batch.exacts()
    exact_seqs = view.exact_seqs(exacts)
    words = batch.words
    word_at = starts[:, 1].tolist()
    chosen = batch.n_shingles > 0
    chosen[list(batch.whole)] = False
    if chosen.all():  # (most batches: the arrays as they are)
        rows = list(range(m))
        identity, identity_at = batch.identity, starts[:, 2]
        anchors, anchors_at = batch.anchors, starts[:, 0]
        signatures, bucket_keys_, permuted, simhashes, sizes = (keys.signatures, keys.keys, keys.permuted,
                                                                 batch.simhash, batch.n_shingles)
    else:
        rows = np.flatnonzero(chosen).tolist()
        if len(rows) < 2:
            return None
        i_at, a_at = starts[:, 2].tolist(), starts[:, 0].tolist()
        identity, identity_at = _joined([batch.identity[i_at[r]:i_at[r + 1]] for r in rows], np.uint32)
        anchors, anchors_at = _joined([batch.anchors[a_at[r]:a_at[r + 1]] for r in rows], np.uint64)
        signatures, bucket_keys_, permuted, simhashes, sizes = (keys.signatures[rows], keys.keys[rows],
                                                                 keys.permuted[rows], batch.simhash[rows],
                                                                 batch.n_shingles[rows])
    words_of = [words[word_at[r]:word_at[r + 1]] for r in rows]
    chosen_positions = [positions[r] for r in rows]
    chosen_exacts = [exacts[r] for r in rows]
    return Builder(n, chosen_positions, [len(w) in (0, _WORD_BYTES) for w in words_of], bucket_keys_, permuted,
                   signatures, simhashes, sizes, chosen_exacts, words_of, identity, identity_at, anchors, anchors_at,
                   _exact_to(view, chosen_positions, chosen_exacts, n, [exact_seqs[r] for r in rows]))


def _exact_to(view: BatchView, positions: list[int], exacts: list[bytes], n: int,
              stored: list[int | None] | None = None) -> np.ndarray:
    """For each of the batch's ``n`` articles the exact duplicate it may be: the seq of an indexed
    article with its exact hash, ``-2 - j`` for the batch's article ``j`` with it just before, -1
    for none (the articles at ``positions``, with ``exacts``: the kernel walks back through the
    batch's articles with the hash to the latest one indexed, whose exact hash the index maps to it then).
    ``stored``: their :meth:`BatchView.exact_seqs` if asked already."""
    last: dict[bytes, int] = {}  # each exact hash's latest article in the batch so far
    exact_to = np.full(n, -1, dtype=np.int64)
    if stored is None:
        stored = view.exact_seqs(exacts)
    for i, exact, seq in zip(positions, exacts, stored, strict=True):
        if seq is not None:  # (an indexed article's: the exact duplicate of its record, if held)
            exact_to[i] = seq
        else:  # (the batch's articles with this hash before it, latest first: the latest indexed one's)
            if exact in last:
                exact_to[i] = -2 - last[exact]
            last[exact] = i
    return exact_to


@dataclass(slots=True)
class BatchKeys:
    """What deciding on a :class:`~stream_dedup.fingerprint_batch.FingerprintBatch`'s rows needs
    besides their fingerprints, made where they were (:class:`KeyMaker`): their stored signatures
    (``>u2[n, num_perm]``), LSH bucket keys (``uint64[n, bands]``) and SimHashes permuted for each
    table (``uint64[n, tables]``), and the (bands, rows, SimHash k, blocks) they are made for."""
    made_for: tuple[int, int, int, int]
    signatures: np.ndarray
    keys: np.ndarray
    permuted: np.ndarray


class KeyMaker:
    """Makes the :class:`BatchKeys` of a batch for an index's banding and SimHash tables: in a
    ``dedup`` fingerprint process, where they cost the deciding process nothing
    (:mod:`stream_dedup.fingerprint_pool`)."""

    def __init__(self, banding: tuple[int, int], tables: PermutedTables) -> None:
        self.bands, self.rows = banding
        self.tables = tables
        self.made_for = (self.bands, self.rows, tables.k, tables.blocks)

    @classmethod
    def of(cls, engine: Deduplicator) -> KeyMaker:
        return cls(engine.index.banding, engine.tables)

    def __call__(self, batch: FingerprintBatch) -> BatchKeys:
        signatures = stored_signature(batch.minhash)
        return BatchKeys(self.made_for, signatures, bucket_keys(signatures, self.bands, self.rows),
                         self.tables.permute_many(batch.simhash))


class BatchPrepared:
    """The prepared articles of a batch decided from a :class:`~stream_dedup.fingerprint_batch.FingerprintBatch`
    of the articles at ``positions`` (:func:`_batch_builder`), each made when first asked for: only
    those the compiled loop leaves to :meth:`Deduplicator._decide <stream_dedup.engine.Deduplicator._decide>`
    are; None for a replay."""

    def __init__(self, batch: FingerprintBatch, positions: list[int], builder: Builder, num_perm: int) -> None:
        self.batch, self.builder, self.num_perm = batch, builder, num_perm
        self.row_of = {i: r for r, i in enumerate(positions)}  # the batch's row of each article at positions
        self.made: dict[int, Prepared] = {}

    def __len__(self) -> int:
        return self.builder.rows.shape[0]

    def __getitem__(self, i: int) -> Prepared | None:
        p = self.made.get(i)
        if p is None:
            r = self.row_of.get(i)
            if r is None:
                return None
            fp = self.batch.fingerprint(r)
            chosen = self.builder.chosen_row.get(i)  # (its signature converted already if the builder has it)
            p = self.made[i] = Prepared.of(fp, self.num_perm) if chosen is None else \
                Prepared(fp, self.builder.signatures[chosen])
        return p


@dataclass(slots=True)
class Prepared:
    """An article to decide on: its fingerprint, its stored signature (converted once for keys,
    verification and record), and, once asked for, its bucket keys and permuted SimHashes (and,
    made for a batch at once, its passage anchors' bytes: :func:`stream_dedup.passages.anchor_bytes`)."""
    fp: Fingerprint
    sig: np.ndarray
    buckets: np.ndarray | None = None
    permuted: np.ndarray | None = None
    anchor_bytes: bytes | None = None

    @classmethod
    def of(cls, fp: Fingerprint, num_perm: int) -> Prepared:
        if fp.minhash.shape[0] != num_perm:
            raise ValueError(f"fingerprint has {fp.minhash.shape[0]} permutations, index uses {num_perm}")
        return cls(fp, stored_signature(fp.minhash))

    def keys(self, buckets: BandTable, tables: PermutedTables) -> tuple[np.ndarray, np.ndarray]:
        """(LSH bucket keys, SimHash permuted for each table); none for an empty text."""
        if self.buckets is None:
            has_shingles = self.fp.n_shingles > 0
            self.buckets = buckets.keys(self.sig) if has_shingles else NO_KEYS
            self.permuted = tables.permute_array(self.fp.simhash) if has_shingles else NO_KEYS
        return self.buckets, self.permuted


def _uint64_keys(keys: np.ndarray | list[int]) -> np.ndarray:
    """``keys`` as a C-ordered uint64 array (itself when it is one: the engine's own)."""
    if type(keys) is np.ndarray and keys.dtype == _UINT64 and keys.flags.c_contiguous:
        return keys
    return np.ascontiguousarray(keys, dtype=np.uint64)


class BatchView:
    """Reads through the batch's writes; writes kept until :meth:`commit` (see the module doc)."""

    def __init__(self, index: Index) -> None:
        self.index = index
        self.next_seq = self.first_seq = index.next_seq
        self.written: dict[int, bytes] = {}  # seq -> record of the articles this batch indexed
        self.count = index.count
        self.num_perm = index.num_perm
        self.known: dict[str, dict[bytes, bytes | None]] = {_POINTS: {}}  # read or written
        self.known_points = self.known[_POINTS]
        self.batch = WriteBatch(raw_mode=True)  # the batch's writes (a later put of a key wins)
        self.families = index._cf  # the handles of the families but the default one
        self.points_family, self.time_family = self.families[_POINTS], self.families[_TIME]
        self.writes = 0
        self.checkpoints: dict[str, int] = {}  # name -> the batch's last checkpoint offset (put at commit)
        # the batch's articles' ids (all) and exact hashes (those indexed) -> seq: filed in the key tables at the commit
        self.new_ids: dict[str, int] = {}
        self.new_exacts: dict[bytes, int] = {}
        self.asked: tuple[Sequence[str], np.ndarray] = ((), NO_KEYS)  # the ids of the last seqs_of and their keys
        store = index.record_store
        self.store_arrays = (store.buf, store.keys, store.vals, store.meta)
        lists = index.lists()  # loaded or built now if not: before this batch's write
        self.buckets, self.lists, self.simhash, self.ids, self.exacts = lists
        self.passages = self.lists  # (what :func:`stream_dedup.passages.lookup` reads)
        # (list, keys, seq) the batch filed, in order (:meth:`rollback` takes them out again), and the
        # bucket table's member count before it (a bucket over its cap drops its oldest: not undone)
        # (a run of articles the compiled call filed: its FiledRun, expanded into those at a rollback)
        self.filed: list[tuple[BandTable | MemberLists | SimhashTable, np.ndarray, int] | FiledRun] = []
        self.bucket_members = int(self.buckets.meta[3])
        self.bucket_entries = 0

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

    def seqs_of(self, ids: Sequence[str]) -> list[int | None]:
        """The seq of each of ``ids`` if indexed, else None: the batch's own, else the id table's
        (one lookup for all), each hit checked against the id its record holds."""
        num_perm = self.num_perm
        keys = id_keys(ids)
        self.asked = (ids, keys)  # (the batch's ids are most often all new: their keys filed at the commit)
        out = self.ids.checked(keys, self.records, lambda i, r: _record_ids(r, num_perm)[0] == ids[i])
        if self.new_ids:
            new = self.new_ids
            out = [new.get(a, s) for a, s in zip(ids, out, strict=True)]
        return out

    def exact_seqs(self, exacts: list[bytes]) -> list[int | None]:
        """The seq of the indexed article with each of the exact hashes ``exacts``, else None: the
        batch's own, else the exact-hash table's (one lookup for all), each hit checked against
        the exact hash its record holds."""
        out = self.exacts.checked(exact_keys(exacts), self.records, lambda i, r: record_exact(r) == exacts[i])
        if self.new_exacts:
            new = self.new_exacts
            out = [new.get(e, s) for e, s in zip(exacts, out, strict=True)]
        return out

    def seq_of(self, article_id: str) -> int | None:
        return self.seqs_of([article_id])[0]

    def exact_match(self, exact: bytes) -> int | None:
        return self.exact_seqs([exact])[0]

    def article(self, seq: int) -> StoredArticle | None:
        v = self.get_one(b"A" + _u64(seq))
        return None if v is None else _unpack_record(seq, v, self.num_perm)

    def records(self, seqs: list[int]) -> list[bytes | None]:
        """The raw records of ``seqs`` (None: not indexed): this batch's own, else the index's
        (:meth:`Index.records`, through its record store)."""
        written = self.written
        out = [written.get(s) for s in seqs]
        if None in out:
            first = self.first_seq
            older = iter(self.index.records([s for s, v in zip(seqs, out, strict=True) if v is None and s < first]))
            out = [next(older) if v is None and s < first else v for s, v in zip(seqs, out, strict=True)]
        return out

    def screen(self, seqs: list[int], minhash: np.ndarray, simhash: int, n_shingles: int, jaccard_of: np.ndarray,
               rules: np.ndarray) -> tuple[list[int], list[bytes], list[int], list[int], list[int], list[int]]:
        """:meth:`Index.screen` on the records as the batch sees them."""
        return self.index.screen(seqs, minhash, simhash, n_shingles, jaccard_of, rules, self.records(seqs))

    def candidates(self, bucket_keys: np.ndarray, permuted: np.ndarray, max_distance: int) -> np.ndarray:
        """:meth:`Index.candidates` (the batch's articles are in the lists already)."""
        return self.index.candidates(bucket_keys, permuted, max_distance)

    def lookup(self, bucket_keys: np.ndarray, permuted: np.ndarray, max_distance: int) -> Lookup:
        """:meth:`Index.lookup`: the batch's articles are in the lists already (filed by :meth:`insert`)."""
        return self.index.lookup(bucket_keys, permuted, max_distance)

    # -- writes -----------------------------------------------------------------------------
    def insert(self, *, article_id: str, first_seen: float, simhash: int, n_shingles: int, exact: bytes,
               minhash: np.ndarray, root_id: str, decision: dict | list | bytes, bucket_keys: np.ndarray, permuted: np.ndarray,
               index_sketches: bool, checkpoint: tuple[str, int] | None, receipt: bytes | None = None,
               identity: np.ndarray = NO_IDENTITY, anchors: int = 0, words: bytes = b"",
               postings: tuple[np.ndarray, bytes] = (NO_ANCHORS, b"")) -> int:
        """Index an article in the batch (the arguments of :meth:`Index.article_writes`): it gets the
        next seq and is filed in the lists at once (the next article's lookup finds it); its writes
        wait for :meth:`commit` (:meth:`Index.insert` is a batch of one)."""
        seq = self.write_article(article_id=article_id, first_seen=first_seen, simhash=simhash, n_shingles=n_shingles,
                                 exact=exact, minhash=minhash, root_id=root_id, decision=decision,
                                 index_sketches=index_sketches, checkpoint=checkpoint, receipt=receipt,
                                 identity=identity, anchors=anchors, words=words, postings=postings)
        joins = postings[0]
        if not index_sketches:
            bucket_keys = permuted = NO_KEYS
        else:  # (the filing kernel reads them unchecked: the engine's are uint64 already)
            permuted, bucket_keys = _uint64_keys(permuted), _uint64_keys(bucket_keys)
        if self.note_filed(bucket_keys, permuted, joins, seq, reserve=True):
            # the three filed in one call (file_article: ~1.7 us less than a call each)
            buckets, simhash, lists = self.buckets, self.simhash, self.lists
            _file_article(*buckets._args, bucket_keys, simhash.fps, simhash.tags, simhash.seqs, simhash.meta, permuted,
                          simhash.masks, *lists._args, joins, seq, buckets.cap, lists.cap)
        return seq

    def write_article(self, *, article_id: str, first_seen: float, simhash: int, n_shingles: int, exact: bytes,
                      minhash: np.ndarray, root_id: str, decision: dict | list | bytes, index_sketches: bool,
                      checkpoint: tuple[str, int] | None, receipt: bytes | None = None,
                      identity: np.ndarray = NO_IDENTITY, anchors: int = 0, words: bytes = b"",
                      postings: tuple[np.ndarray, bytes] = (NO_ANCHORS, b"")) -> int:
        """:meth:`insert` but the filing in the lists (done by the caller: :meth:`note_filed`): the
        article's seq, its writes kept for :meth:`commit`, its record in the record store."""
        index = self.index
        seq = index.check_seq(self.next_seq)
        points, time_key = index.article_writes(seq, article_id=article_id, first_seen=first_seen, simhash=simhash,
                                                n_shingles=n_shingles, exact=exact, minhash=minhash, root_id=root_id,
                                                decision=decision, index_sketches=index_sketches, identity=identity,
                                                anchors=anchors, words=words, postings=postings)
        self._apply(seq, points, time_key, checkpoint, receipt)
        self.new_ids[article_id] = seq
        if index_sketches:
            self.new_exacts[exact] = seq
        # (read from the record store by the next articles' verifications: its kernel called directly, ~0.8 us less)
        _store_put(*self.store_arrays, seq, np.frombuffer(points[0][1], dtype=np.uint8))
        return seq

    def write_records(self, records: list[bytes], ids: list[str], exacts: list[bytes | None], passages: list[bytes],
                      nows: Sequence[float], checkpoints: Sequence[tuple[str, int] | None] | None,
                      receipts: Sequence[bytes | None] | None) -> None:
        """The writes of packed records (:func:`~stream_dedup.index.run_writes`), as those of the
        next seqs in order: ``exacts[i]`` None if article ``i`` is not indexed, ``passages[i]`` its
        ``D`` value. Not put in the record store: the caller puts them all at once
        (:meth:`RecordStore.put_packed`) before any is read there."""
        if not records:
            return
        seq0, n = self.next_seq, len(records)
        self.index.check_seq(seq0 + n - 1)
        points, times = run_writes(seq0, records, passages, nows)
        seqs = range(seq0, seq0 + n)
        self.new_ids.update(zip(ids, seqs, strict=True))
        new_exacts = self.new_exacts
        for exact, seq in zip(exacts, seqs, strict=True):
            if exact is not None:
                new_exacts[exact] = seq
        put, cf, tf = self.batch.put, self.points_family, self.time_family
        for key, value in points:  # (the points family's, read again by this batch: known)
            put(key, value, cf)
        self.known_points.update(points)
        for key in times:
            put(key, b"", tf)
        self.written.update(zip(seqs, records, strict=True))
        self.next_seq, self.count = seq0 + n, self.count + n
        self.writes += len(points) + n
        if checkpoints or receipts:
            for checkpoint, receipt in zip(checkpoints or [None] * n, receipts or [None] * n, strict=True):
                if checkpoint is not None or receipt is not None:
                    self.mark(checkpoint, receipt, False)

    def _apply(self, seq: int, points: list[tuple[bytes, bytes]], time_key: bytes, checkpoint: tuple[str, int] | None,
               receipt: bytes | None) -> None:
        """Article ``seq``'s writes (its record first) into the batch."""
        self.next_seq, self.count = seq + 1, self.count + 1
        self.written[seq] = points[0][1]
        put, cf, known = self.batch.put, self.points_family, self.known_points
        for key, value in points:  # (the points family's, read again by this batch: known)
            put(key, value, cf)
            known[key] = value
        put(time_key, b"", self.time_family)
        self.writes += len(points) + 1
        if checkpoint is not None or receipt is not None:
            self.mark(checkpoint, receipt, False)

    def note_filed(self, bucket_keys: np.ndarray, permuted: np.ndarray, joins: np.ndarray, seq: int,
                   reserve: bool = False) -> bool:
        """Note that article ``seq`` is (about to be) filed under these keys of each list, for
        :meth:`rollback` (and, with ``reserve``, make room for it in each first); False if under none."""
        if not (permuted.shape[0] or bucket_keys.shape[0] or joins.shape[0]):
            return False
        self.index.lists_behind = True  # the lists are ahead of RocksDB until the commit (no snapshot)
        # each list noted first (a rollback of an entry never filed is a no-op)
        filed = self.filed
        if permuted.shape[0]:
            filed.append((self.simhash, permuted, seq))
            if reserve:
                self.simhash.reserve(permuted.shape[0])
        if bucket_keys.shape[0]:
            filed.append((self.buckets, bucket_keys, seq))
            self.bucket_entries += bucket_keys.shape[0]
            if reserve:
                self.buckets.reserve(bucket_keys.shape[0])
        if joins.shape[0]:
            filed.append((self.lists, joins, seq))
            if reserve:
                self.lists.reserve(joins.shape[0])
        return True

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
        index.db.write(self.batch)
        self.batch, self.writes, self.written = WriteBatch(raw_mode=True), 0, {}
        self.first_seq = self.next_seq
        self._file_keys()
        self._settled()

    def _file_keys(self) -> None:
        """File the batch's ids and exact hashes in the key tables (RocksDB has the batch now)."""
        new_ids, new_exacts = self.new_ids, self.new_exacts
        self.new_ids, self.new_exacts = {}, {}
        if self.index._lists is None or self.index._lists.ids is not self.ids:
            return  # (the lists were dropped: built again from RocksDB, this batch included)
        try:
            if new_ids:
                ids = list(new_ids)
                asked, keys = self.asked
                self.ids.add_entries(keys if ids == asked else id_keys(ids),
                                     np.fromiter(new_ids.values(), np.uint32, len(ids)))
            if new_exacts:
                self.exacts.add_entries(exact_keys(list(new_exacts)),
                                        np.fromiter(new_exacts.values(), np.uint32, len(new_exacts)))
        except BaseException:
            self.index.drop_lists()  # (they would miss some of RocksDB's articles)
            raise

    def rollback(self) -> None:
        """Take the batch's articles out of the lists again (the batch raised before its write
        reached RocksDB). A bucket that dropped its oldest member for one of them cannot be
        restored: then the index's lists are dropped, to be built again from RocksDB when next used."""
        for seq in self.written:  # (their seqs are numbered again by the next batch)
            self.index.record_store.delete(seq)
        self.new_ids, self.new_exacts = {}, {}
        filed, self.filed = self.filed, []
        if not filed:
            return
        if int(self.buckets.meta[3]) != self.bucket_members + self.bucket_entries:
            self.index.drop_lists()
            return
        for entry in reversed(filed):
            for table, keys, seq in (entry.entries(self) if isinstance(entry, FiledRun) else (entry,)):
                table.remove(keys, seq)
        self._settled()

    def _settled(self) -> None:
        """The lists and RocksDB agree again."""
        self.filed = []
        self.bucket_members, self.bucket_entries = int(self.buckets.meta[3]), 0
        self.index.lists_behind = False

