"""A batch's decisions in one compiled call: candidates, verification, passage check and filing.

One by one, an article's decision is ~40 Python calls around four kernels (the candidates' lookup,
the rules, the passage lists, the filing), each kernel call paying ~1.5-2.5 us to unbox the lists'
arrays: on short wire items ~30 us a record, three times the fingerprint. :func:`decide_run` runs
the same steps for a whole batch in one call, article after article (each finds the ones before it:
it files them in the lists as it goes), and returns where it stopped; Python then builds each
article's :class:`~stream_dedup.decision.Decision` from the numbers it left and writes its record
(:meth:`BatchView.write_article <stream_dedup.batch.BatchView.write_article>`).

It decides only what it can decide exactly as :meth:`Deduplicator._decide
<stream_dedup.engine.Deduplicator._decide>` does, and stops at the first article it cannot, which
then goes that way (:data:`STOP_PYTHON`):

* a replay, an exact duplicate (its hash indexed, or that of an earlier article of the batch), an
  empty text, a content-word bitmap of another size (:meth:`Builder.rows` marks them);
* more than ``max_verify`` candidates, a candidate whose record the record store does not hold
  (evicted from its cache), a rounding at a half (:mod:`stream_dedup.candidate_rules`);
* an article whose passage lists are not all empty when the passage step applies (the step's
  re-verification with the shared anchors, its boilerplate discount and posting choices stay in
  Python); most new articles' lists are empty, and they join them all.

A candidate filed earlier in the same call has no record yet (records are written in Python): the
call stops there too (:data:`STOP_RECORDS`), Python writes the records of the articles before it,
and the call resumes at that article. ``tests/engine/test_batch_decisions.py`` compares the
decisions and the index with those of one-by-one decisions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from . import rewrite, stored_decision
from .decision import Decision, look_alike, verified
from .index import _MAX_SEQ
from .index_record import _pack_parts
from .jit import compiling, inline, kernel, trusted
from .passages import ANCHOR_BYTES, anchor_bytes

if TYPE_CHECKING:
    from .band_table import BandTable
    from .batch import BatchView, Prepared
    from .engine import Deduplicator
    from .list_table import MemberLists
    from .simhash_table import SimhashTable

if compiling():
    from .candidate_rules import verify_stored
    from .list_table import table_members
    from .simhash_table import file_article, lookup_candidates

__all__ = ["STOP_DONE", "STOP_PYTHON", "STOP_RECORDS", "Builder", "decide_run"]

STOP_DONE, STOP_RECORDS, STOP_PYTHON = 0, 1, 2
# per article (float64 columns of the result): candidates verified, best candidate's seq (-1: none),
# template's seq (-1), its identity agreement, the best's rule bits, direction, Hamming distance,
# Jaccard and containment (as reported), the template's Jaccard, indexed (0/1), joins its passage lists (0/1),
# where the best's (else the template's) record is in the record store's buffer and its length
R_CANDIDATES, R_BEST, R_TEMPLATE, R_AGREED, R_HITS, R_DIRECTION, R_HAMMING, R_JACCARD, R_CONTAINMENT, \
    R_TEMPLATE_JACCARD, R_INDEXED, R_JOINS, R_AT, R_LENGTH = range(14)
R_COLUMNS = 14
# settings (int64): SimHash distance, candidates verified at most, short-text range (low, high), band
# table cap, passage lists' cap, largest seq the buckets can name, passage_common_docs, passage_min_shared
K_SIMHASH, K_MAX_VERIFY, K_SHORT_LOW, K_SHORT_HIGH, K_CAP, K_PASSAGE_CAP, K_MAX_SEQ, K_COMMON, K_MIN_SHARED = range(9)
_O_HITS, _O_DIRECTION, _O_HAMMING, _O_JACCARD, _O_CONTAINMENT = range(5)  # candidate_rules.O_*
_S_BEST, _S_TEMPLATE, _S_AGREED, _S_UNCERTAIN = range(4)  # candidate_rules.S_*
_WORD_BYTES = rewrite.WORD_BITS // 8
_NEW_STORED: dict[int, bytes] = {}  # candidates -> the stored form of a new article's decision without a look-alike


@inline
def _shares(members, ends, common, min_shared, duplicate):
    """Whether the passage step needs Python (:meth:`Deduplicator._passages
    <stream_dedup.engine.Deduplicator._passages>`): a stored article shares at least ``min_shared``
    usable anchors (lists of fewer than ``common`` members) with the article, or it is a
    ``duplicate`` with boilerplate (lists that are not usable) to discount."""
    kept = np.empty(members.shape[0], dtype=np.uint32)
    nk = 0
    usable = 0
    prev = 0
    for t in range(ends.shape[0]):
        if ends[t] - prev < common:
            usable += 1
            for q in range(prev, ends[t]):
                kept[nk] = members[q]
                nk += 1
        prev = ends[t]
    if duplicate and usable != ends.shape[0]:
        return True
    if nk == 0:
        return False
    if min_shared <= 1:
        return True
    ordered = np.sort(kept[:nk])
    run = 1
    for q in range(1, nk):
        if ordered[q] == ordered[q - 1]:
            run += 1
            if run >= min_shared:
                return True
        else:
            run = 1
    return False


@inline
def _joins(members, ends, common, found, passed, passing, join):
    """The passage lists the article joins (:func:`stream_dedup.passages.posting_writes`): ``join[t]``
    for each of its anchors (those of fewer than ``common`` members, and holding none of the
    candidates that passed a rule, ``found[passed[:passing]]``); returns how many."""
    count = 0
    prev = 0
    for t in range(ends.shape[0]):
        ok = ends[t] - prev < common
        if ok and passing:
            for q in range(prev, ends[t]):
                for k in range(passing):
                    if members[q] == found[passed[k]]:
                        ok = False
        join[t] = 1 if ok else 0
        if ok:
            count += 1
        prev = ends[t]
    return count


@kernel
def decide_run(start, seq0, rows, keys, permuted, queries, simhashes, sizes, words, has_words, identity, identity_at,
               anchors, anchors_at, slot_keys, slot_head, node_seq, node_next, old_keys, old_head, mirror_seq,
               mirror_next, meta, fps, tags, seqs, old_fps, old_tags, old_seqs, s_meta, masks, p_slot_keys,
               p_slot_head, p_node_seq, p_node_next, p_old_keys, p_old_head, p_mirror_seq, p_mirror_next, p_meta,
               buf, store_keys, store_vals, jaccard_of, jaccard4_of, rules, params, counts, out, summary, passed,
               starts, lengths, settings, index_below, result, joined, stop):
    """Decide on articles ``start``, ``start + 1``, ... of a batch (see the module doc) until one
    that Python must take; return its position (the batch's length when all are done) and say why
    in ``stop[0]`` (``STOP_*``). Article ``i`` (if ``rows[i] >= 0``, its row in the batch's
    arrays: bucket ``keys``, SimHash ``permuted`` for each table, signature ``queries`` (int64),
    ``simhashes``, set ``sizes``, content-word ``words`` (``has_words``), identity sketch and
    passage anchors (concatenated, row ``r`` from ``*_at[r]`` to ``*_at[r + 1]``)) gets seq
    ``seq0 + i - start``, is filed in the lists (band table, SimHash tables, passage lists: their
    arrays) and leaves its decision in ``result[i]`` (``R_*``). ``buf``, ``store_keys``,
    ``store_vals``: the record store's arrays; ``jaccard_of`` ... ``lengths``: those of
    :class:`~stream_dedup.candidate_rules.CompiledRules`; ``index_below``: the configuration's
    ``index_below_similarity``."""
    n = rows.shape[0]
    simhash_k = settings[K_SIMHASH]
    short_low, short_high = settings[K_SHORT_LOW], settings[K_SHORT_HIGH]
    no_shared = np.zeros(0, dtype=np.int64)
    no_words = np.zeros(0, dtype=np.uint8)
    no_keys = np.zeros(0, dtype=np.uint64)
    no_members = np.zeros(0, dtype=np.uint32)
    for i in range(start, n):
        r = rows[i]
        seq = seq0 + (i - start)
        if r < 0 or seq > settings[K_MAX_SEQ]:
            stop[0] = STOP_PYTHON
            return i
        size = sizes[r]
        found = lookup_candidates(slot_keys, slot_head, node_seq, node_next, old_keys, old_head, mirror_seq,
                                  mirror_next, meta, keys[r], fps, tags, seqs, old_fps, old_tags, old_seqs,
                                  permuted[r], masks, simhash_k)
        m = found.shape[0]
        if m > settings[K_MAX_VERIFY]:
            stop[0] = STOP_PYTHON
            return i
        best = -1
        template = -1
        got = 0
        if m:
            words_a = words[r] if has_words[r] else no_words
            got = verify_stored(buf, store_keys, store_vals, found, starts, lengths, queries[r], simhashes[r], size,
                                jaccard_of, jaccard4_of, rules, params, no_shared, 0, 0.0, words_a, counts,
                                identity[identity_at[r]:identity_at[r + 1]], out, summary, passed)
            if got < 0:  # records not held: this call's own articles' (not written yet), or evicted ones
                stop[0] = STOP_RECORDS
                for k in range(m):
                    if starts[k] < 0 and found[k] < seq0:
                        stop[0] = STOP_PYTHON
                return i
            if summary[_S_UNCERTAIN] != 0.0:
                stop[0] = STOP_PYTHON
                return i
            best = int(summary[_S_BEST])
            template = int(summary[_S_TEMPLATE])
        contained = False
        if best >= 0:
            hits = int(out[_O_HITS, best])
            contained = (hits & 1) == 0 and (hits & 2) != 0  # the method: containment (not minhash)
        a_from, a_to = anchors_at[r], anchors_at[r + 1]
        na = a_to - a_from
        passage_step = (best < 0 or contained) and na > 0 and not (short_low < size < short_high)
        ends = np.zeros(na, dtype=np.int64)
        members = no_members
        if passage_step:  # (passages.lookup; Python's if the lists share enough with an article)
            members = table_members(p_slot_keys, p_slot_head, p_node_seq, p_node_next, p_old_keys, p_old_head,
                                    p_mirror_seq, p_mirror_next, p_meta, anchors[a_from:a_to], ends)
            if members.shape[0] and _shares(members, ends, settings[K_COMMON], settings[K_MIN_SHARED], best >= 0):
                stop[0] = STOP_PYTHON
                return i
        indexed = not (best >= 0 and out[_O_JACCARD, best] >= index_below)
        join = joined[a_from:a_to]
        joins = 0
        if passage_step and indexed:  # (passages.posting_writes)
            joins = _joins(members, ends, settings[K_COMMON], found, passed, got, join)
        res = result[i]
        res[R_CANDIDATES] = m
        res[R_BEST] = -1.0
        res[R_TEMPLATE] = -1.0
        if best >= 0:
            res[R_BEST] = found[best]
            res[R_AT] = starts[best]
            res[R_LENGTH] = lengths[best]
            res[R_HITS] = out[_O_HITS, best]
            res[R_DIRECTION] = out[_O_DIRECTION, best]
            res[R_HAMMING] = out[_O_HAMMING, best]
            res[R_JACCARD] = out[_O_JACCARD, best]
            res[R_CONTAINMENT] = out[_O_CONTAINMENT, best]
        elif template >= 0:
            res[R_TEMPLATE] = found[template]
            res[R_AT] = starts[template]
            res[R_LENGTH] = lengths[template]
            res[R_TEMPLATE_JACCARD] = out[_O_JACCARD, template]
            res[R_AGREED] = summary[_S_AGREED]
        res[R_INDEXED] = 1.0 if indexed else 0.0
        res[R_JOINS] = joins
        adds = no_keys
        if joins:
            adds = np.empty(joins, dtype=np.uint64)
            k = 0
            for t in range(na):
                if join[t]:
                    adds[k] = anchors[a_from + t]
                    k += 1
        file_article(slot_keys, slot_head, node_seq, node_next, old_keys, old_head, mirror_seq, mirror_next, meta,
                     keys[r] if indexed else no_keys, fps, tags, seqs, s_meta, permuted[r] if indexed else no_keys,
                     masks, p_slot_keys, p_slot_head, p_node_seq, p_node_next, p_old_keys, p_old_head, p_mirror_seq,
                     p_mirror_next, p_meta, adds, seq, settings[K_CAP], settings[K_PASSAGE_CAP])
    stop[0] = STOP_DONE
    return n


_decide_run = trusted(decide_run)  # every array made by Builder or the lists' and store's own


class Builder:
    """The arrays :func:`decide_run` reads for a batch, made once from its prepared articles."""

    def __init__(self, n: int, positions: list[int], chosen: list[Prepared], fast: list[bool], keys: np.ndarray,
                 permuted: np.ndarray, signatures: np.ndarray, anchor_bytes: bytes) -> None:
        """A batch of ``n`` articles; ``chosen``: the prepared articles with shingles, at ``positions``
        of the batch, ``fast`` saying which the kernel may take (:meth:`takes`, not exact duplicates);
        ``keys``, ``permuted``, ``signatures``, ``anchor_bytes``: their bucket keys, permuted
        SimHashes and signatures (rows) and their anchors' bytes end to end (:func:`stream_dedup.batch._batch_keys`)."""
        self.rows = np.full(n, -1, dtype=np.int64)
        self.rows[[i for i, f in zip(positions, fast, strict=True) if f]] = \
            [r for r, f in enumerate(fast) if f]
        self.chosen_row = {i: r for r, i in enumerate(positions)}  # every chosen article's row
        self.all_anchor_bytes = anchor_bytes
        fps = [p.fp for p in chosen]
        self.keys, self.permuted = keys, permuted
        # (np.stack gives the signatures in native byte order)
        self.queries = signatures.astype(np.int64)
        # (big-endian, as records keep them)
        self.signature_bytes, self.signature_size = signatures.astype(">u2").tobytes(), 2 * signatures.shape[1]
        self.simhashes = np.array([fp.simhash for fp in fps], dtype=np.uint64)
        self.sizes = np.array([fp.n_shingles for fp in fps], dtype=np.int64)
        self.has_words = np.array([len(fp.words) == _WORD_BYTES for fp in fps], dtype=np.bool_)
        self.words = np.zeros((len(chosen), _WORD_BYTES), dtype=np.uint8)
        if self.has_words.any():
            self.words[self.has_words] = np.frombuffer(b"".join(fp.words for fp in fps if len(fp.words) == _WORD_BYTES),
                                                       dtype=np.uint8).reshape(-1, _WORD_BYTES)
        self.identity, self.identity_at = _joined([fp.identity for fp in fps], np.uint32)
        self.identity_bytes = self.identity.astype(">u4").tobytes()  # (as records keep them)
        self.row_of: list[int] = self.rows.tolist()  # (Python ints: read per article)
        self.identity_ends: list[int] = (4 * self.identity_at).tolist()
        self.anchors, self.anchors_at = _joined([fp.anchors for fp in fps], np.uint64)
        self.result = np.zeros((n, R_COLUMNS), dtype=np.float64)
        self.joined = np.zeros(self.anchors.shape[0], dtype=np.uint8)  # per anchor: the article joins its list
        self.stop = np.zeros(1, dtype=np.int64)

    @staticmethod
    def takes(p: Prepared | None) -> bool:
        """Whether :func:`decide_run` can decide on ``p`` (not whether it will: see the module doc)."""
        return p is not None and p.fp.n_shingles > 0 and len(p.fp.words) in (0, _WORD_BYTES)

    def run(self, view: BatchView, start: int, settings: np.ndarray, index_below: float, rules_arrays: tuple) -> int:
        """:func:`decide_run` from ``start`` with the view's lists and record store: the position it
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
                           self.sizes, self.words, self.has_words, self.identity, self.identity_at, self.anchors,
                           self.anchors_at, *buckets._args, simhash.fps, simhash.tags, simhash.seqs, simhash.old_fps,
                           simhash.old_tags, simhash.old_seqs, simhash.meta, simhash.masks, *lists._args, store.buf,
                           store.keys, store.vals, *rules_arrays, settings, index_below, self.result, self.joined,
                           self.stop)

    def prepare(self, i: int, p: Prepared | None) -> None:
        """Give article ``i`` (if it has shingles) its keys and anchors' bytes from the batch's arrays
        (:class:`~stream_dedup.batch.Prepared`: for :meth:`Deduplicator._decide <stream_dedup.engine.Deduplicator._decide>`)."""
        r = self.chosen_row.get(i)
        if r is not None and p is not None and p.buckets is None:
            p.buckets, p.permuted = self.keys[r], self.permuted[r]
            p.anchor_bytes = self.all_anchor_bytes[ANCHOR_BYTES * self.anchors_at[r]:ANCHOR_BYTES * self.anchors_at[r + 1]]

    def joins(self, i: int, p: Prepared) -> tuple[np.ndarray, bytes]:
        """The anchors whose passage lists article ``i`` joined (:func:`decide_run` left ``R_JOINS``
        of them) and its ``D`` value (:func:`stream_dedup.passages.posting_writes`)."""
        anchors = p.fp.anchors
        r = self.rows[i]
        if int(self.result[i, R_JOINS]) == anchors.shape[0]:  # all of them (most new articles)
            return anchors, self.all_anchor_bytes[ANCHOR_BYTES * self.anchors_at[r]:ANCHOR_BYTES * self.anchors_at[r + 1]]
        adds = anchors[self.joined[self.anchors_at[r]:self.anchors_at[r + 1]].view(np.bool_)]
        return adds, anchor_bytes(adds)


def _joined(parts: list[np.ndarray], dtype: type) -> tuple[np.ndarray, np.ndarray]:
    """The arrays ``parts`` end to end, and where each begins (one more: the end)."""
    at = np.zeros(len(parts) + 1, dtype=np.int64)
    if not parts:
        return np.zeros(0, dtype=dtype), at
    np.cumsum([p.shape[0] for p in parts], out=at[1:])
    return np.ascontiguousarray(np.concatenate(parts), dtype=dtype), at


def decide_all(engine: Deduplicator, view: BatchView, ids: list[str], prepared: list[Prepared | None],
               builder: Builder, nows: Sequence[float], checkpoints: Sequence[tuple[str, int] | None] | None,
               receipts: Sequence[bytes | None] | None) -> list[Decision]:
    """The batch's decisions, in order: :func:`decide_run` as far as it goes, each article it
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
            _note_run(view, builder, prepared, i, stop, seq0)
            decisions += _written(engine, view, builder, ids, prepared, i, stop, nows, checkpoints, receipts)
            if stop == n or (builder.stop[0] == STOP_RECORDS and stop > i):  # (records written: resume there)
                i = stop
                continue
            i = stop
        builder.prepare(i, prepared[i])
        decisions.append(engine._decide(view, ids[i], prepared[i], nows[i], checkpoints[i] if checkpoints else None,
                                        receipts[i] if receipts else None))
        i += 1
    return decisions


def _note_run(view: BatchView, builder: Builder, prepared: list[Prepared | None], start: int, stop: int,
              seq0: int) -> None:
    """Note what :func:`decide_run` filed for articles ``start:stop`` (:class:`FiledRun`), before
    anything else can raise: a rollback takes them out again."""
    indexed = int(builder.result[start:stop, R_INDEXED].sum())
    if indexed:
        view.index.lists_behind = True  # the lists are ahead of RocksDB until the commit (no snapshot)
        view.bucket_entries += indexed * builder.keys.shape[1]
        view.filed.append(FiledRun(builder, prepared, start, stop, seq0))


@dataclass(slots=True)
class FiledRun:
    """Articles ``start:stop`` of a batch, seqs from ``seq0``, as :func:`decide_run` filed them."""
    builder: Builder
    prepared: list[Prepared | None]
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
                    out.append((view.lists, b.joins(j, self.prepared[j])[0], seq))  # type: ignore[arg-type]
        return out


def _written(engine: Deduplicator, view: BatchView, builder: Builder, ids: list[str], prepared: list[Prepared | None],
             start: int, stop: int, nows: Sequence[float], checkpoints: Sequence[tuple[str, int] | None] | None,
             receipts: Sequence[bytes | None] | None) -> list[Decision]:
    """The decisions :func:`decide_run` left for articles ``start:stop``, their records written
    (:meth:`BatchView.write_record`, then the record store's in one call) in order."""
    out = []
    records = []
    seq0 = view.next_seq
    # (the ids of the matched article and of a look-alike's template are read in the record store
    # where the call found their records: nothing is put in it before this function's end)
    ids_of, held = engine.index.ids, view.index.record_store.view
    rows = builder.row_of
    signatures, size, identities, identity_at = (builder.signature_bytes, builder.signature_size,
                                                 builder.identity_bytes, builder.identity_ends)
    for j, row in zip(range(start, stop), builder.result[start:stop].tolist(), strict=True):
        article_id = ids[j]
        fp = prepared[j].fp  # type: ignore[union-attr]
        candidates, best, template, agreed, hits, direction, ham, jaccard, cont, template_jaccard, indexed, joins, at, \
            length = row
        root_id = article_id
        rid = b""
        if best >= 0:
            matched_id, root_id = ids_of(held[int(at):int(at + length)])
            decision = verified(article_id, hits, direction, ham, jaccard, cont, matched_id, root_id, int(candidates))
            stored = stored_decision.encode_decision(decision, article_id, root_id)
            if root_id != article_id:
                rid = root_id.encode("utf-8", "surrogatepass")
        elif template >= 0:
            decision = look_alike(article_id, template_jaccard, int(candidates), ids_of(held[int(at):int(at + length)])[0],
                                  agreed)
            stored = stored_decision.encode_decision(decision, article_id, root_id)
        else:  # (new, no look-alike: its stored form depends on the count alone, made once per count)
            k = int(candidates)
            decision = Decision(id=article_id, type="new", candidates=k)
            stored = _NEW_STORED.get(k)  # type: ignore[assignment]
            if stored is None:
                stored = _NEW_STORED[k] = stored_decision.encode_decision(decision, article_id, root_id)
        r = rows[j]
        record = _pack_parts(nows[j], fp.simhash, fp.n_shingles, indexed, fp.exact, signatures[r * size:(r + 1) * size],
                             article_id.encode("utf-8", "surrogatepass"), rid,
                             identities[identity_at[r]:identity_at[r + 1]], fp.anchors.shape[0],
                             fp.words if indexed else rewrite.NO_WORDS, stored)
        records.append(record)
        view.write_record(record, article_id, fp.exact if indexed else None,
                          builder.joins(j, prepared[j])[1] if joins else b"",  # type: ignore[arg-type]
                          nows[j], checkpoints[j] if checkpoints else None, receipts[j] if receipts else None)
        out.append(decision)
    view.index.record_store.put_many(seq0, records)
    return out
