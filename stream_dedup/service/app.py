"""The Faust app: stage 1 (signatures), stage 2 (decisions), timers, readiness.

See :mod:`stream_dedup.service` for the design.  :class:`DedupWorker` builds one
``faust.App`` with two agents:

* ``stage1`` on the input topic (all partitions, every worker): raw bytes ->
  ``parse_record`` -> ``Fingerprinter.fingerprint`` -> a signature record on the
  single-partition signatures topic; a bad record goes to the DLQ unchanged.
* ``stage2`` on ``signatures-0`` (one owner at a time): catch up the local index if it is
  behind, then ``Deduplicator.decide`` in offset order -> event on the new/duplicates topic.

Both agents read batches with ``stream.noack_take`` and ack the batch's events only after
every record they produced for it has been acknowledged by Kafka (``acks=all``), so Faust's
periodic commit never commits an offset whose output is not durable.  A failed send crashes
the app without acking: the records are redelivered after restart.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import faust
from faust.types import TP

from stream_dedup.config import EngineConfig, ServiceConfig
from stream_dedup.metrics import Metrics

from . import catchup, kafka_config, stage1
from .producer import AsyncProducer, producer_config
from .serialization import SignatureDecodeError, SignatureRecord, dlq_headers, encode_json, output_event

log = logging.getLogger("stream_dedup.service")

#: seconds between retention evictions and between lag/index gauge updates
EVICT_INTERVAL = 60.0
GAUGE_INTERVAL = 5.0
#: seconds the producer waits to batch records
PRODUCER_LINGER = 0.002
#: longest a consumer fetch may wait on the broker for data (see _patch_fetch_max_wait)
FETCH_MAX_WAIT_MS = 20
#: stage-1 batches being fingerprinted or sent at the same time
STAGE1_PIPELINE = 3
#: DLQ reasons produced by the worker itself (besides stream_dedup.record.REJECT_REASONS)
PROCESSING_ERROR = stage1.PROCESSING_ERROR
#: consecutive records whose decision raised before the worker gives up (disk full, corrupt
#: index, ...): a single poisonous record goes to the DLQ, a broken engine stops the worker
MAX_CONSECUTIVE_DECIDE_ERRORS = 10


def _patch_fetch_max_wait() -> None:
    """Faust hard-codes ``fetch_max_wait_ms=1500`` for its aiokafka consumer.

    aiokafka does not re-fetch a partition while records of it are still buffered, so when
    the signatures partition is drained while a fetch for the (idle) input partitions is
    parked on the broker, the decision stage stalls for up to that long.  Measured: stalls of
    0.5-1.5 s with no output at all.  We cap it at :data:`FETCH_MAX_WAIT_MS`.
    """
    from faust.transport.drivers import aiokafka as driver

    cls = driver.AIOKafkaConsumerThread
    if getattr(cls, "_stream_dedup_patched", False):
        return
    original = cls._create_worker_consumer

    def _create_worker_consumer(self: Any, transport: Any) -> Any:
        consumer = original(self, transport)
        consumer._fetch_max_wait_ms = min(consumer._fetch_max_wait_ms, FETCH_MAX_WAIT_MS)
        return consumer

    cls._create_worker_consumer = _create_worker_consumer
    cls._stream_dedup_patched = True


def _lean_monitor_class() -> type:
    """Faust's Monitor without its per-message bookkeeping (we export our own metrics).

    The default Monitor keeps per-event statistics (timestamps, deques, counters per topic)
    on every message in and out; on this workload that is a measurable share of the event
    loop.  Rebalance/commit/assignment hooks are kept.
    """
    from faust.sensors.monitor import Monitor

    class _LeanMonitor(Monitor):
        def on_message_in(self, tp: Any, offset: int, message: Any) -> None:
            return None

        def on_stream_event_in(self, tp: Any, offset: int, stream: Any, event: Any) -> None:
            return None

        def on_stream_event_out(self, tp: Any, offset: int, stream: Any, event: Any, state: Any = None) -> None:
            return None

        def on_message_out(self, tp: Any, offset: int, message: Any) -> None:
            return None

        def on_send_initiated(self, producer: Any, topic: str, message: Any, keysize: int,
                              valsize: int) -> Any:
            return None

        def on_send_completed(self, producer: Any, state: Any, metadata: Any) -> None:
            return None

    return _LeanMonitor


def make_faust_app(service: ServiceConfig) -> faust.App:
    """The Faust app with the worker's settings (no agents yet)."""
    _patch_fetch_max_wait()
    return faust.App(
        service.app_id,
        broker=kafka_config.faust_broker(service),
        broker_credentials=kafka_config.faust_credentials(service),
        autodiscover=False,
        web_enabled=False,  # our own HTTP server serves /metrics /healthz /readyz
        datadir=str(Path(service.data_dir) / "faust"),
        store="memory://",  # no Faust tables: the engine has its own RocksDB
        key_serializer="raw",
        value_serializer="raw",
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        producer_linger=0.002,
        broker_commit_interval=float(service.commit_interval),
        broker_session_timeout=float(service.session_timeout),
        broker_heartbeat_interval=max(0.5, min(3.0, float(service.session_timeout) / 5)),
        broker_rebalance_timeout=max(float(service.session_timeout), 10.0),
        stream_wait_empty=True,
        topic_disable_leader=True,
        topic_allow_declare=False,  # topics are created by ensure_topics() with our partition counts
        Monitor=_lean_monitor_class(),
    )


