"""The worker's asyncio producer against the real broker: one future per batch, resolved only
when every record of the batch is acknowledged, failed when any record is refused."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import Consumer, KafkaException

from stream_dedup.service.producer import AsyncProducer, producer_config

pytestmark = pytest.mark.kafka


def _read(bootstrap: str, topic: str, n: int, group: str) -> list[tuple[int, bytes, bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    out: list[tuple[int, bytes, bytes]] = []
    try:
        for _ in range(120):
            for m in consumer.consume(100, timeout=0.5):
                if m.error() is None:
                    out.append((m.partition(), m.key(), m.value()))
            if len(out) >= n:
                break
    finally:
        consumer.close()
    return out


def test_batches_resolve_after_every_record_is_acknowledged(kafka_bootstrap, kafka_topics, unique_topic_prefix):
    (topic,) = kafka_topics([f"{unique_topic_prefix}-batches"], partitions=2)
    producer = AsyncProducer(producer_config({"bootstrap.servers": kafka_bootstrap}, 0.002))

    async def run() -> list[int]:
        futures = []
        for b in range(20):
            records = [(f"v{b}-{i}".encode(), f"k{b}-{i}".encode(), i % 2) for i in range(50)]
            futures.append(await producer.send_batch(topic, records))
        futures.append(await producer.send_batch(topic, []))
        return list(await asyncio.gather(*futures))

    try:
        assert asyncio.run(run()) == [50] * 20 + [0]
        assert producer.flush(5) == 0  # nothing was still queued when the futures resolved
    finally:
        producer.close()
    got = _read(kafka_bootstrap, topic, 1000, f"{unique_topic_prefix}-reader")
    assert len(got) == 1000
    assert {(p, k, v) for p, k, v in got} == {
        (i % 2, f"k{b}-{i}".encode(), f"v{b}-{i}".encode()) for b in range(20) for i in range(50)}
    # each partition keeps the order of the batches' records
    for part in (0, 1):
        keys = [k for p, k, _ in got if p == part]
        assert keys == [f"k{b}-{i}".encode() for b in range(20) for i in range(part, 50, 2)]


def test_a_refused_record_fails_its_batch_and_only_its_batch(kafka_bootstrap, kafka_topics, unique_topic_prefix):
    # the broker refuses records over its message.max.bytes (1 MiB by default); our producer allows 64 MiB
    (topic,) = kafka_topics([f"{unique_topic_prefix}-refused"], partitions=1)
    producer = AsyncProducer(producer_config({"bootstrap.servers": kafka_bootstrap}, 0.002))

    async def run() -> tuple[BaseException | int, BaseException | int]:
        bad = await producer.send_batch(topic, [(b"small", b"a", 0), (b"x" * 3_000_000, b"big", 0), (b"small", b"c", 0)])
        good = await producer.send_batch(topic, [(b"fine", b"d", 0)])
        return tuple(await asyncio.gather(bad, good, return_exceptions=True))

    try:
        bad, good = asyncio.run(run())
    finally:
        producer.close()
    assert isinstance(bad, KafkaException), bad
    assert "MSG_SIZE_TOO_LARGE" in str(bad) or "too large" in str(bad).lower(), bad
    assert good == 1
