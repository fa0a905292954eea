"""``--stage1-client faust``: the Faust app (stage 1), the decision-stage process (stage 2), readiness and metrics.

See :mod:`stream_dedup.service` for the design; the default stage 1 is :mod:`.fingerprint_stage`.  :class:`DedupWorker` builds one
``faust.App`` with one agent, ``stage1``, on the input topic (all partitions, every worker):
raw bytes -> ``parse_record`` -> ``Fingerprinter.fingerprint`` -> a signature record on the
single-partition signatures topic; a bad record becomes a *reject record* on the same topic,
so that its dead letter is written by the decision stage inside a transaction.  The agent reads
batches with ``stream.noack_take`` and acks a batch's events only after every record produced
for it has been acknowledged by Kafka (``acks=all``), so Faust's periodic commit never commits
an offset whose signature is not durable.  A failed send crashes the app without acking: the
records are redelivered after restart, and the decision stage answers each input record once
(:mod:`.decisions`).

The decision stage runs in a child process (:mod:`.stage_process`), watched by a timer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import faust

from stream_dedup.config import EngineConfig, ServiceConfig
from stream_dedup.metrics import Metrics

from . import kafka_config, stage1
from .faust_app import make_faust_app
from .ordering import OrderBuffer
from .producer import AsyncProducer, producer_config
from .serialization import reject_record
from .stage_process import MergedCollector, StageProcess, readiness_body

log = logging.getLogger("stream_dedup.service")

#: seconds between lag gauge updates, between looks at the decision stage, between order-buffer checks
GAUGE_INTERVAL = 5.0
WATCH_INTERVAL = 0.5
ORDER_INTERVAL = 0.05
#: seconds the producer waits to batch records
PRODUCER_LINGER = 0.002
#: stage-1 batches being fingerprinted or sent at the same time
STAGE1_PIPELINE = 3


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
        """Ack ``events`` once every one of ``futures`` (e.g. one per produced batch) is done."""
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


def _timestamp_ms(ev: faust.EventT) -> int:
    ts = ev.message.timestamp
    return int(ts * 1000) if ts else int(time.time() * 1000)


class DedupWorker:
    """One worker process: the Faust app (stage 1), the decision-stage process, the metrics."""

    def __init__(self, service: ServiceConfig, engine: EngineConfig, *, metrics: Metrics | None = None,
                 dlq_budget: int = 1_000_000, log_format: str = "%(message)s") -> None:
        from prometheus_client import CollectorRegistry

        self.service = service
        self.engine_config = engine
        self.metrics = metrics or Metrics()
        self.client_conf = kafka_config.service_client_config(service)
        self.dlq_budget = dlq_budget
        Path(service.data_dir).mkdir(parents=True, exist_ok=True)
        self.producer = AsyncProducer(producer_config(self.client_conf, PRODUCER_LINGER))
        # stage-1 CPU work in child processes, started (and warmed up) now
        self.pool = stage1.ComputePool(engine, service.fingerprint_processes)
        self.decisions = StageProcess(service, engine, dlq_budget, log_format)
        self.decisions.on_restart = self.metrics.decision_stage_restarts.inc
        self.decisions.start()
        # /metrics serves this worker's families merged with the decision stage's
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(MergedCollector(self.metrics.registry, lambda: [self.decisions]))

        self.first_assignment = False  # set by the first rebalance, even one that assigns nothing
        self.started_at = time.time()
        self.fatal: BaseException | None = None
        self._lag_labels: set[tuple[str, str]] = set()

        self.app = make_faust_app(service)
        app = self.app
        self.input_topic = app.topic(service.input_topic)
        app.agent(self.input_topic, name="stream_dedup.stage1_signatures")(self._stage1)
        app.timer(GAUGE_INTERVAL, name="stream_dedup.gauges")(self._update_gauges)
        app.timer(WATCH_INTERVAL, name="stream_dedup.watch_decisions")(self._watch_decisions)
        # stage 1's event-time merge of the partitions it owns
        self.order = OrderBuffer(float(service.order_wait))
        self.metrics.order_held.set_function(lambda: self.order.size)
        self._owned: list[Any] = []
        self._highwaters: dict[Any, int] = {}
        self._positions: dict[Any, int] = {}
        self._pump_lock = asyncio.Lock()
        self._acker: _Acker | None = None
        self._computing: asyncio.Semaphore | None = None
        self._previous: asyncio.Future | None = None
        self._order_task: asyncio.Future | None = None
        app.on_partitions_assigned.connect(self._on_assigned)

    # ------------------------------------------------------------------ stage 1
    async def _compute(self, items: list[stage1.Item]) -> list[stage1.Result]:
        return await self.pool.compute(items)

    async def _stage1(self, stream: faust.StreamT) -> None:
        """Batches are pipelined: while the pool fingerprints batch k+1, batch k is being sent.

        Records pass through the order buffer (:mod:`.ordering`), which merges the partitions
        this worker owns by timestamp; each batch is sent only after the previous one was handed
        to the producer, so the signatures keep that order.
        """
        svc = self.service
        self._acker = _Acker(self, stream, "stage 1 (signatures)")
        self._computing = asyncio.Semaphore(STAGE1_PIPELINE)
        if self._order_task is None:
            self._order_task = asyncio.ensure_future(self._order_loop())
        async for events in stream.noack_take(svc.batch_size, within=svc.batch_wait):
            if self.fatal is not None:
                return
            self.order.add((ev.message.tp, ev.message.offset, _timestamp_ms(ev), ev) for ev in events)
            await self._pump()

    async def _pump(self, *, flush: bool = False) -> None:
        """Send what the order buffer releases (called per batch and by :meth:`_order_loop`).

        ``flush`` releases every held record, merged but without waiting for any partition.
        """
        if self._acker is None:
            return
        async with self._pump_lock:
            released = self.order.release([] if flush else self._owned, self._caught_up)
            for i in range(0, len(released), int(self.service.batch_size)):
                events = released[i:i + int(self.service.batch_size)]
                items = [(bytes(ev.value or b""), ev.message.topic, ev.message.partition, ev.message.offset,
                          _timestamp_ms(ev)) for ev in events]
                await self._computing.acquire()
                result = asyncio.ensure_future(self._compute(items))
                self._previous = asyncio.ensure_future(
                    self._stage1_send(events, result, self._previous, self._acker, self._computing))

    def _caught_up(self, tp: Any, last_offset: int) -> bool:
        high = self._highwaters.get(tp)
        if high is None:
            return False
        return last_offset + 1 >= high or self._positions.get(tp, -1) >= high

    async def _order_loop(self) -> None:
        """Release the order buffer's records whose wait is over, until the worker closes.

        Our own task, not a Faust timer: Faust stops its timers as soon as the app starts
        stopping, and then waits for every record its agents received to be acked (which
        ``stream_wait_empty`` makes it do on shutdown and on every revocation).  Records held
        here would never be acked and the shutdown would hang; so while the app stops, or the
        consumer's flow is stopped for a revocation (no fetch can bring the records the merge
        waits for), the buffer is flushed.
        """
        while True:
            await asyncio.sleep(ORDER_INTERVAL)
            try:
                app = self.app
                if app.should_stop or not getattr(app.consumer, "flow_active", True):
                    await self._pump(flush=True)
                else:
                    await self._refresh_positions()
                    await self._pump()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - must keep releasing; a send failure crashes via _crash
                log.exception("order buffer release failed")

    async def _refresh_positions(self) -> None:
        """The owned partitions, their positions and high watermarks (for "caught up")."""
        if self.service.order_wait <= 0:
            return
        consumer = self.app.consumer
        try:
            owned = {tp for tp in consumer.assignment() if tp.topic == self.service.input_topic}
            # the high watermarks asked of the broker (one request), not only those the last fetch
            # brought: after a stall a partition whose records were not fetched yet must not look
            # caught up
            asked = await consumer.highwaters(*owned) if owned else {}
            for tp in owned:
                highs = [h for h in (consumer.highwater(tp), asked.get(tp)) if h is not None]
                if highs:
                    self._highwaters[tp] = max(highs)
                self._positions[tp] = await consumer.position(tp)
        except Exception:  # noqa: BLE001 - not assigned yet, rebalancing, broker unreachable
            return
        if owned != set(self._owned):
            self._own(owned)

    def _own(self, owned: set[Any]) -> None:
        """The input partitions the merge waits for; a revoked one's held records are dropped
        (they are redelivered to its new owner)."""
        self._owned = sorted(owned)
        self.order.forget(owned)

    async def _stage1_send(self, events: Sequence[faust.EventT], result: asyncio.Future,
                           previous: asyncio.Future | None, acker: _Acker, computing: asyncio.Semaphore) -> None:
        try:
            results = await result
            if previous is not None:
                await previous
            if self.fatal is not None:
                return
            records = [(b, a.encode("utf-8"), 0) if kind == "sig" else (self._reject(ev, a, b), ev.message.key, 0)
                       for ev, (kind, a, b) in zip(events, results, strict=True)]
            delivered = await self.producer.send_batch(self.service.signatures_topic, records)
            await acker.submit(events, [delivered])
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - a lost send must not be acked
            await self._crash("stage 1 (signatures)", exc)
        finally:
            computing.release()

    def _reject(self, ev: faust.EventT, reason: str, detail: str) -> bytes:
        """The reject record of a bad input record (its dead letter is written by the decision stage)."""
        msg = ev.message
        log.warning("rejected %s[%d]@%d: %s (%s)", msg.topic, msg.partition, msg.offset, reason, detail[:200])
        ts_ms = int(msg.timestamp * 1000) if msg.timestamp else None
        value = ev.value if ev.value is not None else b""
        return reject_record(reason=reason, detail=detail, key=msg.key, value=bytes(value), headers=msg.headers,
                             topic=msg.topic, partition=msg.partition, offset=msg.offset, timestamp_ms=ts_ms,
                             budget=self.dlq_budget).encode()

    # ------------------------------------------------------------------ the decision stage
    async def _watch_decisions(self) -> None:
        reason = self.decisions.poll()
        if reason is not None and self.fatal is None:
            await self._crash("decision stage", RuntimeError(reason))

    async def _on_assigned(self, app: Any = None, assigned: Any = None, **kwargs: Any) -> None:
        assigned = set(assigned or ())
        self.first_assignment = True
        # the merge must know every owned partition before the first fetch returns: a partition
        # it does not know cannot hold the others back, so after a restart the first partition
        # fetched would go out whole before the others' older records (the timer's next look at
        # the assignment comes up to ORDER_INTERVAL later, after a broker round trip)
        self._own({tp for tp in assigned if tp.topic == self.service.input_topic})
        log.info("assigned %d input partitions%s", len(assigned),
                 "" if assigned else ": standby (more workers than partitions)")

    # ------------------------------------------------------------------ gauges
    async def _update_gauges(self) -> None:
        self.metrics.ready.set(1 if self.readiness()[0] else 0)
        try:
            await self._update_lag()
        except Exception:  # noqa: BLE001
            log.debug("lag update failed", exc_info=True)

    async def _update_lag(self) -> None:
        consumer = self.app.consumer
        tps = [tp for tp in consumer.assignment() if tp.topic == self.service.input_topic]
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
        if self._order_task is not None:
            self._order_task.cancel()
        self.producer.close()
        self.pool.close()
        self.decisions.stop()

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
        if self.producer.broker_error is not None:
            reasons.append(f"cannot reach the broker: {self.producer.broker_error}")
        stage = self.decisions.drain()  # fresh, whatever Faust's timers are doing
        reasons += [r for r in stage.get("reasons", []) if r not in reasons]
        ok = not reasons
        self.metrics.ready.set(1 if ok else 0)
        return ok, readiness_body(reasons, sorted(f"{tp.topic}-{tp.partition}" for tp in assigned), stage)