class _Acker:
    """Acks a batch's input events once every record produced for it is acknowledged by Kafka.

    Batches are pipelined: the stage goes on with the next batch while the previous ones are
    in flight (at most ``limit``).  Acks may complete out of order; Faust commits only up to
    the first offset that is not acked.  A failed send crashes the worker and acks nothing.
    """

    def __init__(self, worker: DedupWorker, stream: faust.StreamT, name: str, limit: int = 8) -> None:
        self.worker, self.stream, self.name = worker, stream, name
        self.slots = asyncio.Semaphore(limit)
        self.tasks: set[asyncio.Future] = set()

    async def submit(self, events: Sequence[faust.EventT], futures: list[Any], after: Any = None) -> None:
        await self.slots.acquire()
        task = asyncio.ensure_future(self._finish(events, futures, after))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _finish(self, events: Sequence[faust.EventT], futures: list[Any], after: Any) -> None:
        try:
            if futures:
                await asyncio.gather(*futures)
        except asyncio.CancelledError:
            self.slots.release()
            raise
        except BaseException as exc:  # noqa: BLE001 - not acked: redelivered after the restart
            self.slots.release()
            await self.worker._crash(self.name, exc)
            return
        try:
            if after is not None:
                after()
        except Exception:  # noqa: BLE001 - metrics must never lose an ack
            log.exception("metrics update failed")
        for ev in events:
            await self.stream.ack(ev)
        self.slots.release()


