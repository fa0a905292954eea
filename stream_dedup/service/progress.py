"""The decision stage's committed position, kept as a record inside each of its transactions.

Every transaction of the decision stage ends with one small record on the compacted,
single-partition topic ``<signatures topic>.progress``: key ``<signatures topic>-0``, value the
signature offset after the transaction's last record (JSON, ``{"next_offset": N}``).  It opens
with one too (``{"begin": S}``, never read as a position), which registers the partition with
the transaction early.  The record
commits or aborts with the transaction's events and dead letters, so the last *committed*
progress record, read with ``isolation.level=read_committed``, is exactly the position the
committed output reflects: the same fact Kafka's ``send_offsets_to_transaction`` stores in the
consumer group.

Why not the group: ``send_offsets_to_transaction`` costs each transaction two round trips in
series before its commit (``AddOffsetsToTxn`` to the transaction coordinator, then
``TxnOffsetCommit`` to the group coordinator), and the broker one more partition to write and
mark.  At the decision stage's ~100 commits per second on a shared 2-core machine that was about
a third of every commit (``bench/kafka_e2e.py``: the README's streaming section has the
figures).  The progress record rides in the produce requests the transaction sends anyway.  It
is the design Flink's and Spark's Kafka sinks use (the position kept with the output, not in the
group), applied inside a Kafka transaction.

Reading it back (:func:`committed_position`) happens once per takeover, after the new owner's
``init_transactions`` has fenced the previous owner and aborted the transaction it left open, so
nothing on the topic is pending: the committed records end at the high watermark.  The reader
takes the tail of the partition, widening the window backwards until it finds a committed
record for its key (aborted records and transaction markers take offsets too).  An empty topic
(a new deployment, or one upgraded from a version that committed to the group) gives ``None``;
the decision stage then falls back to the group's committed offset, which it still commits
outside the transactions every few seconds so that consumer-lag tools keep working.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, TopicPartition

log = logging.getLogger("stream_dedup.service.decisions")  # the decision stage logs under one name

#: first window read back from the end of the partition; multiplied by 8 while no record is found
FIRST_WINDOW = 64
#: topic settings: one record per transaction, only the newest per key matters
TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.ms": str(3_600_000), "min.cleanable.dirty.ratio": "0.1"}


def progress_topic(signatures_topic: str) -> str:
    return f"{signatures_topic}.progress"


def progress_key(signatures_topic: str, partition: int = 0) -> bytes:
    return f"{signatures_topic}-{partition}".encode()


def encode(next_offset: int) -> bytes:
    """The record that ends a transaction: the signature offset after its last record."""
    return b'{"next_offset":%d}' % next_offset


def encode_begin(start: int) -> bytes:
    """The record that opens a transaction (at its first signature offset); never a position.

    Producing it first registers the partition with the transaction while its records are
    decided, so the closing record adds no ``AddPartitionsToTxn`` round trip before the commit.
    """
    return b'{"begin":%d}' % start


def decode(value: bytes | None) -> int | None:
    """The offset in a progress record's value; ``None`` for a value that is not one."""
    try:
        doc = json.loads(value or b"")
    except ValueError:
        return None
    offset = doc.get("next_offset") if isinstance(doc, dict) else None
    return offset if isinstance(offset, int) and not isinstance(offset, bool) and offset >= 0 else None


class Position:
    """The decision stage's position on ``signatures``[0]: its records, and reading it back."""

    def __init__(self, client_conf: dict[str, Any], consumer: Consumer, signatures_topic: str) -> None:
        self.client_conf = client_conf
        self.consumer = consumer  # the stage's group member: the group's offset is read and shared with it
        self.signatures_topic = signatures_topic
        self.topic = progress_topic(signatures_topic)
        self.key = progress_key(signatures_topic)
        self.source = ""  # where the last read found the position
        self._shared: int | None = None

    def begin_record(self, start: int) -> tuple[str, bytes, bytes]:
        """``(topic, value, key)`` of the record that opens a transaction."""
        return self.topic, encode_begin(start), self.key

    def end_record(self, next_offset: int) -> tuple[str, bytes, bytes]:
        """``(topic, value, key)`` of the record that ends a transaction."""
        return self.topic, encode(next_offset), self.key

    def read(self) -> int | None:
        """The committed position: the last committed progress record, else the group's offset.

        Raises :class:`~confluent_kafka.KafkaException` when the broker does not answer.
        """
        try:
            position = committed_position(self.client_conf, self.topic, self.key)
        except TimeoutError as exc:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, str(exc))) from exc
        if position is not None:
            self.source = "progress topic"
            return position
        [tp] = self.consumer.committed([TopicPartition(self.signatures_topic, 0)], timeout=30)
        if tp.error:
            raise KafkaException(tp.error)
        self.source = "group offset (no progress record yet)"
        return None if tp.offset == OFFSET_INVALID or tp.offset < 0 else tp.offset

    def share_with_group(self, committed: int) -> None:
        """Commit a committed position to the group too, for consumer-lag tools (asynchronous, best effort)."""
        if committed == self._shared:
            return
        try:
            self.consumer.commit(offsets=[TopicPartition(self.signatures_topic, 0, committed)], asynchronous=True)
            self._shared = committed
        except KafkaException as exc:
            log.debug("group offset commit: %s", exc)


def committed_position(client_conf: dict[str, Any], topic: str, key: bytes, *, timeout: float = 30.0) -> int | None:
    """The value of the last committed progress record with ``key`` on ``topic``[0], or ``None``.

    Raises :class:`~confluent_kafka.KafkaException` when the broker cannot be read (the caller
    retries) and ``TimeoutError`` when the partition's end is not reached within ``timeout``.
    """
    consumer = Consumer({
        **client_conf,
        "group.id": "stream-dedup-progress",  # required by librdkafka; never joined, never committed
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        "fetch.wait.max.ms": 50,
    })
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout)
        if high <= low:
            return None
        window = FIRST_WINDOW
        while True:
            start = max(low, high - window)
            found = _last_in(consumer, topic, start, key, timeout)
            if found is not None or start == low:
                return found
            window *= 8
    finally:
        consumer.close()


def _last_in(consumer: Consumer, topic: str, start: int, key: bytes, timeout: float) -> int | None:
    """The last progress value for ``key`` from ``start`` to the end of the partition."""
    consumer.assign([TopicPartition(topic, 0, start)])
    deadline = time.monotonic() + timeout
    found = None
    while True:
        if time.monotonic() > deadline:
            raise TimeoutError(f"reading {topic}[0] from offset {start}: the end not reached in {timeout:.0f} s")
        for m in consumer.consume(500, timeout=0.5):
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    return found
                if err.fatal() or not err.retriable():
                    raise KafkaException(err)
                continue
            if m.key() == key:
                value = decode(m.value())
                if value is not None:
                    found = value
