"""An asyncio front for confluent-kafka's (librdkafka) producer.

The worker produces three records per article-equivalent of work (signature, event, and
sometimes a dead letter).  aiokafka's pure-Python producer costs a large share of the event
loop per record; librdkafka does the batching, compression, retries and the network I/O in
its own C threads.  :meth:`AsyncProducer.send` returns an ``asyncio.Future`` resolved with
``(partition, offset)`` when the broker has acknowledged the record (``acks=all``,
idempotent producer: no duplicates or reordering from internal retries), or failed with the
``KafkaException``.  Delivery reports are collected by one polling thread and handed to the
event loop in batches (one wake-up per batch, not per record).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

log = logging.getLogger(__name__)


def producer_config(client_conf: dict[str, Any], linger_s: float) -> dict[str, Any]:
    conf = dict(client_conf)
    conf.update({
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": max(0.0, linger_s * 1000.0),
        "partitioner": "murmur2_random",  # the Java client's default: same key -> same partition as Faust/Java
        "message.max.bytes": 64 * 1024 * 1024,  # the broker's own limit applies; dead letters may be large
        "queue.buffering.max.kbytes": 262144,
        "socket.nagle.disable": True,
    })
    return conf


class AsyncProducer:
    def __init__(self, conf: dict[str, Any], loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop
        self._producer = Producer({**conf, "error_cb": self._on_error})
        self._lock = threading.Lock()
        self._reports: list[tuple[asyncio.Future, Any, Any]] = []
        self._running = True
        self._thread = threading.Thread(target=self._poll_loop, name="stream-dedup-producer", daemon=True)
        self._thread.start()
        self.fatal: KafkaException | None = None
        self.broker_error: str | None = None  # the last connection error, until a record is delivered

    # -- called from the event loop
    async def send(self, topic: str, value: bytes | None, key: bytes | None = None, partition: int | None = None,
                   headers: Sequence[tuple[str, bytes]] | None = None) -> asyncio.Future:
        """Queue one record; returns the future of its acknowledgement (await it separately)."""
        if self.fatal is not None:
            raise self.fatal
        loop = self._loop or asyncio.get_running_loop()
        self._loop = loop
        fut = loop.create_future()

        def on_delivery(err: KafkaError | None, msg: Any, fut: asyncio.Future = fut) -> None:
            self._report(fut, err, msg)

        kwargs: dict[str, Any] = {"key": key, "on_delivery": on_delivery}
        if partition is not None:
            kwargs["partition"] = partition
        if headers:
            kwargs["headers"] = list(headers)
        while True:
            try:
                self._producer.produce(topic, value, **kwargs)
                return fut
            except BufferError:  # local queue full: let librdkafka drain it
                await asyncio.sleep(0.005)

    def flush(self, timeout: float = 30.0) -> int:
        """Block until every queued record is delivered (or ``timeout``); returns how many are left."""
        return self._producer.flush(timeout)

    def close(self, timeout: float = 30.0) -> None:
        left = self.flush(timeout)
        if left:
            log.warning("%d produced records were not acknowledged before shutdown", left)
        self._running = False
        self._thread.join(timeout=5)

    # -- librdkafka threads
    def _poll_loop(self) -> None:
        while self._running:
            try:
                self._producer.poll(0.05)
            except Exception:  # noqa: BLE001 - never let the polling thread die
                log.exception("producer poll failed")

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self.fatal = KafkaException(err)
            log.error("fatal producer error: %s", err)
            return
        message = str(err)
        if message != self.broker_error:  # one line per change of state, not one per retry
            log.warning("producer: %s (retrying)", message)
        self.broker_error = message

    def _report(self, fut: asyncio.Future, err: Any, msg: Any) -> None:
        if err is None and self.broker_error is not None:
            log.info("producer: the broker is reachable again")
            self.broker_error = None
        with self._lock:
            first = not self._reports
            self._reports.append((fut, err, msg))
        if first:
            try:
                self._loop.call_soon_threadsafe(self._deliver)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass

    def _deliver(self) -> None:
        with self._lock:
            reports, self._reports = self._reports, []
        for fut, err, msg in reports:
            if fut.done():
                continue
            if err is not None:
                fut.set_exception(KafkaException(err))
            else:
                fut.set_result((msg.partition(), msg.offset()))