class DedupWorker:
    """One worker process: the Faust app, the engine, the metrics."""

    def __init__(self, service: ServiceConfig, engine: EngineConfig, *, metrics: Metrics | None = None,
                 dedup: Any = None) -> None:
        from stream_dedup.engine import Deduplicator

        self.service = service
        self.engine_config = engine
        self.metrics = metrics or Metrics()
        self.client_conf = kafka_config.confluent_config(service)
        self.state_dir = Path(service.data_dir) / "index"
        self.dedup = dedup if dedup is not None else Deduplicator(engine, self.state_dir)
        self.producer = AsyncProducer(producer_config(self.client_conf, PRODUCER_LINGER))
        # stage-1 CPU work in child processes, started (and warmed up) now
        self.pool = stage1.ComputePool(engine, service.fingerprint_processes)
        self.engine_lock = asyncio.Lock()

        self.last_checkpoint: int | None = self.dedup.checkpoint(catchup.CHECKPOINT_NAME)
        self.caught_up = asyncio.Event()
        self.caught_up.set()  # nothing to catch up until signatures-0 is assigned
        self._catchup_task: asyncio.Task | None = None
        self._catchup_stop = False
        self.owns_signatures = False
        self.first_assignment = False  # set by the first rebalance, even one that assigns nothing
        self.started_at = time.time()
        self.fatal: BaseException | None = None
        self.decide_errors = 0
        self._lag_labels: set[tuple[str, str]] = set()

        self.app = make_faust_app(service)
        app = self.app
        self.input_topic = app.topic(service.input_topic)
        self.signatures_topic = app.topic(service.signatures_topic, partitions=1)
        self.sig_tp = TP(service.signatures_topic, 0)

        app.agent(self.input_topic, name="stream_dedup.stage1_signatures")(self._stage1)
        app.agent(self.signatures_topic, name="stream_dedup.stage2_decisions")(self._stage2)
        app.timer(EVICT_INTERVAL, name="stream_dedup.evict")(self._evict)
        app.timer(GAUGE_INTERVAL, name="stream_dedup.gauges")(self._update_gauges)
        app.on_partitions_assigned.connect(self._on_assigned)
        app.on_partitions_revoked.connect(self._on_revoked)
        self._update_index_gauges()

    # ------------------------------------------------------------------ stage 1
    async def _compute(self, items: list[stage1.Item]) -> list[stage1.Result]:
        return await self.pool.compute(items)

    async def _stage1(self, stream: faust.StreamT) -> None:
        """Batches are pipelined: while the pool fingerprints batch k+1, batch k is being sent.

        Each batch is sent only after the previous one was handed to the producer, so the
        signatures keep the order of the input within a partition.
        """
        svc = self.service
        acker = _Acker(self, stream, "stage 1 (signatures)")
        computing = asyncio.Semaphore(STAGE1_PIPELINE)
        previous: asyncio.Future | None = None
        async for events in stream.noack_take(svc.batch_size, within=svc.batch_wait):
            if self.fatal is not None:
                return
            items = []
            for ev in events:
                msg = ev.message
                ts = msg.timestamp
                items.append((bytes(ev.value or b""), msg.topic, msg.partition, msg.offset,
                              int(ts * 1000) if ts else int(time.time() * 1000)))
            await computing.acquire()
            result = asyncio.ensure_future(self._compute(items))
            previous = asyncio.ensure_future(self._stage1_send(events, result, previous, acker, computing))

    async def _stage1_send(self, events: Sequence[faust.EventT], result: asyncio.Future,
                           previous: asyncio.Future | None, acker: _Acker, computing: asyncio.Semaphore) -> None:
        try:
            results = await result
            if previous is not None:
                await previous
            if self.fatal is not None:
                return
            futures, rejected = [], []
            sig_topic = self.service.signatures_topic
            for ev, (kind, a, b) in zip(events, results, strict=True):
                if kind == "sig":
                    futures.append(await self.producer.send(sig_topic, b, a.encode("utf-8"), partition=0))
                else:
                    futures.append(await self._dead_letter(ev, a, b))
                    rejected.append(a)
            await acker.submit(events, futures, after=lambda: self._count_rejects(rejected))
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - a lost send must not be acked
            await self._crash("stage 1 (signatures)", exc)
        finally:
            computing.release()

    def _count_rejects(self, reasons: list[str]) -> None:
        for reason in reasons:
            self.metrics.dead_letters.labels(reason=reason).inc()

    async def _dead_letter(self, ev: faust.EventT, reason: str, detail: str,
                           source: SignatureRecord | None = None) -> Any:
        """Send the event's record, unchanged, to the DLQ; ``source`` (stage 2) names the input record."""
        msg = ev.message
        if source is not None:
            topic, partition, offset, ts_ms = (source.source_topic, source.source_partition, source.source_offset,
                                               source.timestamp_ms)
        else:
            topic, partition, offset = msg.topic, msg.partition, msg.offset
            ts_ms = int(msg.timestamp * 1000) if msg.timestamp else None
        log.warning("dead letter %s[%d]@%d: %s (%s)", topic, partition, offset, reason, detail[:200])
        headers = dlq_headers(msg.headers, reason=reason, detail=detail, topic=topic,
                              partition=partition, offset=offset, timestamp_ms=ts_ms)
        return await self.producer.send(self.service.dlq_topic, ev.value if ev.value is not None else b"",
                                        msg.key, headers=headers)

    # ------------------------------------------------------------------ stage 2
    async def _stage2(self, stream: faust.StreamT) -> None:
        svc = self.service
        acker = _Acker(self, stream, "stage 2 (decisions)")
        async for events in stream.noack_take(svc.batch_size, within=svc.batch_wait):
            try:
                async with self.engine_lock:
                    await self._ensure_caught_up(events[0].message.offset)
                    pending = await self._stage2_batch(events)
                await acker.submit(events, [p[0] for p in pending],
                                   after=lambda pending=pending: self._observe(pending))
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # noqa: BLE001
                await self._crash("stage 2 (decisions)", exc)
                return

    async def _stage2_batch(self, events: Sequence[faust.EventT]) -> list[tuple[Any, Any, Any]]:
        from stream_dedup.fingerprint import Fingerprint

        pending = []
        for ev in events:
            offset = ev.message.offset
            try:
                sig = SignatureRecord.decode(ev.value)
                fp = Fingerprint.from_bytes(sig.fingerprint)
            except (SignatureDecodeError, ValueError) as exc:
                pending.append((await self._dead_letter(ev, PROCESSING_ERROR, f"bad signature record: {exc}"),
                                None, PROCESSING_ERROR))
                continue
            t0 = time.perf_counter()
            try:
                decision = self.dedup.decide(sig.article_id, fp, now=sig.timestamp_ms / 1000.0,
                                             checkpoint=(catchup.CHECKPOINT_NAME, offset))
            except Exception as exc:  # noqa: BLE001
                self.decide_errors += 1
                if self.decide_errors >= MAX_CONSECUTIVE_DECIDE_ERRORS:
                    raise
                log.exception("decision for %r failed", sig.article_id)
                pending.append((await self._dead_letter(
                    ev, PROCESSING_ERROR, f"decision failed: {type(exc).__name__}: {exc}", source=sig),
                    None, PROCESSING_ERROR))
                continue
            self.decide_errors = 0
            engine_s = time.perf_counter() - t0 + sig.engine_us / 1e6
            if self.last_checkpoint is None or offset > self.last_checkpoint:
                self.last_checkpoint = offset
            value = encode_json(output_event(decision.to_event(), sig, time.time()))
            topic = self.service.duplicates_topic if decision.type == "duplicate-of" else self.service.new_topic
            fut = await self.producer.send(topic, value, sig.article_id.encode("utf-8"))
            pending.append((fut, sig, decision))
            self.metrics.processing_seconds.observe(engine_s)
        return pending

    def _observe(self, pending: list[tuple[Any, Any, Any]]) -> None:
        m = self.metrics
        m.index_articles.set(len(self.dedup))  # cheap; the disk size is updated by the timer
        now = time.time()
        for _fut, sig, decision in pending:
            if sig is None:
                m.dead_letters.labels(reason=decision).inc()
                continue
            m.end_to_end_seconds.observe(max(0.0, now - sig.timestamp_ms / 1000.0))
            if decision.seen_before:
                continue  # redelivery: counted when first decided
            m.candidates.observe(decision.candidates)
            if decision.type == "duplicate-of":
                m.articles.labels(result="duplicate").inc()
                m.duplicates_by_method.labels(method=str(decision.method)).inc()
                if decision.similarity is not None:
                    m.similarity.observe(decision.similarity)
            else:
                m.articles.labels(result="new").inc()

    # ------------------------------------------------------------------ catch-up
    async def _ensure_caught_up(self, offset: int) -> None:
        """Called with the engine lock held, before deciding the record at ``offset``."""
        if self._catchup_task is not None:
            task = self._catchup_task
            self.engine_lock.release()
            try:
                await task  # the assignment-time catch-up (needs the lock itself)
            finally:
                await self.engine_lock.acquire()
            self._catchup_task = None
        expected = 0 if self.last_checkpoint is None else self.last_checkpoint + 1
        if offset > expected:
            # records [expected, offset) were decided by another worker: replay them first
            await self._replay(expected, offset)

    async def _replay(self, start: int, end: int) -> int:
        self.caught_up.clear()
        self._catchup_stop = False
        self.metrics.ready.set(0)
        name = catchup.CHECKPOINT_NAME
        from stream_dedup.fingerprint import Fingerprint

        def apply(offset: int, sig: SignatureRecord) -> None:
            self.dedup.decide(sig.article_id, Fingerprint.from_bytes(sig.fingerprint),
                              now=sig.timestamp_ms / 1000.0, checkpoint=(name, offset))
            self.last_checkpoint = offset if self.last_checkpoint is None else max(self.last_checkpoint, offset)

        loop = asyncio.get_running_loop()
        try:
            n = await loop.run_in_executor(None, lambda: catchup.replay(
                self.client_conf, self.service.signatures_topic, 0, start, end, apply,
                should_stop=lambda: self._catchup_stop))
        finally:
            self.caught_up.set()
            self._update_index_gauges()
        return n

    async def _catch_up_on_assign(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            committed = await loop.run_in_executor(None, lambda: catchup.committed_offset(
                self.client_conf, self.service.app_id, self.service.signatures_topic, 0))
            async with self.engine_lock:
                expected = 0 if self.last_checkpoint is None else self.last_checkpoint + 1
                log.info("signatures-0 assigned: local checkpoint %s, group committed offset %s",
                         self.last_checkpoint, committed)
                if committed is not None and committed > expected:
                    await self._replay(expected, committed)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await self._crash("catch-up", exc)
            raise

    async def _on_assigned(self, app: Any = None, assigned: Any = None, **kwargs: Any) -> None:
        assigned = set(assigned or ())
        owns = self.sig_tp in assigned
        self.first_assignment = True
        log.info("assigned %d partitions%s", len(assigned), " (incl. signatures-0: decision stage)" if owns else
                 ("" if assigned else ": standby (more workers than partitions)"))
        if owns and not self.owns_signatures:
            self.caught_up.clear()
            self._catchup_task = asyncio.ensure_future(self._catch_up_on_assign())
            self._catchup_task.add_done_callback(lambda t: self.caught_up.set())
        self.owns_signatures = owns

    async def _on_revoked(self, app: Any = None, revoked: Any = None, **kwargs: Any) -> None:
        if self.sig_tp in set(revoked or ()):
            self._catchup_stop = True

    # ------------------------------------------------------------------ timers, gauges
    async def _evict(self) -> None:
        if self.engine_config.retention is None:
            return
        async with self.engine_lock:
            n = self.dedup.evict_expired(time.time())
        if n:
            self.metrics.evictions.inc(n)
            log.info("evicted %d articles older than the retention window", n)
        self._update_index_gauges()

    def _update_index_gauges(self) -> None:
        try:
            self.metrics.index_articles.set(len(self.dedup))
            self.metrics.index_size_bytes.set(self.dedup.disk_bytes())
        except Exception:  # noqa: BLE001 - gauges must never break the worker
            log.debug("index gauges failed", exc_info=True)

    async def _update_gauges(self) -> None:
        self._update_index_gauges()
        self.metrics.ready.set(1 if self.readiness()[0] else 0)
        try:
            await self._update_lag()
        except Exception:  # noqa: BLE001
            log.debug("lag update failed", exc_info=True)

    async def _update_lag(self) -> None:
        consumer = self.app.consumer
        wanted = {self.service.input_topic, self.service.signatures_topic}
        tps = [tp for tp in consumer.assignment() if tp.topic in wanted]
        labels: set[tuple[str, str]] = set()
        if tps:
            highs = await consumer.highwaters(*tps)
            committed_map = getattr(consumer, "_committed_offset", {})
            for tp in tps:
                high = highs.get(tp)
                if high is None:
                    continue
                done = committed_map.get(tp)
                if done is None:
                    done = await consumer.position(tp)
                if done is None:
                    continue
                key = (tp.topic, str(tp.partition))
                labels.add(key)
                self.metrics.consumer_lag.labels(*key).set(max(0, high - done))
        for key in self._lag_labels - labels:
            try:
                self.metrics.consumer_lag.remove(*key)
            except KeyError:
                pass
        self._lag_labels = labels

    # ------------------------------------------------------------------ health
    async def _crash(self, where: str, exc: BaseException) -> None:
        log.error("fatal error in %s: %r; stopping without acknowledging the batch", where, exc,
                  exc_info=exc)
        self.fatal = exc
        self.metrics.ready.set(0)
        await self.app.crash(exc)

    def close(self) -> None:
        self.producer.close()
        self.pool.close()
        self.dedup.close()

    def liveness(self) -> tuple[bool, dict[str, Any]]:
        if self.fatal is not None:
            return False, {"error": repr(self.fatal)}
        return True, {"uptime_seconds": round(time.time() - self.started_at, 1)}

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        app = self.app
        reasons = []
        if self.fatal is not None:
            reasons.append("crashed")
        if not getattr(app, "_started", None) or not app._started.is_set():  # noqa: SLF001
            reasons.append("app not started")
        elif app.should_stop:
            reasons.append("stopping")
        if getattr(app, "rebalancing", False):
            reasons.append("rebalancing")
        try:
            assigned = app.consumer.assignment() if reasons == [] or "rebalancing" in reasons else set()
        except Exception:  # noqa: BLE001 - consumer not created yet
            assigned = set()
        # A member whose rebalance assigned nothing (more replicas than partitions) is a ready
        # standby: keeping it unready would block StatefulSet rolling updates forever.
        if not self.first_assignment and "app not started" not in reasons:
            reasons.append("waiting for the first partition assignment")
        if not self.caught_up.is_set():
            reasons.append("index catching up")
        ok = not reasons
        self.metrics.ready.set(1 if ok else 0)
        return ok, {
            "reasons": reasons,
            "assigned_partitions": sorted(f"{tp.topic}-{tp.partition}" for tp in assigned),
            "decision_stage": self.owns_signatures,
            "standby": ok and not assigned,
            "index_checkpoint": self.last_checkpoint,
        }
