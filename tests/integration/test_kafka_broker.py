"""The test broker really works: produce to and consume from a multi-partition topic."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, KafkaError, Producer

pytestmark = pytest.mark.kafka

N_MESSAGES = 100
PARTITIONS = 3


def test_produce_and_consume_100_messages(kafka_bootstrap, kafka_topics, unique_topic_prefix):
    (topic,) = kafka_topics([f"{unique_topic_prefix}-roundtrip"], partitions=PARTITIONS)
    expected = {f"key-{i:03d}": f"value-{i:03d}" for i in range(N_MESSAGES)}

    delivery_errors: list[str] = []
    delivered: list[tuple[int, int]] = []

    def on_delivery(err, msg):
        if err is not None:
            delivery_errors.append(str(err))
        else:
            delivered.append((msg.partition(), msg.offset()))

    producer = Producer({"bootstrap.servers": kafka_bootstrap, "acks": "all", "linger.ms": 5})
    for key, value in expected.items():
        producer.produce(topic, key=key.encode(), value=value.encode(), on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(30) == 0, "messages still in the producer queue after 30 s"
    assert delivery_errors == []
    assert len(delivered) == N_MESSAGES

    consumer = Consumer({
        "bootstrap.servers": kafka_bootstrap,
        "group.id": f"{unique_topic_prefix}-group",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    received: dict[str, str] = {}
    offsets_by_partition: dict[int, list[int]] = defaultdict(list)
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(received) < N_MESSAGES and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                continue
            received[msg.key().decode()] = msg.value().decode()
            offsets_by_partition[msg.partition()].append(msg.offset())
    finally:
        consumer.close()

    assert received == expected
    # Keys were spread over the partitions, and each partition was read in order without gaps.
    assert len(offsets_by_partition) > 1
    assert set(offsets_by_partition) <= set(range(PARTITIONS))
    for offsets in offsets_by_partition.values():
        assert offsets == list(range(len(offsets)))
