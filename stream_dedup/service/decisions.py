"""Stage 2, the decision stage: one transactional consume -> decide -> produce loop.

It runs in its own process (:mod:`.stage_process`) with confluent-kafka (librdkafka), not
Faust: Faust's exactly-once mode has open bugs and its per-message machinery cost most of the
worker's time.  One loop iteration is one Kafka transaction::

    consume signature records (read_committed, no auto-commit)
    begin_transaction
      per record: decide on the RocksDB index, produce its event or dead letter; go on
      consuming until transaction_size records or transaction_ms have passed
    send_offsets_to_transaction(last + 1, fresh group metadata)
    commit_transaction

This module is the loop: group membership, reconciliation and catch-up, the transactions with
their retries and aborts.  Deciding the records on the index is :class:`.deciding.Decider`; what
runs between transactions (client errors, the stall and rejoin watches, the index upkeep) is in
:mod:`.decision_health`; receipts and their sweep are in :mod:`.receipts`, the broker probe in
:mod:`.broker_probe`, the clients' settings in :mod:`.kafka_config`.  The argument below is the
one place that says why the whole is exactly-once.

**Exactly one committed output per input record.**  ``articles.signatures`` has one partition,
owned by one member of the group ``<app_id>.decisions``.  Its producer has the stable
``transactional.id`` ``<app_id>.decisions.<signatures topic>-0``, so a new owner's
``init_transactions`` fences a stalled old one, whose commits then fail.  Events, dead letters
and the signature offsets are committed together or not at all.

**The index may run ahead of Kafka, never out of step.**  Each article is written to RocksDB when
it is decided (one atomic WriteBatch with the signature offset and a *receipt*: a token naming the
input record: its topic's tag, partition and offset, swept by :class:`.receipts.ReceiptSweep` once
stage 1 can no longer send that record twice).  A transaction that then aborts, or
a crash before the commit, leaves articles in the index whose events were never committed.  They
are decided again from the committed offset, and the receipt tells what to do with each record:

* no receipt: a record never decided: decide it;
* a receipt stored at *this* signature offset: decided by a transaction that did not commit:
  emit the stored decision again, unchanged (same ``seen_before`` as the first time);
* a receipt stored at another offset: a second copy of the same input record (stage 1 is
  at-least-once and re-sends after a crash or a rebalance): already answered, emit nothing.

So a committed offset C is all the state that matters: the index holds every record before C
(after the catch-up below) and possibly some after it, and re-deciding those gives the same
decisions.  Decisions are made in signature-offset order with ``now`` = the input record's
timestamp, so they are a function of the signatures log.

**Catch-up.**  On assignment the loop compares the index's last applied offset L with C.  When
L + 1 < C (another worker decided in between, or the disk is new) it replays ``[L + 1, C)`` from
the signatures topic without producing anything, then starts at C.  A standby keeps L close to C
while it waits (:mod:`.follower`, ``--standby-follow``): the same replay, a chunk per loop turn,
never past C.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from stream_dedup.config import EngineConfig, ServiceConfig
from stream_dedup.metrics import Metrics

from . import catchup, kafka_config, txn_calls
from .broker_probe import BrokerProbe
from .deciding import Decider, FatalError, open_index, warm_up
from .decision_health import DecisionHealth
from .follower import Follower
from .index_upkeep import IndexUpkeep
from .receipts import ReceiptSweep
from .rejoin import RejoinWatch, rejoin_limit
from .stall import UNOWNED, StallWatch, unowned_limit
from .stall import reasons as stall_reasons

log = logging.getLogger("stream_dedup.service.decisions")

#: longest the loop waits for a first record before its housekeeping (returns at once when one arrives)
IDLE_WAIT = 0.1
#: a transaction commit taking longer than this makes the stage report "waiting for the broker"
SLOW_COMMIT = 3.0
@dataclass(slots=True)
class _Transaction:
    """The open transaction: its outcome is unknown until committed."""

    next_offset: int | None = None
    count: int = 0
    observed: list[tuple[Any, Any, float]] = field(default_factory=list)


class DecisionStage(DecisionHealth):
    """The loop and its state; :meth:`run` blocks until :meth:`stop` (or a fatal error)."""

    def __init__(self, service: ServiceConfig, engine: EngineConfig, metrics: Metrics | None = None,
                 dlq_budget: int = 1_000_000) -> None:
        self.service = service
        self.engine_config = engine
        self.metrics = metrics or Metrics()
        self.client_conf = kafka_config.service_client_config(service)
        warm_up(engine)
        self.dedup = open_index(engine, Path(service.data_dir) / "index")
        self.decider = Decider(service, self.dedup, self.metrics, self._produce, dlq_budget)
        self.topic = service.signatures_topic
        self.owned = False
        self.needs_reconcile = False
        self.producer: Producer | None = None
        self._stop = threading.Event()
        self.state = "joining the group"
        self.broker_error: str | None = None  # the last client error, cleared when records flow or the probe answers
        self._broker_error_at = 0.0
        self.commit_started: float | None = None
        self.committed: int | None = None
        self._txn: _Transaction | None = None
        self.fatal: str | None = None
        self.client_fatal: str | None = None  # a fatal librdkafka error: this consumer is unusable
        self.sweep = ReceiptSweep(service)
        self.upkeep = IndexUpkeep(self.dedup, self.metrics, self.sweep, engine.retention,
                                  snapshot_every=service.lists_snapshot_every)
        # a standby that follows the owner sweeps its receipts too (:mod:`.follower`)
        self.probe = BrokerProbe(service, self.client_conf, self._stop, self.sweep,
                                 lambda: self.owned or self.follower is not None)
        self.stall = StallWatch()
        self.unowned = StallWatch(limit=unowned_limit(service.session_timeout), words=UNOWNED)
        self.rejoin = RejoinWatch(rejoin_limit(service.session_timeout))
        self.group_view = kafka_config.GroupView(self.client_conf, kafka_config.decisions_group(service),
                                                 "decision stage")  # the watches' client
        self._rewound_for_stall = False  # the last stall's rewind has not been followed by a commit yet
        self.consumer = Consumer(kafka_config.decisions_consumer_config(service, self.client_conf,
                                                                        error_cb=self._on_error))
        self.follower = Follower(self.client_conf, self.topic, kafka_config.decisions_group(service),
                                 self.decider.apply_records, self._index_position) \
            if service.standby_follow else None  # (the warm standby, :mod:`.follower`)

    # ------------------------------------------------------------------ public
    def stop(self) -> None:
        self._stop.set()

    def status(self) -> dict[str, Any]:
        reasons = []
        if self.fatal:
            reasons.append(f"decision stage failed: {self.fatal}")
        if self.probe.error:
            reasons.append(f"cannot reach the broker: {self.probe.error}")
        elif self.broker_error:
            reasons.append(f"cannot reach the broker: {self.broker_error}")
        if self.commit_started is not None and time.monotonic() - self.commit_started > SLOW_COMMIT:
            reasons.append("waiting for the broker to commit a transaction")
        if self.state == "catching up":
            reasons.append("index catching up")
        reasons += stall_reasons("decision stage", self.stall, self.unowned)
        if self.rejoin.out:
            reasons.append(f"decision stage: {self.rejoin.reason()}")
        status = {"state": self.state, "owns": self.owned, "index_checkpoint": self.decider.last_applied,
                  "committed_offset": self.committed, "reasons": reasons}
        if self.follower is not None and not self.owned:
            status["following"] = following = self.follower.status()
            limit, behind = int(self.service.standby_ready_behind), following["behind"]
            if limit > 0 and behind > limit:
                reasons.append(f"standby index {behind} signature records behind the committed decisions "
                               f"(following; ready within {limit}, --standby-ready-behind)")
        return status

    def run(self) -> int:
        """0 after :meth:`stop`; 3 after a fatal error."""
        self.probe.start()
        self.consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_lost)
        code = 0
        try:
            while not self._stop.is_set():
                if self.needs_reconcile:
                    self._reconcile()
                    continue
                records = self._fetch(int(self.service.transaction_size), 0.0 if self._following() else IDLE_WAIT)
                if self.client_fatal:
                    # e.g. a static member fenced by its own re-join after a broker outage
                    # (librdkafka#3437): only a new client recovers, so the worker restarts the stage
                    raise FatalError(f"Kafka consumer: {self.client_fatal}")
                if records and self.owned and self.producer is not None:
                    self.broker_error = None
                    self._transaction(records)
                elif self.follower is not None and self.state == "standby":
                    self._follow()
                self._housekeeping()
        except FatalError as exc:
            self.fatal = str(exc)
            log.error("decision stage stopped: %s", exc)
            code = 3
        finally:
            self._close()
        return code

    # ------------------------------------------------------------------ group membership
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        owns = any(p.topic == self.topic and p.partition == 0 for p in partitions)
        log.info("decision stage: %s", "assigned signatures-0" if owns else "standby (nothing assigned)")
        self.owned = owns
        self.rejoin.assigned()
        self.needs_reconcile = owns
        if owns and self.follower is not None:
            self.follower.pause()  # the catch-up and the transactions take the index from here
        self.state = "reconciling" if owns else "standby"
        consumer.assign([])  # the real assignment, with its start offset, follows the catch-up

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if any(p.topic == self.topic for p in partitions):
            log.info("decision stage: signatures-0 revoked")
        if self._txn is not None:  # revoked while a transaction collects records: commit what it has
            try:
                self._finish_transaction()
            except txn_calls.Abort as exc:
                log.warning("transaction aborted on revoke (%s); the next owner decides its records", exc)
                self._abort_open()
            except txn_calls.Stuck as exc:  # the next owner's init_transactions fences it
                log.warning("transaction stuck on revoke (%s); the next owner decides its records", exc)
                self._txn = None
                self._discard_producer()
        self._release()

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.warning("decision stage: signatures-0 lost (session expired)")
        self._abort_open()  # never commit for a generation that is gone
        self._release()
        self.rejoin.lost()
        self.state = "rejoining"

    def _abort_open(self) -> None:
        if self._txn is not None and self.producer is not None:
            self._txn = None
            try:
                self.producer.abort_transaction(30)
            except KafkaException as exc:
                log.warning("abort_transaction: %s", exc)

    def _release(self) -> None:
        self.owned = False
        self.needs_reconcile = False
        self.state = "standby"
        self._drop_producer()

    def _drop_producer(self) -> None:
        if self.producer is not None:
            try:
                self.producer.flush(5)
            except Exception:  # noqa: BLE001
                pass
            self.producer = None

    def _discard_producer(self) -> None:
        """Forget a producer that cannot end its transaction, without waiting for its queue."""
        producer, self.producer = self.producer, None
        if producer is not None:
            try:
                producer.purge()
            except Exception:  # noqa: BLE001
                log.debug("purge failed", exc_info=True)

    def _reconcile(self) -> None:
        """Start the producer, catch the index up to the committed offset, assign from there.

        The producer comes first: its ``init_transactions`` fences the previous owner's producer
        and aborts the transaction it left open. Until then the offsets that transaction sent are
        pending, and a ``read_committed`` consumer's committed-offset fetch waits for them to
        settle: for up to ``transaction.timeout.ms`` (60 s) when the previous owner died
        mid-transaction (measured in the owner-kill chaos test: the fetch timed out after 30 s).
        """
        if self.producer is None:
            self.producer = self._new_producer()
        try:
            committed = kafka_config.committed_offset(self.consumer, self.topic, 30)
        except KafkaException as exc:
            self._broker_trouble(str(exc))
            time.sleep(0.5)
            self.consumer.consume(1, timeout=0)  # serve rebalance callbacks
            return
        last_applied = self.decider.last_applied
        expected = 0 if last_applied is None else last_applied + 1
        log.info("decision stage: index at signature offset %s, group committed %s", last_applied, committed)
        if committed is not None and committed > expected:
            self.state = "catching up"
            catchup.replay(self.client_conf, self.topic, 0, expected, committed, self.decider.apply_records,
                           should_stop=lambda: self._stop.is_set() or not self.owned,
                           tick=lambda: self.consumer.consume(1, timeout=0), expect=self.decider.dedup.expect)
            if self._stop.is_set() or not self.owned:
                return
        start = committed if committed is not None else expected
        self.committed = start
        self.consumer.assign([TopicPartition(self.topic, 0, start)])
        self.needs_reconcile = False
        self.state = "deciding"
        self.stall.progressed()
        log.info("decision stage: deciding from signature offset %d", start)

    def _new_producer(self) -> Producer:
        producer = Producer(kafka_config.transactional_producer_config(
            self.service, self.client_conf, on_delivery=self._on_delivery, error_cb=self._on_error))
        while True:
            try:
                producer.init_transactions(60)
                return producer
            except KafkaException as exc:
                err = exc.args[0]
                if err.retriable() and not self._stop.is_set():
                    self._broker_trouble(str(err))
                    continue
                raise FatalError(f"init_transactions: {err}") from exc

    # ------------------------------------------------------------------ the warm standby
    def _index_position(self) -> int:
        """The first signature offset the index has not applied."""
        last = self.decider.last_applied
        return 0 if last is None else last + 1

    def _following(self) -> bool:
        """A standby whose index is behind what the group has committed (it loops without waiting)."""
        return self.follower is not None and self.state == "standby" and self.follower.behind > 0

    def _follow(self) -> None:
        """One step of the warm standby (:class:`.follower.Follower`), and its gauges."""
        assert self.follower is not None
        if self.follower.step():
            self.metrics.index_articles.set(len(self.dedup))
        self.metrics.standby_behind.set(self.follower.behind)

    # ------------------------------------------------------------------ one transaction
    def _fetch(self, most: int, wait: float) -> list[Any]:
        """Up to ``most`` records (:func:`.kafka_config.consume_available`), client errors noted."""
        return [m for m in kafka_config.consume_available(self.consumer, most, wait) if self._usable(m)]

    def _usable(self, m: Any) -> bool:
        err = m.error()
        if err is None:
            return True
        if kafka_config.is_fatal(err):
            self.client_fatal = str(err)
        elif err.code() != KafkaError._PARTITION_EOF:
            self._broker_trouble(str(err))
        return False

    def _transaction(self, records: list[Any]) -> None:
        """Decide ``records`` and whatever else arrives within ``--transaction-ms``, then commit."""
        producer = self.producer
        assert producer is not None
        try:
            producer.begin_transaction()
        except KafkaException as exc:
            raise FatalError(f"begin_transaction: {exc.args[0]}") from exc
        txn = self._txn = _Transaction()
        deadline = time.monotonic() + self.service.transaction_ms / 1000.0
        size = int(self.service.transaction_size)
        try:
            while True:
                if records:
                    self.decider.decide_records(records, txn.observed)
                    txn.next_offset = records[-1].offset() + 1
                    txn.count += len(records)
                left = deadline - time.monotonic()
                if txn.count >= size or left <= 0 or self._stop.is_set():
                    break
                records = self._fetch(size - txn.count, left)
                if self._txn is not txn:
                    return  # a rebalance callback has finished (or aborted) it
                if not records:
                    break
            self._finish_transaction()
        except txn_calls.Abort as exc:
            log.warning("transaction aborted (%s): deciding its %d records again", exc, txn.count)
            self._txn = None
            self._abort_and_rewind()
        except txn_calls.Stuck as exc:
            log.warning("transaction stuck (%s): a new producer settles it; deciding its %d records again",
                        exc, txn.count)
            self._txn = None
            self._replace_producer()

    def _finish_transaction(self) -> None:
        """Commit the open transaction: its outputs and the signature offset after its last record."""
        txn, producer = self._txn, self.producer
        assert txn is not None and producer is not None and txn.next_offset is not None
        self.commit_started = started = time.monotonic()
        give_up = started + txn_calls.STUCK_SECONDS
        try:
            self._retry(lambda: producer.send_offsets_to_transaction(
                [TopicPartition(self.topic, 0, txn.next_offset)], self.consumer.consumer_group_metadata(),
                txn_calls.call_timeout(give_up)), give_up)
            self._retry(lambda: producer.commit_transaction(txn_calls.call_timeout(give_up)), give_up)
        finally:
            took = time.monotonic() - self.commit_started
            self.commit_started = None
        self.metrics.transaction_seconds.observe(took)
        self.metrics.transaction_records.observe(txn.count)
        self._txn = None
        self.committed = txn.next_offset
        self.stall.progressed()
        self._rewound_for_stall = False
        self.decider.observe(txn.observed)

    def _retry(self, op: Callable[[], Any], give_up: float) -> None:
        """:func:`.txn_calls.retry` with this stage's broker probe and error reporting."""
        txn_calls.retry(op, give_up, lambda: self.probe.answering_since, self._broker_trouble)

    def _abort_and_rewind(self) -> None:
        producer = self.producer
        assert producer is not None
        give_up = txn_calls.give_up_at()
        try:
            self._retry(lambda: producer.abort_transaction(txn_calls.call_timeout(give_up)), give_up)
        except txn_calls.Stuck as exc:
            log.warning("abort stuck (%s): a new producer settles it", exc)
            self._replace_producer()
            return
        self._rewind()

    def _replace_producer(self) -> None:
        """A new producer (its ``init_transactions`` fences the old one and settles the transaction
        it left: committed or aborted), then decide again from the committed offset."""
        self._discard_producer()
        self._rewind()  # _reconcile makes the new producer

    def _rewind(self) -> None:
        """Decide again from the committed offset: :meth:`_reconcile` fetches it (retrying while the
        broker is away) and assigns from there; the index is ahead of it, so nothing is replayed."""
        self.consumer.assign([])
        self.needs_reconcile = True
        self.state = "reconciling"

    def _produce(self, topic: str, value: bytes, key: bytes | None, headers: Any = None) -> None:
        producer = self.producer
        assert producer is not None
        while True:
            try:
                producer.produce(topic, value, key, headers=headers)
                return
            except BufferError:
                producer.poll(0.05)

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None and err.code() != KafkaError._PURGE_QUEUE:  # purged: by an abort, logged there
            # the transaction becomes abortable: commit_transaction reports it
            log.warning("output record to %s failed: %s", msg.topic(), err)

    def _close(self) -> None:
        self._stop.set()
        if self.follower is not None:
            self.follower.close()
        # out of the group (lost, not let back in) a consumer has nothing to commit or leave
        kafka_config.close_consumer(self.consumer, "decision stage",
                                    1.0 if self.rejoin.out else kafka_config.CLOSE_SECONDS)
        self.group_view.close()
        self._drop_producer()
        self.dedup.close()

