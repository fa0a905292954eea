"""An asyncio front for confluent-kafka's (librdkafka) producer.

The worker produces three records per article-equivalent of work (signature, event, and
sometimes a dead letter).  aiokafka's pure-Python producer costs a large share of the event
loop per record; librdkafka does the batching, compression, retries and the network I/O in
its own C threads.  :meth:`AsyncProducer.send_batch` queues a batch of records and returns one
``asyncio.Future`` for the whole batch, resolved when the broker has acknowledged every record
(``acks=all``, idempotent producer: no duplicates or reordering from internal retries), or
failed with the first record's ``KafkaException``.  No future, closure or event-loop wake-up per
record: librdkafka's polling thread counts the batch's delivery reports and hands the batch to
the event loop once, when it is complete (or fails).
"""

from __future__ import annotations

import asyncio
import functools
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
    })
    return conf


#: a record of :meth:`AsyncProducer.send_batch`: (value, key, partition or None)
Record = tuple[bytes | None, bytes | None, int | None]


class _Batch:
    """A batch's future and the count of its delivery reports still to come."""

    __slots__ = ("future", "size", "left", "error")

    def __init__(self, future: asyncio.Future, size: int) -> None:
        self.future, self.size, self.left, self.error = future, size, size, None


class AsyncProducer:
    def __init__(self, conf: dict[str, Any], loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop
        self._producer = Producer({**conf, "error_cb": self._on_error})
        self._lock = threading.Lock()
        self._done: list[_Batch] = []
        self._running = True
        self._thread = threading.Thread(target=self._poll_loop, name="stream-dedup-producer", daemon=True)
        self._thread.start()
        self.fatal: KafkaException | None = None
        self.broker_error: str | None = None  # the last connection error, until a record is delivered

    # -- called from the event loop
    async def send_batch(self, topic: str, records: Sequence[Record]) -> asyncio.Future:
        """Queue ``records`` in order; returns one future, done when all are acknowledged.

        The future's result is the number of records; its exception the first failed record's
        ``KafkaException``.  An empty batch gives a future already done.
        """
        if self.fatal is not None:
            raise self.fatal
        loop = self._loop or asyncio.get_running_loop()
        self._loop = loop
        fut = loop.create_future()
        if not records:
            fut.set_result(0)
            return fut
        batch = _Batch(fut, len(records))
        produce, on_delivery = self._producer.produce, functools.partial(self._delivered, batch)
        for value, key, partition in records:
            while True:
                try:
                    if partition is None:
                        produce(topic, value, key, on_delivery=on_delivery)
                    else:
                        produce(topic, value, key, partition, on_delivery=on_delivery)
                    break
                except BufferError:  # local queue full: let librdkafka drain it
                    await asyncio.sleep(0.005)
        return fut

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

    def _delivered(self, batch: _Batch, err: KafkaError | None, msg: Any) -> None:
        """One delivery report (polling thread): a batch complete, or at its first failure, goes to the loop."""
        if err is None and self.broker_error is not None:
            log.info("producer: the broker is reachable again")
            self.broker_error = None
        with self._lock:
            batch.left -= 1
            if batch.error is not None or (err is None and batch.left):
                return  # already handed over (failed), or more reports to come
            batch.error = err
            first = not self._done
            self._done.append(batch)
        if first:
            try:
                self._loop.call_soon_threadsafe(self._deliver)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass

    def _deliver(self) -> None:
        with self._lock:
            batches, self._done = self._done, []
        for batch in batches:
            if batch.future.done():
                continue
            if batch.error is not None:
                batch.future.set_exception(KafkaException(batch.error))
            else:
                batch.future.set_result(batch.size)
