"""The decision: is this article new, or a near-duplicate of one seen before?

For each article (already fingerprinted):

1. **Same id again** -> the decision stored the first time, unchanged (``seen_before``):
   processing is idempotent, and an article is never a duplicate of itself.
2. **Exact** -> the 128-bit hash of the normalised text is already indexed.
3. **Candidates** -> every stored article sharing an LSH band bucket with the MinHash signature,
   plus every stored SimHash within ``simhash_k`` bits (permuted tables), plus every stored article
   sharing ``passage_min_shared`` usable passage anchors (:mod:`stream_dedup.passages`).
4. **Verification** against each candidate's stored signature:
   ``minhash``      estimated Jaccard >= ``jaccard_threshold``;
   ``containment``  estimated |A ∩ B| / |A| >= ``containment_threshold`` (A = the new article,
                    trimmed or excerpted copies of B: ``direction`` ``new_in_earlier``), or
                    |A ∩ B| / |B| (B inside a longer page A: ``earlier_in_new``), the contained
                    article having at least ``min_containment_shingles`` shingles; estimated
                    from the MinHash Jaccard, or measured on the passage anchors (the larger);
   ``simhash``      Hamming distance <= ``simhash_k`` and Jaccard >= ``simhash_min_jaccard``;
   ``rewrite``      none of these, Jaccard in [``rewrite_jaccard``, ``jaccard_threshold``), about the same
                    length, and content-word set Jaccard >= ``rewrite_word_jaccard`` (estimated from the
                    stored word bitmaps; else identity pairs shared) (:mod:`stream_dedup.rewrite`).
   Nothing is called a duplicate on a candidate hit alone.
   **Look-alikes**: a candidate that passes but whose identity tokens (numbers, names; see
   :mod:`stream_dedup.identity`) overlap less than ``identity_threshold`` is skipped; if no other
   candidate passes, the article is ``new`` with ``template_of`` naming the look-alike.
   **Short texts** (fewer than ``short_text_words`` words on either side) are compared by
   ``minhash`` with ``short_text_jaccard`` only (containment and SimHash are noise there), and
   not at all when it is 1: then only the exact match of step 2 makes them duplicates.
5. The best verified candidate (highest of its Jaccard / containment scores, earliest on ties)
   names the cluster: ``duplicate_of`` is that cluster's first-seen article.

Every article is then stored (its id, record and decision). New articles and duplicates that
differ from their match go into the LSH buckets and SimHash tables too (a later copy may be closer
to a copy than to the original); exact duplicates and near-copies at least
``index_below_similarity`` similar to their match do not (anything close to them is close to their
match: they would add writes, not recall).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from . import candidate_rules, memory_lists, passages, rewrite, stored_decision
from .batch import NO_KEYS, BatchView, Prepared, run_batch
from .batch_decisions import EventBatch
from .config import EngineConfig
from .decision import METHODS, Decision, exact_copy, look_alike, verified  # noqa: F401  (METHODS: re-exported)
from .fingerprint import Fingerprint, Fingerprinter
from .fingerprint_batch import FingerprintBatch
from .folding import FOLDING_VERSION
from .index import SIGNATURE_BITS, Index, StoredArticle
from .lsh import LSHParams, explicit_params, optimal_params
from .minhash import bbit_jaccard
from .python_rules import PythonRules
from .record import Article
from .simhash import PermutedTables, hamming
from .text import TOKENIZER_VERSION

MAX_PER_BUCKET = 256          # members kept per LSH bucket (the newest)
MAX_VERIFY = 1024             # candidates verified per article (SimHash hits first, then LSH; oldest first)
EVICT_EVERY_SECONDS = 60.0    # how often decide() runs the retention sweep
MAY_PASS_MARGIN = 1e-3       # below a rule's threshold, what Deduplicator._may_pass still keeps (rounding)


def lsh_params(config: EngineConfig) -> LSHParams:
    if config.lsh_bands:
        return explicit_params(config.lsh_bands, config.lsh_rows, config.lsh_threshold)
    return optimal_params(config.lsh_threshold, config.num_perm)


class Deduplicator(PythonRules):
    """Streaming near-duplicate detector over a RocksDB index in ``state_dir``. Single writer.
    (:class:`~stream_dedup.python_rules.PythonRules`: the verification in Python, the compiled
    rules' reference.)"""

    def __init__(self, config: EngineConfig | None = None, state_dir: str | Path = "./state") -> None:
        self.config = config or EngineConfig()
        c = self.config
        self.fingerprinter = Fingerprinter(c)
        self.lsh = lsh_params(c)
        self.tables = PermutedTables(c.simhash_k, c.simhash_blocks)
        settings = {"num_perm": c.num_perm, "seed": c.seed, "shingle_size": c.shingle_size,
                    "char_shingles": c.char_shingles, "folding": FOLDING_VERSION, "tokenizer": TOKENIZER_VERSION,
                    "fold_diacritics": c.fold_diacritics,
                    "bands": self.lsh.bands, "rows": self.lsh.rows, "simhash_k": c.simhash_k,
                    "simhash_blocks": c.simhash_blocks, "passage_window": c.passage_window}
        self.index = Index(state_dir, c.num_perm, settings, max_bucket=MAX_PER_BUCKET, memory=c.memory,
                           tables=self.tables, banding=(self.lsh.bands, self.lsh.rows))
        self._last_evict = 0.0
        self.evicted_total = 0
        # is_short_text(n) for a count n: short_low < n < short_high (an empty range with char shingles);
        # _verify tests its candidates' counts against the range directly
        self._short_range = (0, 0) if c.char_shingles else (1 - c.shingle_size, c.short_text_words - c.shingle_size + 1)
        # the Jaccard estimate of each count of agreeing rows (bbit_jaccard of 0..num_perm, computed once):
        # read per candidate, where bbit_jaccard on each candidate array cost four numpy calls
        self._jaccard_of = bbit_jaccard(np.arange(c.num_perm + 1), c.num_perm, SIGNATURE_BITS).tolist()
        self._jaccard4_of = [round(j, 4) for j in self._jaccard_of]  # as reported (4 decimals), looked up too
        self._jaccard_array = np.array(self._jaccard_of, dtype=np.float64)  # (the same floats, for the screen)
        self._screen_rules = self._rules()
        self._compiled = candidate_rules.CompiledRules(c, self._short_range, self._jaccard_array, self._jaccard4_of,
                                                       self._screen_rules)

    # -- public API -------------------------------------------------------------------------
    def fingerprint(self, article: Article) -> Fingerprint:
        return self.fingerprinter.fingerprint(article)

    def process(self, article: Article, now: float | None = None,
                checkpoint: tuple[str, int] | None = None) -> Decision:
        """Fingerprint ``article`` and decide on it (the embedded, single-process path): a batch of one.

        A redelivered id is answered from the index without fingerprinting the text again.
        """
        return self.process_batch([article], now, [checkpoint])[0]

    def decide(self, article_id: str, fp: Fingerprint, now: float | None = None,
               checkpoint: tuple[str, int] | None = None, receipt: bytes | None = None) -> Decision:
        """Decide on an already fingerprinted article and index it.

        ``checkpoint=(name, offset)`` is stored atomically with the article (see
        :meth:`checkpoint`), so a consumer can tell which input it has applied.  ``receipt``, a
        token naming this delivery (see :meth:`receipt`), is stored in the same write.
        """
        return self.decide_batch([article_id], [fp], now, [checkpoint], [receipt])[0]

    def process_batch(self, articles: Sequence[Article], now: float | None = None,
                      checkpoints: Sequence[tuple[str, int] | None] | None = None) -> list[Decision]:
        """:meth:`process` on each article in order, in one atomic write (see :meth:`decide_batch`)."""
        return self._batch(*self._texts(articles), now, checkpoints)  # type: ignore[return-value]

    def decide_batch(self, ids: Sequence[str], fingerprints: Sequence[Fingerprint | None] | FingerprintBatch,
                     now: float | Sequence[float] | None = None,
                     checkpoints: Sequence[tuple[str, int] | None] | None = None,
                     receipts: Sequence[bytes | None] | None = None) -> list[Decision]:
        """:meth:`decide` on each article in order: the same decisions, a later article seeing the
        earlier ones (an id that came earlier in the batch is a replay of it).

        ``checkpoints`` and ``receipts`` hold one entry (or None) per article. The whole batch is
        written in one atomic write with the last checkpoint: a crash leaves all of it applied or
        none, and a batch that raises writes nothing. ``now`` is every article's first-seen time,
        or one time per article (a stream's event times); the retention sweep runs (if due) once,
        before the batch, at the first article's time. The fingerprint of an id known before it
        (a replay) is not used and may be None. ``fingerprints`` may be a :class:`FingerprintBatch` of
        the articles (what ``dedup``'s fingerprint processes send): the batch is then decided from its
        arrays, and from the bucket keys made with it (:class:`stream_dedup.batch.KeyMaker`).
        """
        return self._batch(*self._given(ids, fingerprints), now, checkpoints, receipts)  # type: ignore[return-value]

    def decide_batch_events(self, ids: Sequence[str], fingerprints: Sequence[Fingerprint | None] | FingerprintBatch,
                            now: float | Sequence[float] | None = None,
                            checkpoints: Sequence[tuple[str, int] | None] | None = None,
                            receipts: Sequence[bytes | None] | None = None, compact: bool = False,
                            roots: bool = True) -> EventBatch:
        """:meth:`decide_batch` for a writer of events (the ``dedup`` command, the worker): the same
        decisions and writes, but where a compiled call writes an article's event
        (:mod:`stream_dedup.event_kernel`: the text of :meth:`Decision.event_json`, or with
        ``compact`` that of ``orjson.dumps(decision.to_event())``) the :class:`EventBatch` has that
        text in place of a :class:`Decision` object, and counts what it says (without ``roots``,
        not the written duplicates' root ids)."""
        events = EventBatch(compact=compact, with_roots=roots)
        events.items = self._batch(*self._given(ids, fingerprints), now, checkpoints, receipts, events=events)
        return events

    def process_batch_events(self, articles: Sequence[Article], now: float | None = None,
                             checkpoints: Sequence[tuple[str, int] | None] | None = None) -> EventBatch:
        """:meth:`process_batch` as :meth:`decide_batch_events` gives it."""
        events = EventBatch()
        events.items = self._batch(*self._texts(articles), now, checkpoints, events=events)
        return events

    def _given(self, ids: Sequence[str], fingerprints: Sequence[Fingerprint | None] | FingerprintBatch
               ) -> tuple[list[str], Callable[[list[int]], list[Fingerprint] | FingerprintBatch]]:
        """The ids, and the fingerprints at given positions (all of a batch: the batch itself)."""
        ids = list(ids)
        as_batch = isinstance(fingerprints, FingerprintBatch)  # (decided from its arrays when all are asked for)
        return ids, lambda at: fingerprints if as_batch and len(at) == len(ids) else [fingerprints[i] for i in at]

    def _texts(self, articles: Sequence[Article]) -> tuple[list[str], Callable[[list[int]], FingerprintBatch]]:
        """The articles' ids, and the fingerprints of their texts at given positions."""
        return [a.id for a in articles], lambda at: FingerprintBatch.of(
            self.fingerprinter, [(articles[i].text, articles[i].is_html) for i in at])

    def receipt(self, token: bytes) -> tuple[int, bool] | None:
        """``(checkpoint offset, replayed)`` of the delivery ``token`` if it was decided, else None.

        ``replayed`` is the ``seen_before`` of the decision it got.  A consumer that can see one
        input record twice (at-least-once upstream) uses it to answer each input exactly once.
        """
        return self.index.receipt(token)

    def record_receipt(self, token: bytes, checkpoint: tuple[str, int] | None = None) -> None:
        """Store a receipt (and checkpoint) for a delivery that was not an article (a rejected record)."""
        self.index.mark(checkpoint, token)

    def forget_receipts(self, begin: bytes, end: bytes) -> None:
        """Drop the receipts of tokens in ``[begin, end)``: deliveries that can no longer come twice."""
        self.index.delete_receipts(begin, end)

    def decision_of(self, article_id: str) -> Decision | None:
        """The stored decision of ``article_id`` (``seen_before`` set), or None if it is not indexed."""
        seq = self.index.seq_of(article_id)
        art = self.index.article(seq) if seq is not None else None
        return None if art is None else Decision.from_stored(art.decision, art.article_id)

    def _batch(self, ids: list[str], fingerprints: Callable[[list[int]], list[Fingerprint] | FingerprintBatch],
               now: float | Sequence[float] | None,
               checkpoints: Sequence[tuple[str, int] | None] | None,
               receipts: Sequence[bytes | None] | None = None,
               events: EventBatch | None = None) -> list[Decision | str]:
        if now is None:
            now = time.time()
        if isinstance(now, (int, float)):
            nows: Sequence[float] = [float(now)] * len(ids)
        elif len(now) != len(ids):
            raise ValueError(f"{len(now)} times for {len(ids)} articles")
        else:
            nows = now
        if nows:
            self._maybe_evict(nows[0])  # once per batch, before it (see decide_batch)
        return run_batch(self, ids, fingerprints, nows, checkpoints, receipts, events)

    def _decide(self, view: BatchView, article_id: str, prep: Prepared | None, now: float,
                checkpoint: tuple[str, int] | None, receipt: bytes | None = None) -> Decision:
        """Replay a known id, else decide on the prepared fingerprint and index it (in ``view``)."""
        if prep is None:
            return self._replay(view, view.seq_of(article_id), checkpoint, receipt)
        c = self.config
        fp, sig = prep.fp, prep.sig
        bucket_keys = NO_KEYS
        permuted = NO_KEYS
        has_shingles = fp.n_shingles > 0
        passage: passages.PassageLookup | None = None
        matched: set[int] = set()
        decision: Decision
        exact_seq = view.exact_match(fp.exact)
        exact_hit = view.article(exact_seq) if exact_seq is not None else None
        if exact_hit is not None:
            decision = exact_copy(article_id, hamming(fp.simhash, exact_hit.simhash), exact_hit.article_id,
                                  exact_hit.root_id)
            root_id = exact_hit.root_id
        else:
            if has_shingles:
                bucket_keys, permuted = prep.keys(self.index.buckets, self.tables)
                seq_array = view.candidates(bucket_keys, permuted, c.simhash_k)  # ascending
                found = seq_array.tolist()
                if len(found) > MAX_VERIFY:  # a flood of near-copies: verify a bounded subset
                    lookup = view.lookup(bucket_keys, permuted, c.simhash_k)
                    bounded = set(sorted(lookup.simhash)[:MAX_VERIFY // 2])
                    bounded |= set(sorted(lookup.lsh - bounded)[: MAX_VERIFY - len(bounded)])
                    found, seq_array = sorted(bounded), None
            else:
                found, seq_array = [], None
            decision = self._verify(view, article_id, fp, sig, found, None, matched, seq_array)
            if decision.method in (None, "containment") and fp.anchors.shape[0] \
                    and not self.is_short_text(fp.n_shingles):
                decision, passage = self._passages(view, article_id, fp, sig, found, decision, matched)
            root_id = decision.duplicate_of if decision.is_duplicate else article_id
        indexed = self._adds_to_index(decision, has_shingles)
        view.insert(article_id=article_id, first_seen=now, simhash=fp.simhash, n_shingles=fp.n_shingles,
                    exact=fp.exact, minhash=sig, root_id=root_id,
                    decision=stored_decision.encode_decision(decision, article_id, root_id),
                    bucket_keys=bucket_keys, permuted=permuted,
                    index_sketches=indexed, checkpoint=checkpoint,
                    receipt=receipt, identity=fp.identity, anchors=fp.anchors.shape[0],
                    words=fp.words if indexed else rewrite.NO_WORDS,
                    postings=self._postings(view, passage, matched, decision, has_shingles, prep.anchor_bytes))
        return decision

    def _passages(self, view: BatchView, article_id: str, fp: Fingerprint, sig: np.ndarray, found: list[int], first: Decision,
                  matched: set[int]) -> tuple[Decision, passages.PassageLookup]:
        """The decision again with the passage anchors: their candidates added, containment also
        measured on anchors, boilerplate discounted. Only for articles that are new or contained
        after the LSH and SimHash candidates (a Jaccard or SimHash copy needs no more evidence)."""
        c = self.config
        passage = passages.lookup(view.passages, fp.anchors, c.passage_common_docs, c.passage_min_shared)
        if not passage.shared and (not first.is_duplicate or passage.usable == fp.anchors.shape[0]):
            return first, passage  # nothing shared, and no boilerplate to discount: the first decision stands
        more = sorted(passage.shared, key=passage.shared.__getitem__, reverse=True)[:MAX_VERIFY // 4]
        matched.clear()
        return self._verify(view, article_id, fp, sig, sorted(set(found).union(more)), passage, matched), passage

    def _postings(self, view: BatchView, passage: passages.PassageLookup | None, matched: set[int], decision: Decision,
                  has_shingles: bool, anchor_bytes: bytes | None = None) -> tuple[np.ndarray, bytes]:
        """The passage lists the new article joins: only an article whose lists were read (new, or
        contained), by the rule of :func:`_adds_to_index`, and none that already holds an article it
        was verified a duplicate of."""
        if passage is None or not self._adds_to_index(decision, has_shingles):
            return passages.NO_ANCHORS, b""
        return passages.posting_writes(passage, self.config.passage_common_docs, matched, anchor_bytes)

    def _adds_to_index(self, decision: Decision, has_shingles: bool) -> bool:
        """Whether the article's sketches go into the LSH buckets and SimHash tables.

        Not for exact duplicates, empty texts, nor near-copies at least ``index_below_similarity``
        similar to their match: any later copy of such a near-copy is also close to its match
        (the decision needs only ``jaccard_threshold``), so indexing it would add writes, not recall.
        """
        if not has_shingles or decision.method == "exact":
            return False
        return not (decision.is_duplicate and (decision.similarity or 0.0) >= self.config.index_below_similarity)

    def checkpoint(self, name: str) -> int | None:
        """The offset last stored with ``decide(..., checkpoint=(name, offset))``."""
        return self.index.checkpoint(name)

    def remove(self, article_id: str) -> bool:
        """Forget an article (its id may then be processed afresh). True if it was indexed."""
        seq = self.index.seq_of(article_id)
        art = self.index.article(seq) if seq is not None else None
        if art is None:
            return False
        self._delete(art)
        return True

    def evict_expired(self, now: float | None = None) -> int:
        """Evict every article first seen more than ``retention`` seconds before ``now``."""
        if not self.config.retention:
            return 0
        now = time.time() if now is None else now
        evicted = 0
        while True:
            seqs = self.index.oldest(now - self.config.retention, limit=1000)
            if not seqs:
                break
            for art in self.index.articles(seqs):
                self._delete(art)
                evicted += 1
            if len(seqs) < 1000:
                break
        self.evicted_total += evicted
        return evicted

    def __len__(self) -> int:
        return self.index.count

    def expect(self, articles: int) -> None:
        """A hint: about ``articles`` more articles will be indexed (``dedup`` on a file tells it
        from the file's size once its first records are decided). The in-memory lists are prepared
        for them now, at the rate of slots and list nodes the articles indexed so far took
        (:func:`stream_dedup.memory_lists.expect`), so that they do not grow step by step on the way.
        Decisions do not change; more articles than expected grow the lists as usual."""
        memory_lists.expect(self.index.lists(), self.index.count, articles)

    def disk_bytes(self) -> int:
        return self.index.disk_bytes()

    def snapshot_bytes(self) -> int:
        """Bytes of the in-memory lists' snapshot files beside the index (:meth:`Index.snapshot_bytes`)."""
        return self.index.snapshot_bytes()

    def memory_stats(self) -> dict[str, int]:
        """RocksDB's memory budget, block cache usage and hit/miss counts (see :meth:`Index.memory_stats`)."""
        return self.index.memory_stats()

    def close(self) -> None:
        self.index.close()

    def __enter__(self) -> Deduplicator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals --------------------------------------------------------------------------
    def _replay(self, view: BatchView, seq: int, checkpoint: tuple[str, int] | None,
                receipt: bytes | None) -> Decision:
        art = view.article(seq)
        if checkpoint is not None or receipt is not None:
            view.mark(checkpoint, receipt, replayed=True)
        assert art is not None, f"index is missing the record of seq {seq}"
        return Decision.from_stored(art.decision, art.article_id)

    def _maybe_evict(self, now: float) -> None:
        if self.config.retention and now - self._last_evict >= EVICT_EVERY_SECONDS:
            self._last_evict = now
            self.evict_expired(now)

    def _delete(self, art: StoredArticle) -> None:
        bucket_keys = self.index.buckets.keys(art.minhash) if art.indexed else NO_KEYS
        permuted = self.tables.permute_array(art.simhash) if art.indexed else NO_KEYS
        self.index.delete(art, bucket_keys, permuted)

    def _verify(self, view: BatchView, article_id: str, fp: Fingerprint, sig: np.ndarray, seqs: list[int],
                passage: passages.PassageLookup | None = None, matched: set[int] | None = None,
                seq_array: np.ndarray | None = None) -> Decision:
        """The decision among the candidates ``seqs``; the seqs of those that pass the text rules
        (look-alikes included) are added to ``matched``.

        The rules run compiled, on the candidates' whole records in one call
        (:mod:`stream_dedup.candidate_rules`); :meth:`_verify_reference` (:mod:`stream_dedup.python_rules`) is the same in Python, run
        where the kernel cannot answer exactly (a containment at a rounding half).
        """
        if not seqs:
            return Decision(id=article_id, type="new")
        rules, store = self._compiled, self.index.record_store
        query = sig.astype(np.int64)
        found, raw = seqs, None
        anchored = passage is not None
        out = rules.run_stored(store, np.array(seqs, dtype=np.uint32) if seq_array is None else seq_array, query,
                               fp.simhash, fp.n_shingles, fp.words, fp.identity,
                               *(([passage.shared.get(s, 0) for s in seqs] if passage.shared else None, passage.usable,
                                  1.0 - passage.usable / fp.anchors.shape[0]) if anchored else ()))
        if type(out) is int:  # records the store does not hold: read them (and verify from the list)
            values = view.records(seqs)
            if None in values:  # an evicted candidate (rare)
                kept = [(s, v) for s, v in zip(seqs, values, strict=True) if v is not None]
                found, raw = [s for s, _ in kept], [v for _, v in kept]
            else:
                raw = values
            if not found:
                return Decision(id=article_id, type="new", candidates=len(seqs))
            shared = [passage.shared.get(s, 0) for s in found] if anchored and passage.shared else None
            out = rules.run(raw, query, fp.simhash, fp.n_shingles, fp.words, fp.identity,
                            *((shared, passage.usable, 1.0 - passage.usable / fp.anchors.shape[0]) if anchored else ()))
        if out is None:
            return self._verify_reference(view, article_id, fp, sig, seqs, passage, matched)
        if matched is not None and rules.passing:
            matched.update([found[i] for i in rules.passed[:rules.passing].tolist()])
        best, template, agreed, _ = rules.summary.tolist()
        if best < 0:
            if template >= 0:
                t = int(template)
                return look_alike(article_id, out[candidate_rules.O_JACCARD, t].item(), len(found),
                                  self.index.ids(rules.record(store, t) if raw is None else raw[t])[0], agreed)
            return Decision(id=article_id, type="new", candidates=len(found))
        b = int(best)
        return verified(article_id, *out[:candidate_rules.O_START, b].tolist(),
                        *self.index.ids(rules.record(store, b) if raw is None else raw[b]), len(found))

    def _rules(self) -> np.ndarray:
        """The thresholds of :meth:`_may_pass` and of the compiled screen
        (:func:`~stream_dedup.kernels.screen_candidates`), lowered by the margin: computed once, the
        config being fixed, so that the two read the same values."""
        c = self.config
        low = MAY_PASS_MARGIN
        return np.array([min(c.jaccard_threshold, c.short_text_jaccard) - low,  # minhash, short texts
                         c.simhash_min_jaccard - low, c.simhash_k, c.containment_threshold - low,
                         c.rewrite_jaccard - low if c.rewrite_jaccard > 0 else 2.0,  # 2: above any estimate (no rule)
                         rewrite.MIN_LENGTH - low], dtype=np.float64)

    def is_short_text(self, n_shingles: int) -> bool:
        """Fewer than ``short_text_words`` words, counted as distinct word shingles + k - 1
        (``0 < n + k - 1 < short_text_words``; never with character shingles): :attr:`_short_range`."""
        low, high = self._short_range
        return low < n_shingles < high
