"""Deciding signature records: each record the decision stage fetched becomes a decision on the
engine index and its output (an event or a dead letter), handed to the stage's producer.

:class:`Decider` answers records in signature-offset order with ``now`` = the input record's
timestamp, and reads each record's receipt (:mod:`.receipts`) as the exactly-once argument in
:mod:`.decisions` says: decide it, emit its stored decision again, or skip a second copy.  Runs of
fresh records go to the engine's batched path; anything else takes the one-record path, so a
record that fails goes alone to the dead-letter topic.  It also applies records without
producing anything (the catch-up, :mod:`.catchup`) and counts the metrics of a committed
transaction's records.  :func:`open_index` and :func:`warm_up` open the index it decides on.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from stream_dedup.config import EngineConfig, ServiceConfig
from stream_dedup.metrics import Metrics

from . import catchup
from .receipts import receipt_token
from .serialization import (
    RejectRecord,
    SignatureDecodeError,
    SignatureRecord,
    decode_stage_record,
    encode_json,
    iso_now,
    output_event,
    output_event_json,
    reject_record,
)

if TYPE_CHECKING:
    from stream_dedup.batch_decisions import EventBatch

log = logging.getLogger("stream_dedup.service.decisions")  # the decision stage logs under one name

PROCESSING_ERROR = "processing_error"
#: consecutive records whose decision raised before the stage gives up (disk full, corrupt index)
MAX_CONSECUTIVE_DECIDE_ERRORS = 10


class WrittenFact(NamedTuple):
    """What the metrics read of a decision whose event a compiled call wrote (:meth:`Decider.observe`)."""
    candidates: int
    is_duplicate: bool
    method: str | None
    similarity: float | None
    seen_before: bool = False


def _written_facts(events: EventBatch) -> dict[int, WrittenFact]:
    """Per position of an event written compiled, what its decision says (the batch's tally)."""
    new = set(events.new)
    duplicates = iter(zip(events.methods, events.similarities, strict=True))
    facts = {}
    for k, candidates in zip(events.written, events.candidates, strict=True):
        if k in new:
            facts[k] = WrittenFact(candidates, False, None, None)
        else:
            method, similarity = next(duplicates)
            facts[k] = WrittenFact(candidates, True, method, similarity)
    return facts


class FatalError(RuntimeError):
    """The stage cannot go on (fenced by a newer owner, authorisation, ...): exit, let reconciliation decide."""


class Produce(Protocol):
    """Sends one output record in the open transaction."""

    def __call__(self, topic: str, value: bytes, key: bytes | None, headers: Any = None) -> None: ...


def open_index(engine: EngineConfig, path: Path, timeout: float = 30.0) -> Any:
    """The engine on ``path``, waiting out the lock of a previous process that is still exiting."""
    from stream_dedup.engine import Deduplicator

    deadline = time.monotonic() + timeout
    while True:
        try:
            return Deduplicator(engine, path)
        except Exception as exc:  # rocksdict raises a plain Exception for the LOCK file
            if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                raise
            time.sleep(0.25)


def warm_up(engine: EngineConfig) -> None:
    """Load the engine's compiled kernels now (a scratch index), not on the first article's clock."""
    import tempfile

    from stream_dedup.engine import Deduplicator
    from stream_dedup.record import parse_record

    text = " ".join(f"warm{i} up the compiled kernels of the decision stage" for i in range(8))
    with tempfile.TemporaryDirectory(prefix="stream-dedup-warm-") as tmp, Deduplicator(engine, tmp) as d:
        for i in range(2):  # the second one verifies a candidate
            d.process(parse_record(f'{{"id": "w{i}", "text": "{text}"}}'.encode(), engine))


class Decider:
    """Decides signature records on ``dedup`` and sends their outputs through ``produce``.

    ``last_applied`` is the last signature offset in the index; ``service`` names the topics.
    """

    def __init__(self, service: ServiceConfig, dedup: Any, metrics: Metrics, produce: Produce,
                 dlq_budget: int) -> None:
        self.service = service
        self.topic = service.signatures_topic
        self.dedup = dedup
        self.metrics = metrics
        self._produce = produce
        self.dlq_budget = dlq_budget
        self.last_applied: int | None = dedup.checkpoint(catchup.CHECKPOINT_NAME)
        self.decide_errors = 0

    def decide_records(self, msgs: list[Any], observed: list[tuple[Any, Any, float]]) -> None:
        """Answer each signature record once, in offset order, deciding runs of fresh articles in batches.

        A run of signature records whose input records were never answered goes to the engine's
        batched path (:meth:`Deduplicator.decide_batch`: one multi-get per key kind, one atomic
        write with the run's last checkpoint, each article at its own event time). Anything else
        (a reject record, an input record decided before at this offset by a transaction that did
        not commit) ends the run and takes the one-record path. A second copy of an input record
        (stage 1 is at-least-once) is skipped, whether its first copy is in the index or earlier in
        the same run.
        """
        run: list[tuple[Any, SignatureRecord, bytes]] = []
        in_run: set[bytes] = set()
        for m in msgs:
            rec, token = self._decode(m)
            if token in in_run:
                self.metrics.redelivered.inc()
                continue
            prior = self.dedup.receipt(token)
            if prior is not None and prior[0] != m.offset():
                self.metrics.redelivered.inc()  # a second copy of an input record already answered
                continue
            if prior is None and isinstance(rec, SignatureRecord):
                run.append((m, rec, token))
                in_run.add(token)
                continue
            self._decide_run(run, observed)
            run, in_run = [], set()
            self._decide_one(m, observed, rec, token, prior)
        self._decide_run(run, observed)

    def _decode(self, m: Any) -> tuple[SignatureRecord | RejectRecord, bytes]:
        """The record of signature message ``m`` (an undecodable one becomes a reject) and its receipt token."""
        try:
            rec: SignatureRecord | RejectRecord = decode_stage_record(m.value())
        except SignatureDecodeError as exc:
            rec = reject_record(reason=PROCESSING_ERROR, detail=f"bad signature record: {exc}", key=m.key(),
                                value=m.value() or b"", headers=m.headers(), topic=self.topic, partition=0,
                                offset=m.offset(), timestamp_ms=m.timestamp()[1], budget=self.dlq_budget)
        return rec, receipt_token(rec.source_topic, rec.source_partition, rec.source_offset)

    def _decide_run(self, run: list[tuple[Any, SignatureRecord, bytes]], observed: list[tuple[Any, Any, float]]) -> None:
        """Decide a run of fresh signature records in one engine batch and produce their events.

        If the batch raises, it wrote nothing: its records are decided one by one, so that only
        the record that fails goes to the dead-letter topic.
        """
        if not run:
            return
        if len(run) == 1:
            m, rec, token = run[0]
            self._decide_one(m, observed, rec, token, None)
            return
        t0 = time.perf_counter()
        try:
            events = self._decide_batch([(m.offset(), rec, token) for m, rec, token in run])
        except Exception:  # noqa: BLE001 - isolate the record that fails
            log.warning("a batch of %d decisions failed; deciding its records one by one", len(run), exc_info=True)
            for m, rec, token in run:
                self._decide_one(m, observed, rec, token, None)
            return
        self.decide_errors = 0
        each = (time.perf_counter() - t0) / len(run)
        processed_at = time.time()
        facts = _written_facts(events)
        iso = iso_now(processed_at)
        new_topic, duplicates_topic = self.service.new_topic, self.service.duplicates_topic
        for k, ((_m, rec, _token), item) in enumerate(zip(run, events.items, strict=True)):
            if type(item) is str:  # (written compiled, in orjson's form: the source position appended)
                fact = facts[k]
                self._produce(duplicates_topic if fact.is_duplicate else new_topic,
                              output_event_json(item, rec, iso), rec.article_id.encode("utf-8"))
                item = fact
            else:
                self._emit(rec, item, processed_at)
            observed.append((rec, item, each + rec.engine_us / 1e6))
        self.last_applied = run[-1][0].offset()

    def _decide_batch(self, run: list[tuple[int, SignatureRecord, bytes]]) -> EventBatch:
        """The engine's batched path on ``(signature offset, record, receipt token)`` triples: each
        article at its own event time, its checkpoint and receipt in the batch's one atomic write;
        the events the compiled calls write in orjson's form (:meth:`Deduplicator.decide_batch_events`).
        The fingerprints are decoded into one batch of arrays (:meth:`FingerprintBatch.from_wire
        <stream_dedup.fingerprint_batch.FingerprintBatch.from_wire>`: no ``Fingerprint`` each; a bad
        one raises, and the caller decides the run one record at a time)."""
        from stream_dedup.fingerprint_batch import FingerprintBatch

        return self.dedup.decide_batch_events(
            [rec.article_id for _, rec, _ in run], FingerprintBatch.from_wire([rec.fingerprint for _, rec, _ in run]),
            now=[rec.timestamp_ms / 1000.0 for _, rec, _ in run],
            checkpoints=[(catchup.CHECKPOINT_NAME, offset) for offset, _, _ in run],
            receipts=[token for _, _, token in run], compact=True, roots=False)

    def _emit(self, rec: SignatureRecord, decision: Any, processed_at: float) -> None:
        value = encode_json(output_event(decision.to_event(), rec, processed_at))
        topic = self.service.duplicates_topic if decision.is_duplicate else self.service.new_topic
        self._produce(topic, value, rec.article_id.encode("utf-8"))

    def _decide_one(self, m: Any, observed: list[tuple[Any, Any, float]], rec: SignatureRecord | RejectRecord,
                    token: bytes, prior: tuple[int, bool] | None) -> None:
        """One record (not a second copy): decide it or replay its uncommitted decision, or dead-letter it."""
        from stream_dedup.fingerprint import Fingerprint

        offset = m.offset()
        checkpoint = (catchup.CHECKPOINT_NAME, offset)
        t0 = time.perf_counter()
        if isinstance(rec, SignatureRecord):
            decision = None
            if prior is not None:  # decided at this offset by a transaction that did not commit
                decision = self.dedup.decision_of(rec.article_id)
                if decision is not None:
                    decision.seen_before = prior[1]
            if decision is None:
                try:
                    fp = Fingerprint.from_bytes(rec.fingerprint)
                    decision = self.dedup.decide(rec.article_id, fp, now=rec.timestamp_ms / 1000.0,
                                                 checkpoint=checkpoint, receipt=token)
                    self.decide_errors = 0
                except Exception as exc:  # noqa: BLE001 - one poisonous record must not stop the stream
                    self.decide_errors += 1
                    if self.decide_errors >= MAX_CONSECUTIVE_DECIDE_ERRORS:
                        raise FatalError(f"{self.decide_errors} decisions in a row failed: {exc!r}") from exc
                    log.exception("decision for %r failed", rec.article_id)
                    rec = reject_record(reason=PROCESSING_ERROR, detail=f"decision failed: {type(exc).__name__}: {exc}",
                                        key=m.key(), value=m.value() or b"", headers=(), topic=rec.source_topic,
                                        partition=rec.source_partition, offset=rec.source_offset,
                                        timestamp_ms=rec.timestamp_ms, budget=self.dlq_budget)
            if isinstance(rec, SignatureRecord):
                self.last_applied = offset
                self._emit(rec, decision, time.time())
                observed.append((rec, decision, time.perf_counter() - t0 + rec.engine_us / 1e6))
                return
        if prior is None:
            self.dedup.record_receipt(token, checkpoint)
        self.last_applied = offset
        key, value, headers = rec.dead_letter()
        self._produce(self.service.dlq_topic, value, key, headers)
        observed.append((rec, rec.reason, 0.0))

    def apply_records(self, records: list[tuple[int, bytes]]) -> None:
        """Catch-up: put ``(offset, value)`` signature records the group already committed into the
        index, producing nothing; runs of fresh articles go to the engine's batched path.

        The same answers as :meth:`apply_only` one record at a time (a test compares them): a record
        whose input record has a receipt was applied before, a second copy inside a run is skipped,
        and anything else (a reject, an undecodable record, a batch that raises) takes the one-record path.
        """
        run: list[tuple[int, SignatureRecord, bytes]] = []
        in_run: set[bytes] = set()
        for offset, data in records:
            rec, token = self._decode_applied(offset, data)
            if isinstance(rec, SignatureRecord):
                if token in in_run:
                    continue  # a second copy of an input record of this run: applied with the first
                if self.dedup.receipt(token) is None:
                    run.append((offset, rec, token))
                    in_run.add(token)
                    continue
            self._apply_run(run)
            run, in_run = [], set()
            self._apply_one(offset, rec, token)
        self._apply_run(run)
        if records:
            self.last_applied = records[-1][0]

    def _apply_run(self, run: list[tuple[int, SignatureRecord, bytes]]) -> None:
        """One engine batch for a run of fresh signature records (one by one if it raises: it wrote nothing)."""
        if len(run) > 1:
            try:
                self._decide_batch(run)
                self.last_applied = run[-1][0]
                return
            except Exception:  # noqa: BLE001 - isolate the record that fails, as apply_only does
                log.warning("a catch-up batch of %d records failed; applying them one by one", len(run),
                            exc_info=True)
        for offset, rec, token in run:
            self._apply_one(offset, rec, token)

    def apply_only(self, offset: int, data: bytes) -> None:
        """Catch-up: put a record the group already committed into the index, producing nothing."""
        self._apply_one(offset, *self._decode_applied(offset, data))

    def _decode_applied(self, offset: int, data: bytes) -> tuple[SignatureRecord | RejectRecord | None, bytes]:
        """The record at signature ``offset`` (None if undecodable) and its receipt token: the same
        input record as _decide_one names it (an undecodable one by its own coordinates)."""
        try:
            rec = decode_stage_record(data)
        except SignatureDecodeError:
            return None, receipt_token(self.topic, 0, offset)
        return rec, receipt_token(rec.source_topic, rec.source_partition, rec.source_offset)

    def _apply_one(self, offset: int, rec: SignatureRecord | RejectRecord | None, token: bytes) -> None:
        from stream_dedup.fingerprint import Fingerprint

        checkpoint = (catchup.CHECKPOINT_NAME, offset)
        if self.dedup.receipt(token) is not None:
            pass  # applied before
        elif isinstance(rec, SignatureRecord):
            try:
                self.dedup.decide(rec.article_id, Fingerprint.from_bytes(rec.fingerprint),
                                  now=rec.timestamp_ms / 1000.0, checkpoint=checkpoint, receipt=token)
            except ValueError:
                self.dedup.record_receipt(token, checkpoint)  # it went to the DLQ
        else:
            self.dedup.record_receipt(token, checkpoint)  # a dead letter: only its receipt is kept
        self.last_applied = offset

    def observe(self, observed: list[tuple[Any, Any, float]]) -> None:
        """Metrics of a committed transaction's records, counted in bulk: one ``inc`` per label, and
        each histogram's values at once (:class:`~stream_dedup.bulk_histogram.BulkHistogram`)."""
        m = self.metrics
        m.index_articles.set(len(self.dedup))
        now = time.time()
        counts: Counter[tuple[Any, str]] = Counter()  # (labelled counter, its one label value) -> n
        processing: list[float] = []
        end_to_end: list[float] = []
        candidates: list[float] = []
        similarity: list[float] = []
        for rec, decision, engine_s in observed:
            if isinstance(decision, str):
                counts[m.dead_letters, decision] += 1
                continue
            processing.append(engine_s)
            end_to_end.append(max(0.0, now - rec.timestamp_ms / 1000.0))
            if decision.seen_before:
                continue  # a repeated id: counted when first decided
            candidates.append(float(decision.candidates))
            if decision.is_duplicate:
                counts[m.articles, "duplicate"] += 1
                counts[m.duplicates_by_method, str(decision.method)] += 1
                if decision.similarity is not None:
                    similarity.append(decision.similarity)
            else:
                counts[m.articles, "new"] += 1
        m.processing_seconds.observe_many(processing)
        m.end_to_end_seconds.observe_many(end_to_end)
        m.candidates.observe_many(candidates)
        m.similarity.observe_many(similarity)
        for (counter, label), n in counts.items():
            counter.labels(label).inc(n)
