"""A batch's decisions through the compiled loop (:mod:`stream_dedup.decide_kernel`): its arrays
made once for the batch (:class:`Builder`), the loop run as far as it goes, each article it stops at
decided by :meth:`Deduplicator._decide <stream_dedup.engine.Deduplicator._decide>`, and the
decisions the loop left built and written (:func:`decide_all`).

Python builds each :class:`~stream_dedup.decision.Decision` from the numbers the loop left; a
run's records are made in one compiled call (:func:`stream_dedup.record_kernel.pack_run`, which
also makes the stored decisions of new articles and of verified and exact duplicates), written into the batch
(:meth:`BatchView.write_records <stream_dedup.batch.BatchView.write_records>`) and put in the record
store, each at once; what the loop filed is noted once per run
(:class:`FiledRun`), for a rollback. For a writer of events (the ``dedup`` command:
:class:`EventBatch`) a second compiled call writes the events of those articles instead
(:func:`stream_dedup.event_kernel.write_events`), and Python makes only the decisions it leaves
(the deciding path in process on ten rounds of short items: 2.18 against 2.43 s of CPU for 74,310
records, ~3 us a record less). ``tests/engine/test_batch_decisions.py`` compares the
decisions and the whole index with those of one-by-one decisions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from . import decide_kernel as _k
from . import rewrite, stored_decision
from .decide_kernel import R_BEST, R_COLUMNS, R_INDEXED, R_JOINS, _decide_run
from .decision import _METHODS_OF_HITS, Decision, exact_copy, look_alike, verified
from .event_kernel import COMPACT_FRAGMENTS, FRAGMENTS, _write_events
from .index import _MAX_SEQ
from .index_record import _LENGTHS, _RECORD
from .passages import ANCHOR_BYTES, anchor_bytes
from .record_kernel import _loose_rows, _pack_run
from .stored_decision import EXACT_HEAD, NEW_HEAD, VERIFIED_HEADS

if TYPE_CHECKING:
    from .band_table import BandTable
    from .batch import BatchView, Prepared
    from .engine import Deduplicator
    from .list_table import MemberLists
    from .simhash_table import SimhashTable

__all__ = ["Builder", "EventBatch", "FiledRun", "decide_all"]

_WORD_BYTES = rewrite.WORD_BITS // 8
_RECORD_HEAD, _LENGTH_BYTES = _RECORD.size, _LENGTHS.size  # (a record's bytes before its signature, its lengths)
# (_written unpacks each article's row of the result in this order)
assert (_k.R_CANDIDATES, _k.R_BEST, _k.R_TEMPLATE, _k.R_AGREED, _k.R_HITS, _k.R_DIRECTION, _k.R_HAMMING, _k.R_JACCARD,
        _k.R_CONTAINMENT, _k.R_TEMPLATE_JACCARD, _k.R_INDEXED, _k.R_JOINS, _k.R_AT, _k.R_LENGTH, _k.R_EXACT) \
    == tuple(range(R_COLUMNS))
_EXACT_BYTES = 16  # (the exact hash's bytes in a record)
_FIRST_METHOD = ["exact", *(methods[0] for methods in _METHODS_OF_HITS[1:])]  # (by event_kernel's method key)
assert _RECORD.format.endswith(f"{_EXACT_BYTES}s")


class Builder:
    """The arrays :func:`~stream_dedup.decide_kernel.decide_run` reads for a batch, made once from its articles' fingerprints."""

    def __init__(self, n: int, positions: list[int], fast: list[bool], keys: np.ndarray, permuted: np.ndarray,
                 signatures: np.ndarray, simhashes: np.ndarray, sizes: np.ndarray, exacts: list[bytes],
                 words: list[bytes], identity: np.ndarray, identity_at: np.ndarray, anchors: np.ndarray,
                 anchors_at: np.ndarray, exact_to: np.ndarray) -> None:
        """A batch of ``n`` articles; rows for those with shingles, at ``positions`` of the batch,
        ``fast`` saying which the kernel may take (:meth:`takes`, not exact duplicates); per row:
        ``keys``, ``permuted``, ``signatures``: bucket keys, permuted SimHashes and stored signatures
        (rows), ``simhashes``, set ``sizes``, ``exacts``, content-word bitmaps ``words``; their
        identity sketches and passage anchors end to end (row ``r``'s from ``*_at[r]`` to
        ``*_at[r + 1]``); ``exact_to``: the exact duplicate each article may be (:func:`stream_dedup.batch._exact_to`)."""
        m = len(positions)
        self.exact_to = exact_to
        self.rows = np.full(n, -1, dtype=np.int64)
        self.rows[[i for i, f in zip(positions, fast, strict=True) if f]] = \
            [r for r, f in enumerate(fast) if f]
        self.chosen_row = {i: r for r, i in enumerate(positions)}  # every chosen article's row
        self.keys, self.permuted, self.signatures = keys, permuted, signatures
        self.queries = signatures.astype(np.int64)
        self.signature_size = 2 * signatures.shape[1]  # (a stored signature's bytes in a record)
        self.simhashes = np.ascontiguousarray(simhashes, dtype=np.uint64)
        self.sizes = np.ascontiguousarray(sizes, dtype=np.int64)
        self.exact_of = exacts  # (what _written writes under X)
        joined = b"".join(exacts)
        if len(joined) != _EXACT_BYTES * m:  # (as struct packs "16s": padded with zeros or cut)
            joined = b"".join(e[:_EXACT_BYTES].ljust(_EXACT_BYTES, b"\0") for e in exacts)
        self.exacts = np.frombuffer(joined, dtype=np.uint8).reshape(m, _EXACT_BYTES)
        self.has_words = np.array([len(w) == _WORD_BYTES for w in words], dtype=np.bool_)
        self.words = np.zeros((m, _WORD_BYTES), dtype=np.uint8)
        if self.has_words.any():
            self.words[self.has_words] = np.frombuffer(b"".join(w for w in words if len(w) == _WORD_BYTES),
                                                       dtype=np.uint8).reshape(-1, _WORD_BYTES)
        self.identity = np.ascontiguousarray(identity, dtype=np.uint32)
        self.identity_at = np.ascontiguousarray(identity_at, dtype=np.int64)
        self.row_of: list[int] = self.rows.tolist()  # (Python ints: read per article)
        self.anchors = np.ascontiguousarray(anchors, dtype=np.uint64)
        self.anchors_at = np.ascontiguousarray(anchors_at, dtype=np.int64)
        self.anchors_at_of: list[int] = self.anchors_at.tolist()  # (Python ints: read per article)
        self.anchor_count: list[int] = np.diff(self.anchors_at).tolist()
        self.all_anchor_bytes = anchor_bytes(self.anchors)
        # (room for each row's provisional record: decide_kernel._write_provisional)
        record_bytes = (_RECORD_HEAD + self.signature_size + _LENGTH_BYTES + 4 * np.diff(self.identity_at)
                        + _WORD_BYTES * self.has_words)
        self.provisional_at = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(record_bytes, out=self.provisional_at[1:])
        self.provisional = np.zeros(int(self.provisional_at[-1]), dtype=np.uint8)
        # (the stored signatures and identity sketches as records keep them: big-endian, row after row)
        self.signature_u8 = np.frombuffer(signatures.astype(">u2").tobytes(), dtype=np.uint8)
        self.identity_u8 = np.frombuffer(self.identity.astype(">u4").tobytes(), dtype=np.uint8)
        self.result = np.zeros((n, R_COLUMNS), dtype=np.float64)
        self.joined = np.zeros(self.anchors.shape[0], dtype=np.uint8)  # per anchor: the article joins its list
        self.stop = np.zeros(1, dtype=np.int64)

    @staticmethod
    def takes(p: Prepared | None) -> bool:
        """Whether :func:`~stream_dedup.decide_kernel.decide_run` can decide on ``p`` (not whether it will: see the module doc)."""
        return p is not None and p.fp.n_shingles > 0 and len(p.fp.words) in (0, _WORD_BYTES)

    def run(self, view: BatchView, start: int, settings: np.ndarray, index_below: float, rules_arrays: tuple) -> int:
        """:func:`~stream_dedup.decide_kernel.decide_run` from ``start`` with the view's lists and record store: the position it
        stopped at (:attr:`stop` says why). Room for every remaining article's entries is made first."""
        rows = self.rows[start:]
        todo = rows[rows >= 0]
        buckets, simhash, lists = view.buckets, view.simhash, view.lists
        if todo.shape[0]:
            buckets.reserve(int(todo.shape[0]) * self.keys.shape[1])
            simhash.reserve(int(todo.shape[0]) * self.permuted.shape[1])
            joins = int((self.anchors_at[todo + 1] - self.anchors_at[todo]).sum())
            if joins:
                lists.reserve(joins)
        store = view.index.record_store
        return _decide_run(start, view.next_seq, self.rows, self.keys, self.permuted, self.queries, self.simhashes,
                           self.sizes, self.words, self.has_words, self.identity, self.identity_at, self.exact_to,
                           self.anchors,
                           self.anchors_at, *buckets._args, simhash.fps, simhash.tags, simhash.seqs, simhash.old_fps,
                           simhash.old_tags, simhash.old_seqs, simhash.meta, simhash.masks, *lists._args, store.buf,
                           store.keys, store.vals, *rules_arrays, settings, index_below, self.signature_u8,
                           self.identity_u8, self.provisional, self.provisional_at, self.result, self.joined, self.stop)

    def prepare(self, i: int, p: Prepared | None) -> None:
        """Give article ``i`` (if it has shingles) its keys and anchors' bytes from the batch's arrays
        (:class:`~stream_dedup.batch.Prepared`: for :meth:`Deduplicator._decide <stream_dedup.engine.Deduplicator._decide>`)."""
        r = self.chosen_row.get(i)
        if r is not None and p is not None and p.buckets is None:
            p.buckets, p.permuted = self.keys[r], self.permuted[r]
            p.anchor_bytes = self._anchor_bytes(r)

    def _anchor_bytes(self, r: int) -> bytes:
        """The bytes of all the anchors of row ``r`` (:func:`stream_dedup.passages.anchor_bytes`)."""
        at = self.anchors_at_of
        return self.all_anchor_bytes[ANCHOR_BYTES * at[r]:ANCHOR_BYTES * at[r + 1]]

    def joins(self, i: int) -> tuple[np.ndarray, bytes]:
        """The anchors whose passage lists article ``i`` joined (:func:`~stream_dedup.decide_kernel.decide_run` left ``R_JOINS``
        of them) and its ``D`` value (:func:`stream_dedup.passages.posting_writes`)."""
        r = self.row_of[i]
        a0, a1 = self.anchors_at_of[r], self.anchors_at_of[r + 1]
        if int(self.result[i, R_JOINS]) == a1 - a0:  # all of them (most new articles)
            return self.anchors[a0:a1], self._anchor_bytes(r)
        adds = self.anchors[a0:a1][self.joined[a0:a1].view(np.bool_)]
        return adds, anchor_bytes(adds)

    def pack(self, start: int, stop: int, seq0: int, nows: Sequence[float], ids: list[str], given: list[bytes],
             store: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The records of articles ``start:stop`` (seqs from ``seq0``; ``ids`` theirs) end to end, and
        where each ends (:func:`~stream_dedup.record_kernel.pack_run`; ``given``: the stored decisions
        Python made, empty for those made there; ``store``: the record store's buffer)."""
        joined = "".join(ids)
        id_at = np.zeros(len(ids) + 1, dtype=np.int64)
        if joined.isascii():  # (most runs: one encode, a character a byte)
            id_bytes = joined.encode("ascii")
            np.cumsum(np.fromiter(map(len, ids), np.int64, len(ids)), out=id_at[1:])
        else:
            encoded = [i.encode("utf-8", "surrogatepass") for i in ids]
            id_bytes = b"".join(encoded)
            np.cumsum(np.fromiter(map(len, encoded), np.int64, len(ids)), out=id_at[1:])
        given_at = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, given), np.int64, len(ids)), out=given_at[1:])
        first_seen = np.array(nows[start:stop], dtype=np.float64).view(np.uint64)
        ends = np.zeros(len(ids), dtype=np.int64)
        records = _pack_run(self.result, start, stop, seq0, self.rows, first_seen, self.simhashes, self.sizes,
                            self.exacts, self.signature_u8, self.signature_size, self.identity_u8, self.identity_at,
                            self.anchors_at, self.words, self.has_words,
                            np.frombuffer(id_bytes, dtype=np.uint8), id_at,
                            np.frombuffer(b"".join(given), dtype=np.uint8), given_at, VERIFIED_HEADS, EXACT_HEAD, NEW_HEAD,
                            store,
                            ends)
        return records, ends

    def events(self, start: int, stop: int, seq0: int, records: np.ndarray, ends: np.ndarray, buf: np.ndarray,
               tally: EventBatch, run: _RunIds) -> tuple[list[str], list[int]]:
        """The events of articles ``start:stop`` that :func:`~stream_dedup.event_kernel.write_events`
        writes (their records ``records``, ending at ``ends``; ``buf``: the record store's), counted
        in ``tally``, and the positions in the run of those it leaves (their events empty)."""
        n = stop - start
        event_ends = np.zeros(n, dtype=np.int64)
        done = np.zeros(n, dtype=np.uint8)
        root_spans = np.zeros((n, 2), dtype=np.int64)
        data = _write_events(self.result, start, stop, seq0, records, ends, self.signature_size, buf,
                             *(COMPACT_FRAGMENTS if tally.compact else FRAGMENTS), event_ends, done, root_spans)
        raw = data.tobytes()
        text = raw.decode("utf-8")
        at = event_ends.tolist()
        if len(text) == len(raw):  # (ASCII: a byte a character)
            out = [text[a:b] for a, b in zip([0, *at[:-1]], at, strict=True)]
        else:
            out = [raw[a:b].decode("utf-8") for a, b in zip([0, *at[:-1]], at, strict=True)]
            text = None
        res = self.result[start:stop]
        written = done.view(np.bool_)
        duplicate = res[:, R_BEST] >= 0
        tally.new += (np.flatnonzero(written & ~duplicate) + start).tolist()
        wk = np.flatnonzero(written)
        tally.written += (wk + start).tolist()
        tally.candidates += res[wk, _k.R_CANDIDATES].astype(np.int64).tolist()
        dk = np.flatnonzero(written & duplicate)
        if dk.shape[0]:
            keys = np.where(res[dk, _k.R_EXACT] != 0, 0, res[dk, _k.R_HITS]).astype(np.int64).tolist()
            tally.methods += [_FIRST_METHOD[key] for key in keys]
            tally.similarities += res[dk, _k.R_JACCARD].tolist()
            if tally.with_roots:
                roots = tally.roots
                for k, (a, b) in zip(dk.tolist(), root_spans[dk].tolist(), strict=True):
                    roots.append(run.root(k) if a < 0 else text[a:b] if text is not None else raw[a:b].decode("utf-8"))
        return out, np.flatnonzero(~written).tolist()

    def joined_bytes(self, i: int, r: int, joins: float) -> bytes:
        """:meth:`joins`' ``D`` value of article ``i`` (row ``r``, ``joins`` lists joined), without
        the anchors' array when it joined all of its anchors' lists (most new articles)."""
        return self._anchor_bytes(r) if joins == self.anchor_count[r] else self.joins(i)[1]


