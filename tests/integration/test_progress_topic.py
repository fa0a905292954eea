"""The decision stage's position record, written in transactions and read back (real broker)."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer

from stream_dedup.service import progress

pytestmark = pytest.mark.kafka

KEY = b"sig-0"


def _producer(bootstrap: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"test-progress-{uuid.uuid4().hex[:8]}",
                  "linger.ms": 1})
    p.init_transactions(30)
    return p


def _transaction(p: Producer, topic: str, records: list[tuple[bytes, bytes]], commit: bool) -> None:
    p.begin_transaction()
    for key, value in records:
        p.produce(topic, value, key)
    p.flush(30)
    if commit:
        p.commit_transaction(30)
    else:
        p.abort_transaction(30)


def test_position_is_the_last_committed_record_of_its_key(kafka_bootstrap, kafka_topics, unique_topic_prefix):
    (topic,) = kafka_topics([f"{unique_topic_prefix}.progress"], config=progress.TOPIC_CONFIG)
    conf = {"bootstrap.servers": kafka_bootstrap}
    assert progress.committed_position(conf, topic, KEY) is None  # empty topic

    p = _producer(kafka_bootstrap)
    _transaction(p, topic, [(KEY, progress.encode_begin(0)), (KEY, progress.encode(10))], commit=True)
    assert progress.committed_position(conf, topic, KEY) == 10
    _transaction(p, topic, [(KEY, progress.encode_begin(10)), (b"other-0", progress.encode(99)),
                            (KEY, progress.encode(25))], commit=True)
    assert progress.committed_position(conf, topic, KEY) == 25
    assert progress.committed_position(conf, topic, b"other-0") == 99
    # an aborted transaction's record is never the position, nor is a begin record
    _transaction(p, topic, [(KEY, progress.encode_begin(25)), (KEY, progress.encode(40))], commit=False)
    assert progress.committed_position(conf, topic, KEY) == 25
    _transaction(p, topic, [(KEY, progress.encode_begin(25))], commit=True)
    assert progress.committed_position(conf, topic, KEY) == 25
    assert progress.committed_position(conf, topic, b"absent-0") is None


def test_position_behind_many_aborted_records(kafka_bootstrap, kafka_topics, unique_topic_prefix):
    """The window widens backwards past aborted transactions and their markers."""
    (topic,) = kafka_topics([f"{unique_topic_prefix}.progress"], config=progress.TOPIC_CONFIG)
    conf = {"bootstrap.servers": kafka_bootstrap}
    p = _producer(kafka_bootstrap)
    _transaction(p, topic, [(KEY, progress.encode(7))], commit=True)
    for _ in range(3):  # 3 x 200 aborted records: more than the first window and the next
        _transaction(p, topic, [(KEY, progress.encode(1000 + i)) for i in range(200)], commit=False)
    assert progress.committed_position(conf, topic, KEY) == 7


def test_position_falls_back_to_the_group_offset_of_older_versions(kafka_bootstrap, kafka_topics, unique_topic_prefix):
    """A deployment upgraded from a version that committed to the group starts where that left off."""
    from confluent_kafka import Consumer, TopicPartition

    signatures = f"{unique_topic_prefix}.signatures"
    kafka_topics([signatures])
    kafka_topics([progress.progress_topic(signatures)], config=progress.TOPIC_CONFIG)
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"{unique_topic_prefix}.decisions",
                         "enable.auto.commit": False})
    try:
        position = progress.Position({"bootstrap.servers": kafka_bootstrap}, consumer, signatures)
        assert position.read() is None
        consumer.commit(offsets=[TopicPartition(signatures, 0, 42)], asynchronous=False)
        assert position.read() == 42 and position.source.startswith("group offset")
        p = _producer(kafka_bootstrap)
        p.begin_transaction()
        p.produce(*position.begin_record(42))
        p.produce(*position.end_record(50))
        p.commit_transaction(30)
        assert position.read() == 50 and position.source == "progress topic"
        position.share_with_group(50)  # for lag tools: the group follows, asynchronously
        deadline = time.monotonic() + 10
        while consumer.committed([TopicPartition(signatures, 0)], timeout=10)[0].offset != 50:
            consumer.poll(0.1)
            assert time.monotonic() < deadline, "the group's offset did not follow"
    finally:
        consumer.close()
