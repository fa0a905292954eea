"""Delivery receipts: how the decision stage knows an input record it has already answered.

A receipt is a token naming one input record (its topic's tag, partition and offset), stored in
the index in the same atomic write as the record's decision, with the signature offset it was
decided at.  The decision stage reads it to tell a record never decided, one decided by a
transaction that did not commit, and a second copy from stage 1 (the exactly-once argument in
:mod:`.decisions` says why that is enough).  :class:`ReceiptSweep` drops the receipts that can no
longer be needed.
"""

from __future__ import annotations

import functools
import hashlib
import struct
from typing import Any

from confluent_kafka import TopicPartition

from stream_dedup.config import ServiceConfig

_RECEIPT_POSITION = struct.Struct(">IQ")  # input partition, input offset


def receipt_token(topic: str, partition: int, offset: int) -> bytes:
    """The receipt of one input record: a tag of its topic, its partition and offset (20 bytes).

    Big-endian, so one partition's receipts are one ordered range, swept by :class:`ReceiptSweep`.
    """
    return _topic_tag(topic) + _RECEIPT_POSITION.pack(partition, offset)


@functools.lru_cache(maxsize=64)
def _topic_tag(topic: str) -> bytes:
    return hashlib.blake2b(topic.encode(), digest_size=8).digest()


class ReceiptSweep:
    """Drops the receipts of input records that stage 1 can no longer send twice.

    A receipt exists to recognise a second copy of an input record's signature.  Stage 1
    commits an input offset only once every signature below it is acknowledged, so:

    1. read stage 1's committed input offsets ``C[p]`` (its consumer group), *then* the
       signatures topic's end offset ``H``: every copy of every input record below ``C[p]`` is
       in the signatures topic below ``H``;
    2. once the decision stage has committed past ``H``, every such copy has been answered or
       skipped, so the receipts of input offsets below ``C[p]`` are never needed again.

    Step 1 runs on the broker probe's thread (admin requests), step 2 in the decision loop.
    """

    def __init__(self, service: ServiceConfig) -> None:
        self.service = service
        self.target: tuple[dict[int, int], int] | None = None  # (C, H) waiting for the commit to pass H
        self.done: dict[int, int] = {}  # the offsets below which receipts were dropped, per partition

    def read_target(self, admin: Any, timeout: float) -> None:
        """Step 1 (a blocking admin round trip)."""
        from confluent_kafka import ConsumerGroupTopicPartitions
        from confluent_kafka.admin import OffsetSpec

        svc = self.service
        meta = admin.list_topics(svc.input_topic, timeout=timeout).topics.get(svc.input_topic)
        if meta is None or meta.error is not None or not meta.partitions:
            return
        request = ConsumerGroupTopicPartitions(svc.app_id, [TopicPartition(svc.input_topic, p)
                                                            for p in sorted(meta.partitions)])
        group = admin.list_consumer_group_offsets([request], request_timeout=timeout)[svc.app_id].result(timeout)
        committed = {tp.partition: tp.offset for tp in group.topic_partitions
                     if tp.error is None and tp.offset >= 0 and tp.offset > self.done.get(tp.partition, 0)}
        if not committed:
            return
        sig = TopicPartition(svc.signatures_topic, 0)
        end = admin.list_offsets({sig: OffsetSpec.latest()}, request_timeout=timeout)[sig].result(timeout)
        self.target = (committed, end.offset)

    def apply(self, dedup: Any, committed_offset: int | None) -> int:
        """Step 2, when the commit has passed ``H``; returns the partitions swept."""
        if self.target is None or committed_offset is None or committed_offset < self.target[1]:
            return 0
        below, _end = self.target
        topic = self.service.input_topic
        for partition, offset in below.items():
            dedup.forget_receipts(receipt_token(topic, partition, 0), receipt_token(topic, partition, offset))
            self.done[partition] = offset
        self.target = None
        return len(below)
