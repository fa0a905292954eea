"""Wire formats of the worker's topics.

Signature record (internal topic ``signatures_topic``, stage 1 -> stage 2)
    key   = article id (UTF-8)
    value = binary, big-endian::

        magic   1 byte   0xD5
        version 1 byte   1
        ts_ms   int64    Kafka timestamp (ms) of the input record (event time; used as ``now``)
        part    int32    input partition
        offset  int64    input offset
        fp_us   uint32   stage-1 engine time (parse + fingerprint), microseconds
        topic   uint16 length + UTF-8   input topic
        id      uint16 length + UTF-8   article id
        fp      rest     ``Fingerprint.to_bytes()``

Output event (``new_topic`` / ``duplicates_topic``)
    key   = article id (UTF-8)
    value = JSON object: ``Decision.to_event()`` plus ``source_partition``, ``source_offset``
            (of the input record) and ``processed_at`` (ISO-8601 UTC, ms).

Dead letter (``dlq_topic``)
    key   = the input record's key, unchanged
    value = the input record's value, byte for byte unchanged
    headers = the input record's headers, followed by
        ``dlq.reason``            one of ``stream_dedup.record.REJECT_REASONS``, or
                                  ``processing_error`` (a valid record whose fingerprint or
                                  decision raised; for a decision the value is the signature
                                  record and the source headers name the input record)
        ``dlq.detail``            human-readable message (at most 1000 characters)
        ``dlq.source.topic``      input topic
        ``dlq.source.partition``  input partition (decimal)
        ``dlq.source.offset``     input offset (decimal)
        ``dlq.source.timestamp``  input Kafka timestamp in ms (decimal; empty if none)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import orjson

MAGIC = 0xD5
VERSION = 1
_HEAD = struct.Struct(">BBqiqI")
_LEN = struct.Struct(">H")

DLQ_REASON = "dlq.reason"
DLQ_DETAIL = "dlq.detail"
DLQ_TOPIC = "dlq.source.topic"
DLQ_PARTITION = "dlq.source.partition"
DLQ_OFFSET = "dlq.source.offset"
DLQ_TIMESTAMP = "dlq.source.timestamp"
DLQ_HEADERS = (DLQ_REASON, DLQ_DETAIL, DLQ_TOPIC, DLQ_PARTITION, DLQ_OFFSET, DLQ_TIMESTAMP)
MAX_DETAIL = 1000


class SignatureDecodeError(ValueError):
    """A signature record that this version cannot read."""


@dataclass(frozen=True)
class SignatureRecord:
    article_id: str
    fingerprint: bytes  # Fingerprint.to_bytes()
    source_topic: str
    source_partition: int
    source_offset: int
    timestamp_ms: int  # Kafka timestamp of the input record
    engine_us: int = 0  # stage-1 engine time in microseconds

    def encode(self) -> bytes:
        topic = self.source_topic.encode("utf-8")
        aid = self.article_id.encode("utf-8")
        if len(topic) > 0xFFFF or len(aid) > 0xFFFF:
            raise ValueError("topic name or article id longer than 65535 bytes")
        return b"".join((
            _HEAD.pack(MAGIC, VERSION, int(self.timestamp_ms), int(self.source_partition),
                       int(self.source_offset), min(max(int(self.engine_us), 0), 0xFFFFFFFF)),
            _LEN.pack(len(topic)), topic,
            _LEN.pack(len(aid)), aid,
            self.fingerprint,
        ))

    @classmethod
    def decode(cls, data: bytes) -> SignatureRecord:
        try:
            magic, version, ts, part, offset, engine_us = _HEAD.unpack_from(data, 0)
            if magic != MAGIC or version != VERSION:
                raise SignatureDecodeError(f"unknown signature record magic/version {magic:#x}/{version}")
            pos = _HEAD.size
            (n,) = _LEN.unpack_from(data, pos)
            pos += _LEN.size
            topic = bytes(data[pos:pos + n]).decode("utf-8")
            pos += n
            (n,) = _LEN.unpack_from(data, pos)
            pos += _LEN.size
            if pos + n > len(data):
                raise SignatureDecodeError("truncated signature record")
            aid = bytes(data[pos:pos + n]).decode("utf-8")
            pos += n
        except (struct.error, UnicodeDecodeError, TypeError) as exc:
            raise SignatureDecodeError(f"corrupt signature record: {exc}") from exc
        return cls(article_id=aid, fingerprint=bytes(data[pos:]), source_topic=topic,
                   source_partition=part, source_offset=offset, timestamp_ms=ts, engine_us=engine_us)


_iso_second: tuple[int, str] = (-1, "")


def iso_now(now: float) -> str:
    """Epoch seconds -> ``2024-05-01T12:00:00.123Z`` (the date and time part is formatted once a second)."""
    global _iso_second
    ms = int(now * 1000)
    second, milli = divmod(ms, 1000)
    if _iso_second[0] != second:
        _iso_second = (second, datetime.fromtimestamp(second, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S"))
    return f"{_iso_second[1]}.{milli:03d}Z"


def output_event(event: dict[str, Any], sig: SignatureRecord, processed_at: float) -> dict[str, Any]:
    """``Decision.to_event()`` plus the source position and the processing time."""
    out = dict(event)
    out["source_partition"] = sig.source_partition
    out["source_offset"] = sig.source_offset
    out["processed_at"] = iso_now(processed_at)
    return out


def encode_json(obj: dict[str, Any]) -> bytes:
    """Compact UTF-8 JSON (orjson: non-ASCII characters as themselves, keys in insertion order)."""
    return orjson.dumps(obj)


def _as_bytes(value: Any) -> bytes:
    if value is None:
        return b""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return str(value).encode("utf-8")


def dlq_headers(original: Any, *, reason: str, detail: str, topic: str, partition: int, offset: int,
                timestamp_ms: int | None) -> list[tuple[str, bytes]]:
    """The DLQ record's headers: the original headers (if any) then the ``dlq.*`` ones."""
    headers: list[tuple[str, bytes]] = []
    if original:
        items = original.items() if isinstance(original, dict) else original
        for k, v in items:
            if k not in DLQ_HEADERS:
                headers.append((str(k), _as_bytes(v)))
    detail = detail if len(detail) <= MAX_DETAIL else detail[:MAX_DETAIL - 3] + "..."
    headers += [
        (DLQ_REASON, reason.encode()),
        (DLQ_DETAIL, detail.encode("utf-8", "replace")),
        (DLQ_TOPIC, topic.encode("utf-8")),
        (DLQ_PARTITION, str(partition).encode()),
        (DLQ_OFFSET, str(offset).encode()),
        (DLQ_TIMESTAMP, b"" if timestamp_ms is None else str(int(timestamp_ms)).encode()),
    ]
    return headers


def parse_dlq_headers(headers: Any) -> dict[str, str]:
    """``dlq.*`` headers of a consumed dead letter as a ``{name: str}`` dict (for tools and tests)."""
    items = headers.items() if isinstance(headers, dict) else (headers or [])
    return {k: _as_bytes(v).decode("utf-8", "replace") for k, v in items if k in DLQ_HEADERS}
