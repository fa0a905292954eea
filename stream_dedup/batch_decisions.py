"""A batch's decisions through the compiled loop (:mod:`stream_dedup.decide_kernel`): its arrays
made once for the batch (:class:`Builder`), the loop run as far as it goes, each article it stops at
decided by :meth:`Deduplicator._decide <stream_dedup.engine.Deduplicator._decide>`, and the
decisions the loop left built and written (:func:`decide_all`).

Python builds each :class:`~stream_dedup.decision.Decision` from the numbers the loop left; a
run's records are made in one compiled call (:func:`stream_dedup.record_kernel.pack_run`, which
also makes the stored decisions of new articles and verified duplicates), written into the batch
(:meth:`BatchView.write_records <stream_dedup.batch.BatchView.write_records>`) and put in the record
store, each at once; what the loop filed is noted once per run
(:class:`FiledRun`), for a rollback. ``tests/engine/test_batch_decisions.py`` compares the
decisions and the whole index with those of one-by-one decisions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from . import decide_kernel as _k
from . import rewrite, stored_decision
from .decide_kernel import R_COLUMNS, R_INDEXED, R_JOINS, _decide_run
from .decision import Decision, exact_copy, look_alike, verified
from .index import _MAX_SEQ
from .index_record import _LENGTHS, _RECORD
from .passages import ANCHOR_BYTES, anchor_bytes
from .record_kernel import _loose_rows, _pack_run
from .stored_decision import NEW_HEAD, VERIFIED_HEADS

if TYPE_CHECKING:
    from .band_table import BandTable
    from .batch import BatchView, Prepared
    from .engine import Deduplicator
    from .list_table import MemberLists
    from .simhash_table import SimhashTable

__all__ = ["Builder", "FiledRun", "decide_all"]

_WORD_BYTES = rewrite.WORD_BITS // 8
_RECORD_HEAD, _LENGTH_BYTES = _RECORD.size, _LENGTHS.size  # (a record's bytes before its signature, its lengths)
# (_written unpacks each article's row of the result in this order)
assert (_k.R_CANDIDATES, _k.R_BEST, _k.R_TEMPLATE, _k.R_AGREED, _k.R_HITS, _k.R_DIRECTION, _k.R_HAMMING, _k.R_JACCARD,
        _k.R_CONTAINMENT, _k.R_TEMPLATE_JACCARD, _k.R_INDEXED, _k.R_JOINS, _k.R_AT, _k.R_LENGTH, _k.R_EXACT) \
    == tuple(range(R_COLUMNS))
_EXACT_BYTES = 16  # (the exact hash's bytes in a record)
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
                            np.frombuffer(b"".join(given), dtype=np.uint8), given_at, VERIFIED_HEADS, NEW_HEAD, store,
                            ends)
        return records, ends

    def joined_bytes(self, i: int, r: int, joins: float) -> bytes:
        """:meth:`joins`' ``D`` value of article ``i`` (row ``r``, ``joins`` lists joined), without
        the anchors' array when it joined all of its anchors' lists (most new articles)."""
        return self._anchor_bytes(r) if joins == self.anchor_count[r] else self.joins(i)[1]


def _joined(parts: list[np.ndarray], dtype: type) -> tuple[np.ndarray, np.ndarray]:
    """The arrays ``parts`` end to end, and where each begins (one more: the end)."""
    at = np.zeros(len(parts) + 1, dtype=np.int64)
    if not parts:
        return np.zeros(0, dtype=dtype), at
    np.cumsum([p.shape[0] for p in parts], out=at[1:])
    return np.ascontiguousarray(np.concatenate(parts), dtype=dtype), at


def decide_all(engine: Deduplicator, view: BatchView, ids: list[str], prepared: Sequence[Prepared | None],
               builder: Builder, nows: Sequence[float], checkpoints: Sequence[tuple[str, int] | None] | None,
               receipts: Sequence[bytes | None] | None) -> list[Decision]:
    """The batch's decisions, in order: :func:`~stream_dedup.decide_kernel.decide_run` as far as it goes, each article it
    stops at by :meth:`Deduplicator._decide <stream_dedup.engine.Deduplicator._decide>`."""
    from .engine import MAX_VERIFY  # (the engine imports this module)

    n = len(ids)
    decisions: list[Decision] = []
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
            decisions += _written(engine, view, builder, ids, i, stop, nows, checkpoints, receipts)
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


def _written(engine: Deduplicator, view: BatchView, builder: Builder, ids: list[str], start: int, stop: int,
             nows: Sequence[float], checkpoints: Sequence[tuple[str, int] | None] | None,
             receipts: Sequence[bytes | None] | None) -> list[Decision]:
    """The decisions :func:`~stream_dedup.decide_kernel.decide_run` left for articles ``start:stop``, their records
    made in one compiled call (:func:`~stream_dedup.record_kernel.pack_run`) and written
    (:meth:`BatchView.write_records`, then the record store's :meth:`~stream_dedup.record_store.RecordStore.put_packed`)."""
    if stop == start:
        return []
    out = []
    exacts: list[bytes | None] = []  # (None: not indexed)
    passages: list[bytes] = []
    seq0 = view.next_seq
    n = stop - start
    # (the ids of the matched article and of a look-alike's template are read in the record store
    # where the call found their records: nothing is put in it before this function's end)
    ids_of, held = engine.index.ids, view.index.record_store.view
    rows = builder.row_of
    exact_of = builder.exact_of
    run_ids = ids[start:stop]
    given: list[bytes] = [b""] * n  # (the stored decisions Python makes: the rest are made compiled)
    roots: list[str] = []  # (the root of each article of the call: a match filed in the same call, at = -1)
    # (every article's row of numbers as Python numbers, in one call)
    for k, (candidates, best, template, agreed, hits, direction, ham, jaccard, cont, template_jaccard, indexed,
            joins, at, length, is_exact) in enumerate(builder.result[start:stop].tolist()):
        article_id = run_ids[k]
        r = rows[start + k]
        root_id = article_id
        if best >= 0:  # (a match filed in this call: at = -1, its id and root are this call's)
            if at < 0:
                m = int(best) - seq0
                matched_id, root_id = run_ids[m], roots[m]
            else:
                matched_id, root_id = ids_of(held[int(at):int(at + length)])
            if is_exact:  # (Deduplicator._decide's exact duplicate)
                decision = exact_copy(article_id, int(ham), matched_id, root_id)
                given[k] = stored_decision.encode_decision(decision, article_id, root_id)
            else:
                decision = verified(article_id, hits, direction, ham, jaccard, cont, matched_id, root_id,
                                    int(candidates))
        elif template >= 0:
            template_id = run_ids[int(template) - seq0] if at < 0 else ids_of(held[int(at):int(at + length)])[0]
            decision = look_alike(article_id, template_jaccard, int(candidates), template_id, agreed)
            given[k] = stored_decision.encode_decision(decision, article_id, root_id)
        else:
            decision = Decision(id=article_id, type="new", candidates=int(candidates))
        exacts.append(exact_of[r] if indexed else None)
        passages.append(builder.joined_bytes(start + k, r, joins) if joins else b"")
        out.append(decision)
        roots.append(root_id)
    for k in _loose_rows(builder.result, start, stop).tolist():  # (their stored form: JSON)
        d = out[k]
        given[k] = stored_decision.encode_decision(d, d.id, roots[k])
    records, ends = builder.pack(start, stop, seq0, nows, run_ids, given, view.index.record_store.buf)
    data, at_end = records.tobytes(), ends.tolist()
    view.write_records([data[a:b] for a, b in zip([0, *at_end[:-1]], at_end, strict=True)], run_ids, exacts, passages,
                       nows[start:stop], checkpoints[start:stop] if checkpoints else None,
                       receipts[start:stop] if receipts else None)
    view.index.record_store.put_packed(seq0, records, ends)
    return out