@dataclass(slots=True)
class EventBatch:
    """A batch decided for a writer of events (:meth:`Deduplicator.decide_batch_events
    <stream_dedup.engine.Deduplicator.decide_batch_events>`): per article (``items``) its event's
    JSON where a compiled call wrote it (:meth:`Builder.events`), else its :class:`Decision`; and
    what the events written so say, for a summary without their decisions: the positions in the
    batch of the new articles, and each duplicate's method, root id and similarity, in order."""
    items: list[Decision | str] = field(default_factory=list)
    #: the events in orjson's compact form (the worker's), not ``event_json``'s
    compact: bool = False
    #: whether ``roots`` is kept (the ``dedup`` command's summary counts clusters; the worker does not)
    with_roots: bool = True
    new: list[int] = field(default_factory=list)
    methods: list[str] = field(default_factory=list)
    roots: list[str] = field(default_factory=list)
    similarities: list[float] = field(default_factory=list)
    #: the positions of all the events written compiled, in order, and their articles' candidates
    written: list[int] = field(default_factory=list)
    candidates: list[int] = field(default_factory=list)


def _joined(parts: list[np.ndarray], dtype: type) -> tuple[np.ndarray, np.ndarray]:
    """The arrays ``parts`` end to end, and where each begins (one more: the end)."""
    at = np.zeros(len(parts) + 1, dtype=np.int64)
    if not parts:
        return np.zeros(0, dtype=dtype), at
    np.cumsum([p.shape[0] for p in parts], out=at[1:])
    return np.ascontiguousarray(np.concatenate(parts), dtype=dtype), at


