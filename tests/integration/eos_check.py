"""The exactly-once oracle of the chaos tests (also used by ``bench/chaos.py``).

``check(bootstrap, topics, produced, engine_config)`` reads the committed outputs (new,
duplicates and DLQ, ``read_committed``) and the signatures topic, and returns a report:

* every produced input record (partition, offset) has exactly one output event or dead letter
  (``lost`` / ``doubled`` count the others);
* each event's decision equals the decision of an uninterrupted run of the engine over the same
  decision order: the signatures topic in offset order, a second copy of an input record (stage 1
  is at-least-once) skipped (``contradictory`` counts the differences).
"""

from __future__ import annotations

import json
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Report:
    produced: int = 0
    events: int = 0
    lost: int = 0
    doubled: int = 0
    contradictory: int = 0
    examples: list[str] = field(default_factory=list)

    def row(self) -> dict[str, int]:
        return {"produced": self.produced, "events": self.events, "lost": self.lost, "doubled": self.doubled,
                "contradictory": self.contradictory}


def read_topic(bootstrap: str, topics: list[str], expect: int | None = None, timeout: float = 120.0,
               idle: float = 3.0) -> list[Any]:
    """Every committed record of ``topics`` (read_committed), until ``expect`` records and ``idle`` s of quiet."""
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"eos-check-{time.time_ns()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
    c.subscribe(topics)
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    last = time.monotonic()
    try:
        while time.monotonic() < deadline:
            for m in c.consume(1000, timeout=0.5):
                if m.error() is None:
                    out.append(m)
                    last = time.monotonic()
            if (expect is None or len(out) >= expect) and time.monotonic() - last >= idle:
                break
    finally:
        c.close()
    return out


def topic_ends(bootstrap: str, topics: list[str]) -> dict[str, int]:
    """Each topic's records as the broker counts them (high watermarks, transactions open or
    aborted included): what a failed check prints, to tell a worker that stopped producing from
    records produced but never committed."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"eos-ends-{time.time_ns()}"})
    out: dict[str, int] = {}
    try:
        for topic in topics:
            meta = c.list_topics(topic, timeout=10).topics.get(topic)
            total = 0
            for part in sorted(meta.partitions if meta is not None else {}):
                try:
                    total += c.get_watermark_offsets(TopicPartition(topic, part), timeout=5)[1]
                except KafkaException:
                    total = -1
                    break
            out[topic] = total
    finally:
        c.close()
    return out


def source_of(msg: Any, dlq_topic: str) -> tuple[int, int]:
    if msg.topic() == dlq_topic:
        h = {k: v.decode() for k, v in (msg.headers() or [])}
        return int(h["dlq.source.partition"]), int(h["dlq.source.offset"])
    e = json.loads(msg.value())
    return e["source_partition"], e["source_offset"]


def oracle(bootstrap: str, signatures_topic: str, engine_config: Any) -> dict[tuple[int, int], tuple]:
    """(partition, offset) -> (type, duplicate_of) of an uninterrupted engine run in signature order."""
    from stream_dedup.engine import Deduplicator
    from stream_dedup.fingerprint import Fingerprint
    from stream_dedup.service.serialization import SignatureRecord, decode_stage_record

    seen: dict[tuple[int, int], tuple] = {}
    with tempfile.TemporaryDirectory() as d, Deduplicator(engine_config, d) as dedup:
        for m in sorted(read_topic(bootstrap, [signatures_topic], idle=2.0), key=lambda m: m.offset()):
            rec = decode_stage_record(m.value())
            src = (rec.source_partition, rec.source_offset)
            if src in seen:
                continue
            if isinstance(rec, SignatureRecord):
                dec = dedup.decide(rec.article_id, Fingerprint.from_bytes(rec.fingerprint),
                                   now=rec.timestamp_ms / 1000.0)
                seen[src] = (dec.type, dec.duplicate_of)
            else:
                seen[src] = ("dlq", rec.reason)
    return seen


def check(bootstrap: str, new: str, duplicates: str, dlq: str, signatures: str,
          produced: list[tuple[int, int]], engine_config: Any, timeout: float = 180.0) -> Report:
    msgs = read_topic(bootstrap, [new, duplicates, dlq], expect=len(produced), timeout=timeout)
    counts: Counter = Counter()
    got: dict[tuple[int, int], tuple] = {}
    for m in msgs:
        src = source_of(m, dlq)
        counts[src] += 1
        if m.topic() == dlq:
            h = {k: v.decode() for k, v in (m.headers() or [])}
            got[src] = ("dlq", h["dlq.reason"])
        else:
            e = json.loads(m.value())
            got[src] = (e["type"], e["duplicate_of"])
    report = Report(produced=len(produced), events=len(msgs))
    for src in produced:
        n = counts.get(src, 0)
        if n == 0:
            report.lost += 1
            report.examples.append(f"lost {src}")
        elif n > 1:
            report.doubled += 1
            report.examples.append(f"{n} events for {src}")
    expected = oracle(bootstrap, signatures, engine_config)
    for src, decision in got.items():
        if expected.get(src) != decision:
            report.contradictory += 1
            report.examples.append(f"{src}: got {decision}, uninterrupted run {expected.get(src)}")
    return report
