"""Create the worker's topics at startup and read their limits (confluent-kafka AdminClient)."""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from stream_dedup.config import EngineConfig, ServiceConfig

from .progress import progress_topic

log = logging.getLogger(__name__)

DAY_MS = 86_400_000
PROGRESS_RETENTION_MS = 3_600_000  # stage 1's progress records are read from the end: an hour is plenty
#: bytes left for headers and framing below the dead-letter topic's max.message.bytes
DLQ_MARGIN = 4096


class TopicError(RuntimeError):
    pass


def signatures_retention_ms(engine: EngineConfig) -> int:
    """Signatures are kept as long as the index may need them for a catch-up replay.

    Without a retention window the index keeps every article, so the topic must keep every
    signature (-1 = forever); with one, the window plus one day of slack.
    """
    if engine.retention is None:
        return -1
    return int(engine.retention * 1000) + DAY_MS


def _partitions(metadata: Any, name: str) -> int | None:
    topic = metadata.topics.get(name)
    if topic is None or topic.error is not None:
        return None
    return len(topic.partitions)


def ensure_topics(client_conf: dict[str, Any], service: ServiceConfig, engine: EngineConfig,
                  timeout: float = 60.0) -> dict[str, int]:
    """Create the missing output, DLQ and signatures topics (and, with ``--order-wait-workers``, the
    progress topic); return ``{topic: partitions}``.

    Output/DLQ topics get as many partitions as the input topic (1 if it does not exist yet);
    the signatures topic gets exactly one partition, and an existing one with more is refused
    (the decision stage must see every signature in one order).  Replication factor: the
    broker's default.
    """
    admin = AdminClient(client_conf)
    metadata = admin.list_topics(timeout=timeout)
    sig_parts = _partitions(metadata, service.signatures_topic)
    if sig_parts is not None and sig_parts != 1:
        raise TopicError(f"signatures topic {service.signatures_topic!r} has {sig_parts} partitions; it must have "
                         "exactly 1 (delete it or choose another --signatures-topic)")
    in_parts = _partitions(metadata, service.input_topic)
    if in_parts is None:
        # so that a worker started before the first producer subscribes at once
        # (-1: the broker's num.partitions; create it yourself for more partitions)
        _create(admin, {service.input_topic: (-1, {})}, timeout)
        in_parts = _partitions(admin.list_topics(timeout=timeout), service.input_topic) or 1
    wanted = {
        service.new_topic: (in_parts, {}),
        service.duplicates_topic: (in_parts, {}),
        service.dlq_topic: (in_parts, {}),
        service.signatures_topic: (1, {"retention.ms": str(signatures_retention_ms(engine)),
                                       "cleanup.policy": "delete"}),
    }
    if service.order_wait_workers > 0:  # stage 1's progress records (:mod:`.progress`), read from their end
        wanted[progress_topic(service.signatures_topic)] = (1, {"retention.ms": str(PROGRESS_RETENTION_MS),
                                                               "cleanup.policy": "delete"})
    _create(admin, {name: spec for name, spec in wanted.items() if _partitions(metadata, name) is None},
            timeout)
    metadata = admin.list_topics(timeout=timeout)
    return {name: _partitions(metadata, name) or 0 for name in [service.input_topic, *wanted]}


def _create(admin: AdminClient, specs: dict[str, tuple[int, dict[str, str]]], timeout: float) -> None:
    if not specs:
        return
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=parts, replication_factor=-1, config=conf)
         for name, (parts, conf) in specs.items()],
        operation_timeout=timeout, request_timeout=timeout)
    for name, fut in futures.items():
        try:
            fut.result(timeout=timeout)
            log.info("created topic %s", name)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise TopicError(f"cannot create topic {name!r}: {exc}") from exc
    wait_for_leaders(admin, list(specs), timeout)


def wait_for_leaders(admin: AdminClient, names: list[str], timeout: float, min_partitions: int = 1) -> None:
    """Wait until each topic has at least ``min_partitions`` partitions, every one with a leader."""
    deadline = time.monotonic() + timeout
    pending = set(names)
    while pending:
        metadata = admin.list_topics(timeout=10)
        for name in list(pending):
            t = metadata.topics.get(name)
            if t is not None and t.error is None and len(t.partitions) >= max(1, min_partitions) and all(
                    p.leader >= 0 and p.error is None for p in t.partitions.values()):
                pending.discard(name)
        if pending:
            if time.monotonic() > deadline:
                raise TopicError(f"topics without a leader after {timeout}s: {sorted(pending)}")
            time.sleep(0.2)


def dlq_budget(client_conf: dict[str, Any], topics: list[str], default: int = 1_048_588) -> int:
    """Bytes a dead letter may take: the smallest ``max.message.bytes`` of ``topics``, less a margin."""
    admin = AdminClient(client_conf)
    sizes = []
    futures = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics],
                                     request_timeout=30)
    for fut in futures.values():
        try:
            entry = fut.result(timeout=30).get("max.message.bytes")
            if entry is not None and entry.value:
                sizes.append(int(entry.value))
        except Exception:  # noqa: BLE001 - a topic we cannot describe: the broker default applies
            log.debug("describe_configs failed", exc_info=True)
    return max(16 * 1024, min(sizes or [default]) - DLQ_MARGIN)