def decide_all(engine: Deduplicator, view: BatchView, ids: list[str], prepared: Sequence[Prepared | None],
               builder: Builder, nows: Sequence[float], checkpoints: Sequence[tuple[str, int] | None] | None,
               receipts: Sequence[bytes | None] | None, tally: EventBatch | None = None) -> list[Decision | str]:
    """The batch's decisions, in order: :func:`~stream_dedup.decide_kernel.decide_run` as far as it goes, each article it
    stops at by :meth:`Deduplicator._decide <stream_dedup.engine.Deduplicator._decide>`. With a
    ``tally``, the events of those the compiled calls write instead of their decisions (:func:`_written`)."""
    from .engine import MAX_VERIFY  # (the engine imports this module)

    n = len(ids)
    decisions: list[Decision | str] = []
    c = engine.config
    rules = engine._compiled
    settings = np.array([c.simhash_k, MAX_VERIFY, *engine._short_range, view.buckets.cap, view.lists.cap, _MAX_SEQ,
                         c.passage_common_docs, c.passage_min_shared], dtype=np.int64)
    i = 0
    while i < n:
        if builder.rows[i] >= 0:
            seq0 = view.next_seq
            stop = builder.run(view, i, settings, c.index_below_similarity,
                               (rules.jaccard_of, rules.jaccard4_of, rules.rules, rules.params, rules.counts, rules.out,
                                rules.summary, rules.passed, rules.starts, rules.lengths))
            _note_run(view, builder, i, stop, seq0)
            decisions += _written(engine, view, builder, ids, i, stop, nows, checkpoints, receipts, tally)
            i = stop
            if i == n:
                continue
        builder.prepare(i, prepared[i])
        decisions.append(engine._decide(view, ids[i], prepared[i], nows[i], checkpoints[i] if checkpoints else None,
                                        receipts[i] if receipts else None))
        i += 1
    return decisions


