"""Stage 1 on confluent-kafka: articles in, signature records out, at-least-once, in event-time order.

One loop in its own process (:mod:`.stage_process`), with no event loop and no per-record
future::

    consume what has arrived (or wait for the first record to arrive)
    merge the owned partitions by timestamp (:class:`.ordering.OrderBuffer`), holding records
      while another worker's partition is behind them (:mod:`.progress`)
    parse + fingerprint the released records (:func:`.stage1.compute`, the engine's kernels)
    produce their signature (or reject) records to the signatures topic (acks=all, idempotent)
    serve delivery reports: a batch whose records are all acknowledged stores its input offsets

Offsets are *stored* (``enable.auto.offset.store=false``) only once every signature record of
the batch and of the batches before it is acknowledged, and librdkafka's auto-commit commits
only stored offsets; so a committed input offset always has its signature durable, and after a
crash the records after it are sent again (the decision stage answers each input record once:
:mod:`.decisions`).  Within a partition records are never reordered, so the stored offset of a
partition never passes a record the order buffer still holds.  On revocation the stage waits
for its records in flight, stores and commits their offsets synchronously, and drops what the
merge still holds (the partition's next owner reads it again); on a lost assignment it commits
nothing, and a member that is then not let back into the group is restarted (:mod:`.rejoin`).
What ``/readyz`` says, client errors and the watches are in :mod:`.stage1_health`.

Why not Faust here: ``bench/consume_cost.py`` measured the CPU one record costs to consume from a
3-partition topic: a Faust agent ~160 µs, aiokafka alone ~10 µs, confluent-kafka ~2.5 µs.  At the
service's rates Faust's per-message path alone took a fifth of a core of a 2-core machine.
``--stage1-client faust`` keeps the Faust agent (:mod:`.app`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any

from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from stream_dedup.config import EngineConfig, ServiceConfig
from stream_dedup.metrics import Metrics

from . import kafka_config, stage1
from .deciding import FatalError
from .ordering import OrderBuffer
from .producer import producer_config
from .progress import HELD_LONG, Exchange
from .rejoin import RejoinWatch, rejoin_limit
from .serialization import reject_record
from .stage1_health import Stage1Health
from .stall import UNOWNED, StallWatch, unowned_limit
from .stall import reasons as stall_reasons

log = logging.getLogger("stream_dedup.service.stage1")

#: longest the loop waits for a record when nothing is held (returns at once when one arrives)
IDLE_WAIT = 0.1
#: longest it waits while the order buffer holds records (their wait may end meanwhile)
HOLD_WAIT = 0.01
#: the signatures producer's linger: a batch's records go in one request
SIGNATURES_LINGER = 0.002
#: seconds an input partition's end offset asked of the broker is reused by :meth:`FingerprintStage._behind`
BEHIND_CHECK = 0.25
#: seconds a revocation or a shutdown waits for the records in flight
FLUSH_TIMEOUT = 30.0
STATS_INTERVAL_MS = 5000


def _never(part: int, last_offset: int) -> bool:
    return False


class _Sent:
    """One produced batch: its delivery reports still to come and the input offsets it covers."""

    __slots__ = ("left", "offsets", "dropped", "stage")

    def __init__(self, stage: FingerprintStage, n: int, offsets: dict[int, int]) -> None:
        self.stage, self.left, self.offsets, self.dropped = stage, n, offsets, False

    def delivered(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self.stage._failed(err, msg)
            return
        self.left -= 1
        if self.left == 0:
            self.stage._store_done()


class FingerprintStage(Stage1Health):
    """The loop and its state; :meth:`run` blocks until :meth:`stop` (or a fatal error)."""

    def __init__(self, service: ServiceConfig, engine: EngineConfig, metrics: Metrics | None = None,
                 dlq_budget: int = 1_000_000, member: int = 0) -> None:
        self.service = service
        self.metrics = metrics or Metrics()
        self.topic = service.input_topic
        self.out_topic = service.signatures_topic
        self.dlq_budget = dlq_budget
        self.client_conf = kafka_config.service_client_config(service)
        stage1.init(engine)  # the fingerprinter, its kernels warmed up
        self.order = OrderBuffer(float(service.order_wait))
        self.metrics.order_held.set_function(lambda: self.order.size)
        self._early = self.metrics.order_released_early.labels(str(member))
        self._early_counted, self._early_logged = 0, 0.0
        self.owned: set[int] = set()
        self.start_offsets: dict[int, int] = {}
        self._ends: dict[int, tuple[float, int]] = {}  # (when asked, end offset) per partition: _behind
        self.pending: deque[_Sent] = deque()
        self.assigned_once = False
        self.state = "joining the group"
        self.broker_error: str | None = None  # the broker cannot be reached
        self.client_error: str | None = None  # any other client error (e.g. the group refused us)
        self.client_fatal: str | None = None
        self.fatal: str | None = None
        self._stop = threading.Event()
        self._lag_labels: set[str] = set()
        self._next_check = 0.0
        self.stall = StallWatch()
        self.unowned = StallWatch(limit=unowned_limit(service.session_timeout), words=UNOWNED)
        self.rejoin = RejoinWatch(rejoin_limit(service.session_timeout))
        self.group_view = kafka_config.GroupView(self.client_conf, service.app_id, "stage 1")  # the watches' client
        self.consumer = Consumer(kafka_config.stage1_consumer_config(
            service, self.client_conf, member, error_cb=self._on_error, stats_cb=self._on_stats,
            **{"statistics.interval.ms": STATS_INTERVAL_MS}))
        self.producer = Producer({**producer_config(self.client_conf, SIGNATURES_LINGER), "error_cb": self._on_error})
        self.progress = Exchange(self.client_conf, service.app_id, self.topic, service.signatures_topic,
                                 f"{kafka_config.instance_id(service)}-{member}", float(service.order_wait_workers),
                                 self._on_error)  # the other workers' partitions (:mod:`.progress`)

    # ------------------------------------------------------------------ public
    def stop(self) -> None:
        self._stop.set()

    def status(self) -> dict[str, Any]:
        reasons = []
        if self.fatal:
            reasons.append(f"stage 1 failed: {self.fatal}")
        if self.broker_error:
            reasons.append(f"cannot reach the broker: {self.broker_error}")
        if self.client_error:
            reasons.append(self.client_error)
        if not self.assigned_once:
            reasons.append("waiting for the first partition assignment")
        reasons += stall_reasons("stage 1", self.stall, self.unowned)
        if self.rejoin.out:
            reasons.append(f"stage 1: {self.rejoin.reason()}")
        return {"state": self.state, "assigned": sorted(f"{self.topic}-{p}" for p in self.owned),
                "assigned_once": self.assigned_once, "reasons": reasons}

    def run(self) -> int:
        """0 after :meth:`stop`; 3 after a fatal error (nothing unacknowledged is committed)."""
        self.consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_lost)
        code = 0
        try:
            while not self._stop.is_set():
                msgs = self._fetch(int(self.service.batch_size), HOLD_WAIT if self.order.size else IDLE_WAIT)
                if self.client_fatal:
                    raise FatalError(f"Kafka client: {self.client_fatal}")
                self._watch_rejoin()
                if msgs:
                    self.order.add((m.partition(), m.offset(), self._timestamp_ms(m), m) for m in msgs)
                self.progress.tick(self.producer, self.owned, self._watermarks)
                if self.order.size:
                    self._send(self.order.release(sorted(self.owned), self._caught_up, self.progress.foreign,
                                                  self._behind))
                    if self.order.released_early != self._early_counted:
                        self._count_early()
                self.producer.poll(0)  # delivery reports: store the offsets of acknowledged batches
                if self.fatal:
                    raise FatalError(self.fatal)
                if self.broker_error is not None:
                    self._recheck_broker()
                if self.stall.due():
                    self._watch_stall()
        except FatalError as exc:
            self.fatal = str(exc)
            log.error("stage 1 stopped: %s", exc)
            code = 3
        finally:
            self._close(clean=code == 0)
        return code

    # ------------------------------------------------------------------ the loop's steps
    def _fetch(self, most: int, wait: float) -> list[Any]:
        """What has arrived (up to ``most``), else the first record within ``wait`` s and what came with it."""
        good = []
        for m in kafka_config.consume_available(self.consumer, most, wait):
            err = m.error()
            if err is None:
                good.append(m)
            elif kafka_config.is_fatal(err):
                self.client_fatal = str(err)
            elif err.code() != KafkaError._PARTITION_EOF:
                self._client_trouble(err)
        if good:
            self._flowing()
            self.stall.progressed()
        return good

    @staticmethod
    def _timestamp_ms(m: Any) -> int:
        kind, ts = m.timestamp()
        return int(ts) if kind != 0 and ts > 0 else int(time.time() * 1000)

    def _watermarks(self, stale: bool) -> dict[int, int | None]:
        """The owned partitions' sent watermarks (:mod:`.progress`); ``stale``: none is caught up."""
        return self.order.watermarks(sorted(self.owned), _never if stale else self._caught_up, HELD_LONG)

    def _caught_up(self, part: int, last_offset: int) -> bool:
        """Whether ``part`` has nothing more to deliver now (its high watermark as the last fetch saw it)."""
        try:
            _low, high = self.consumer.get_watermark_offsets(TopicPartition(self.topic, part), cached=True)
        except KafkaException:
            return False
        return high >= 0 and self._next_offset(part, last_offset) >= high

    def _next_offset(self, part: int, last_offset: int) -> int:
        """Where this stage stands in ``part``: after the last offset fetched, or its start offset."""
        return max(last_offset + 1, self.start_offsets.get(part, -1))

    def _behind(self, part: int, last_offset: int) -> bool:
        """Whether the broker holds records of ``part`` past where this stage stands, asked afresh
        through the watches' own client (at most every :data:`BEHIND_CHECK` s per partition; no
        answer in time: not behind, the merge does not wait on a guess)."""
        now = time.monotonic()
        seen = self._ends.get(part)
        if seen is None or now - seen[0] >= BEHIND_CHECK:
            try:
                _low, high = self.group_view.client().get_watermark_offsets(TopicPartition(self.topic, part),
                                                                         timeout=0.2, cached=False)
            except KafkaException:
                high = -1
            seen = self._ends[part] = (now, high)
        high = seen[1]
        return high >= 0 and high > self._next_offset(part, last_offset)

    def _send(self, released: list[Any]) -> None:
        """Fingerprint the released records and produce their records, a batch at a time."""
        size = int(self.service.batch_size)
        for i in range(0, len(released), size):
            msgs = released[i:i + size]
            results = stage1.compute([(m.value() or b"", m.topic(), m.partition(), m.offset(), self._timestamp_ms(m))
                                      for m in msgs])
            offsets: dict[int, int] = {}
            for m in msgs:
                offsets[m.partition()] = m.offset()
            sent = _Sent(self, len(msgs), offsets)
            self.pending.append(sent)
            for m, (kind, a, b) in zip(msgs, results, strict=True):
                if kind == "sig":
                    self._produce(b, a.encode("utf-8"), sent)
                else:
                    self._produce(self._reject(m, a, b), m.key(), sent)

    def _produce(self, value: bytes, key: bytes | None, sent: _Sent) -> None:
        while True:
            try:
                self.producer.produce(self.out_topic, value, key, partition=0, on_delivery=sent.delivered)
                return
            except BufferError:  # the producer's queue is full: the broker is slow; wait for it
                self.stall.progressed()  # waiting for the broker to take records is not a stall
                self.producer.poll(0.05)
                if self._stop.is_set() and self.broker_error is not None:
                    raise FatalError("stopping while the broker does not take records") from None

    def _reject(self, m: Any, reason: str, detail: str) -> bytes:
        """The reject record of a bad input record (its dead letter is written by the decision stage)."""
        log.warning("rejected %s[%d]@%d: %s (%s)", m.topic(), m.partition(), m.offset(), reason, detail[:200])
        kind, ts = m.timestamp()
        return reject_record(reason=reason, detail=detail, key=m.key(), value=m.value() or b"",
                             headers=m.headers(), topic=m.topic(), partition=m.partition(), offset=m.offset(),
                             timestamp_ms=ts if kind != 0 and ts > 0 else None, budget=self.dlq_budget).encode()

    # ------------------------------------------------------------------ delivery -> stored offsets
    def _store_done(self) -> None:
        """Store the input offsets of the acknowledged batches at the head of the queue, in order."""
        offsets: dict[int, int] = {}
        while self.pending and self.pending[0].left == 0:
            sent = self.pending.popleft()
            if not sent.dropped:
                offsets.update(sent.offsets)
        owned = [TopicPartition(self.topic, p, o + 1) for p, o in offsets.items() if p in self.owned]
        if owned:
            try:
                self.consumer.store_offsets(offsets=owned)
            except KafkaException as exc:  # revoked meanwhile: its next owner reads them again
                log.debug("store_offsets: %s", exc)
        self._flowing()

    def _failed(self, err: KafkaError, msg: Any) -> None:
        """A signature record was not delivered: stop storing, exit (the records are read again)."""
        if err.code() == KafkaError._PURGE_QUEUE:
            return
        if self.fatal is None:
            self.fatal = f"signature record to {msg.topic()} not delivered: {err}"
        for sent in self.pending:
            sent.dropped = True

    def _drain(self, timeout: float) -> None:
        """Wait for the records in flight; what is not acknowledged in time is dropped, not stored."""
        left = self.producer.flush(timeout)
        if left:
            log.warning("stage 1: %d signature records not acknowledged in %.0f s; their input records will "
                        "be read again", left, timeout)
        for sent in self.pending:
            sent.dropped = True
        self.pending.clear()

    # ------------------------------------------------------------------ group membership
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.owned = {p.partition for p in partitions if p.topic == self.topic}
        self.order.forget(self.owned)
        self.start_offsets = {}
        if self.owned:
            try:  # where each partition starts (for "caught up" before its first record)
                for tp in consumer.committed(partitions, timeout=10):
                    if tp.offset != OFFSET_INVALID and tp.offset >= 0:
                        self.start_offsets[tp.partition] = tp.offset
            except KafkaException as exc:
                log.debug("committed offsets: %s", exc)
        self.progress.watch(self.owned)
        self.stall.progressed()  # a new assignment: its partitions' clock starts now
        self.rejoin.assigned()
        self.assigned_once = True
        if self.client_error is not None:
            log.info("stage 1: joined the group")
            self.client_error = None
        self.state = "consuming" if self.owned else "standby"
        log.info("stage 1: assigned %d input partitions%s", len(self.owned),
                 "" if self.owned else ": standby (more workers than partitions)")

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Send what the merge holds, wait for the records in flight, commit their offsets.

        The held records go merged but without waiting: left to the partitions' next owner, a
        backlog's records would wait ``--order-wait`` there once more.
        """
        held = self._flush_held()
        self._drain(FLUSH_TIMEOUT)
        try:
            consumer.commit(asynchronous=False)
        except KafkaException as exc:  # nothing stored since the last commit
            log.debug("commit on revoke: %s", exc)
        revoked = {p.partition for p in partitions if p.topic == self.topic}
        self.owned -= revoked
        self.order.forget(self.owned)
        log.info("stage 1: %d input partitions revoked%s", len(revoked),
                 f" ({held} held records sent first)" if held else "")
        self.state = "rebalancing"

    def _flush_held(self) -> int:
        """Send every record the merge holds, in merged order, without waiting for any partition."""
        if self.fatal or not self.order.size:
            return 0
        held = self.order.release([], self._caught_up)
        self._send(held)
        return len(held)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.warning("stage 1: %d input partitions lost (session expired)", len(partitions))
        for sent in self.pending:
            sent.dropped = True  # never store for a generation that is gone
        self.owned = set()
        self.order.forget(set())
        self.rejoin.lost()
        self.state = "rebalancing"

    # ------------------------------------------------------------------ shutdown
    def _close(self, clean: bool) -> None:
        """Send nothing more; on a clean stop wait for the records in flight and commit their offsets."""
        self._stop.set()
        if clean:
            self._flush_held()
            self._drain(FLUSH_TIMEOUT)
        # commits the stored offsets (a static member keeps its partitions)
        kafka_config.close_consumer(self.consumer, "stage 1", 1.0 if self.rejoin.out else kafka_config.CLOSE_SECONDS)
        self.group_view.close()
        self.progress.close()