def _note_run(view: BatchView, builder: Builder, start: int, stop: int,
              seq0: int) -> None:
    """Note what :func:`~stream_dedup.decide_kernel.decide_run` filed for articles ``start:stop`` (:class:`FiledRun`), before
    anything else can raise: a rollback takes them out again."""
    indexed = int(builder.result[start:stop, R_INDEXED].sum())
    if indexed:
        view.index.lists_behind = True  # the lists are ahead of RocksDB until the commit (no snapshot)
        view.bucket_entries += indexed * builder.keys.shape[1]
        view.filed.append(FiledRun(builder, start, stop, seq0))


@dataclass(slots=True)
class FiledRun:
    """Articles ``start:stop`` of a batch, seqs from ``seq0``, as :func:`~stream_dedup.decide_kernel.decide_run` filed them."""
    builder: Builder
    start: int
    stop: int
    seq0: int

    def entries(self, view: BatchView) -> list[tuple[BandTable | MemberLists | SimhashTable, np.ndarray, int]]:
        """(list, keys, seq) of each filing, in order (:attr:`BatchView.filed`'s form)."""
        b = self.builder
        out: list[tuple[BandTable | MemberLists | SimhashTable, np.ndarray, int]] = []
        for j in range(self.start, self.stop):
            if b.result[j, R_INDEXED]:
                r, seq = b.rows[j], self.seq0 + j - self.start
                out += [(view.simhash, b.permuted[r], seq), (view.buckets, b.keys[r], seq)]
                if b.result[j, R_JOINS]:
                    out.append((view.lists, b.joins(j)[0], seq))
        return out


class _RunIds:
    """The matched and root ids of a run's articles (``res``: their result rows, as Python lists if
    given; ``run_ids``: their ids, seqs from ``seq0``), read from the run's ids or from the held
    matches' records in the record store (``held``; nothing is put there before the run's end)."""

    __slots__ = ("res", "rows", "run_ids", "seq0", "ids_of", "held", "roots")

    def __init__(self, res: np.ndarray, rows: list[list[float]] | None, run_ids: list[str], seq0: int,
                 ids_of: Callable[[memoryview], tuple[str, str]], held: memoryview) -> None:
        self.res, self.rows, self.run_ids, self.seq0, self.ids_of, self.held = res, rows, run_ids, seq0, ids_of, held
        self.roots: list[str | None] = [None] * len(run_ids)

    def row(self, k: int) -> list[float]:
        return self.rows[k] if self.rows is not None else self.res[k].tolist()

    def held_ids(self, at: float, length: float) -> tuple[str, str]:
        return self.ids_of(self.held[int(at):int(at + length)])

    def root(self, k: int) -> str:
        """Article ``k``'s root: its own id, or its match's root (a chain of matches filed in the run followed)."""
        roots, chain = self.roots, []
        while roots[k] is None:
            row = self.row(k)
            if row[_k.R_BEST] < 0:
                roots[k] = self.run_ids[k]
            elif row[_k.R_AT] >= 0:
                roots[k] = self.held_ids(row[_k.R_AT], row[_k.R_LENGTH])[1]
            else:
                chain.append(k)
                k = int(row[_k.R_BEST]) - self.seq0
        root = roots[k]
        for j in chain:
            roots[j] = root
        return root  # type: ignore[return-value]

    def decision(self, k: int) -> Decision:
        """Article ``k``'s decision, from its row."""
        (candidates, best, template, agreed, hits, direction, ham, jaccard, cont, template_jaccard, _, _, at, length,
         is_exact) = self.row(k)
        article_id = self.run_ids[k]
        if best >= 0:
            if at < 0:  # (a match filed in this run)
                m = int(best) - self.seq0
                matched_id, root_id = self.run_ids[m], self.root(m)
            else:
                matched_id, root_id = self.held_ids(at, length)
            self.roots[k] = root_id
            if is_exact:  # (Deduplicator._decide's exact duplicate)
                return exact_copy(article_id, int(ham), matched_id, root_id)
            return verified(article_id, hits, direction, ham, jaccard, cont, matched_id, root_id, int(candidates))
        if template >= 0:
            template_id = self.run_ids[int(template) - self.seq0] if at < 0 else self.held_ids(at, length)[0]
            return look_alike(article_id, template_jaccard, int(candidates), template_id, agreed)
        return Decision(id=article_id, type="new", candidates=int(candidates))


def _written(engine: Deduplicator, view: BatchView, builder: Builder, ids: list[str], start: int, stop: int,
             nows: Sequence[float], checkpoints: Sequence[tuple[str, int] | None] | None,
             receipts: Sequence[bytes | None] | None, tally: EventBatch | None = None) -> list[Decision | str]:
    """The decisions :func:`~stream_dedup.decide_kernel.decide_run` left for articles ``start:stop``, their records
    made in one compiled call (:func:`~stream_dedup.record_kernel.pack_run`) and written
    (:meth:`BatchView.write_records`, then the record store's :meth:`~stream_dedup.record_store.RecordStore.put_packed`).

    With a ``tally``, the events of those :func:`~stream_dedup.event_kernel.write_events` writes
    take their decisions' place (counted in the tally), and only the others are made in Python."""
    if stop == start:
        return []
    seq0 = view.next_seq
    n = stop - start
    res = builder.result[start:stop]
    run_ids = ids[start:stop]
    run = _RunIds(res, None if tally is not None else res.tolist(), run_ids, seq0, engine.index.ids,
                  view.index.record_store.view)
    # the stored decisions Python makes (the rest are made compiled): look-alikes', and verified
    # duplicates' whose values the compact form cannot hold (their stored form: JSON)
    given: list[bytes] = [b""] * n
    made: dict[int, Decision] = {}
    for k in sorted([*np.flatnonzero((res[:, R_BEST] < 0) & (res[:, _k.R_TEMPLATE] >= 0)).tolist(),
                     *_loose_rows(builder.result, start, stop).tolist()]):
        d = made[k] = run.decision(k)
        given[k] = stored_decision.encode_decision(d, d.id, run.root(k))
    rows, exact_of, joined_bytes = builder.row_of[start:stop], builder.exact_of, builder.joined_bytes
    exacts = [exact_of[r] if indexed else None for r, indexed in zip(rows, res[:, R_INDEXED].tolist(), strict=True)]
    passages = [joined_bytes(start + k, r, joins) if joins else b""
                for k, (r, joins) in enumerate(zip(rows, res[:, R_JOINS].tolist(), strict=True))]
    store = view.index.record_store
    records, ends = builder.pack(start, stop, seq0, nows, run_ids, given, store.buf)
    out: list[Decision | str]
    if tally is None:
        out = [made.get(k) or run.decision(k) for k in range(n)]
    else:
        out, left = builder.events(start, stop, seq0, records, ends, store.buf, tally, run)  # type: ignore[assignment]
        for k in left:
            out[k] = made.get(k) or run.decision(k)
    data, at_end = records.tobytes(), ends.tolist()
    view.write_records([data[a:b] for a, b in zip([0, *at_end[:-1]], at_end, strict=True)], run_ids, exacts, passages,
                       nows[start:stop], checkpoints[start:stop] if checkpoints else None,
                       receipts[start:stop] if receipts else None)
    store.put_packed(seq0, records, ends)
    return out
