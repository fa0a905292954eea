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

    Version 2 adds a ``kind`` byte after the version (0 = article, as above; 1 = reject).  A
    *reject record* carries a bad input record to the decision stage, which writes its dead
    letter inside the same transaction as the events (so dead letters are exactly-once too)::

        magic, 2, kind=1, ts_ms, part, offset, fp_us(=0), topic    as above
        reason  uint16 length + UTF-8
        detail  uint16 length + UTF-8
        key     uint32 length (0xFFFFFFFF = no key) + bytes
        headers uint16 count, each: uint16 length + UTF-8 name, uint32 length + value
        value   rest   the original value, or its first ``DLQ_SAMPLE_BYTES`` when it is too large
                       for the dead-letter topic (the headers then say ``dlq.truncated: true``,
                       with the original size and SHA-256)

    Stage 2 reads both versions.

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
    and, only when the original did not fit the dead-letter topic (``max.message.bytes``):
        ``dlq.truncated``         ``true``: the value is the first ``DLQ_SAMPLE_BYTES`` bytes
        ``dlq.original.size``     the original value's size in bytes (decimal)
        ``dlq.original.sha256``   hex SHA-256 of the original value
        ``dlq.original.key.size`` / ``dlq.original.key.sha256``  the same for an oversize key
"""

from __future__ import annotations

import functools
import hashlib
import struct
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import orjson

MAGIC = 0xD5
VERSION = 1            # article records written by version 1 (still read)
VERSION_KINDS = 2      # records with a kind byte (article or reject)
KIND_ARTICLE = 0
KIND_REJECT = 1
_HEAD = struct.Struct(">BBqiqI")
_HEAD2 = struct.Struct(">BBBqiqI")
_LEN = struct.Struct(">H")
_LEN32 = struct.Struct(">I")
_NO_KEY = 0xFFFFFFFF
#: bytes of an oversize original kept in its dead letter
DLQ_SAMPLE_BYTES = 1024

DLQ_REASON = "dlq.reason"
DLQ_DETAIL = "dlq.detail"
DLQ_TOPIC = "dlq.source.topic"
DLQ_PARTITION = "dlq.source.partition"
DLQ_OFFSET = "dlq.source.offset"
DLQ_TIMESTAMP = "dlq.source.timestamp"
DLQ_TRUNCATED = "dlq.truncated"
DLQ_ORIGINAL_SIZE = "dlq.original.size"
DLQ_ORIGINAL_SHA256 = "dlq.original.sha256"
DLQ_ORIGINAL_KEY_SIZE = "dlq.original.key.size"
DLQ_ORIGINAL_KEY_SHA256 = "dlq.original.key.sha256"
DLQ_HEADERS = (DLQ_REASON, DLQ_DETAIL, DLQ_TOPIC, DLQ_PARTITION, DLQ_OFFSET, DLQ_TIMESTAMP)
#: added after DLQ_HEADERS when the original was too large for the dead-letter topic
DLQ_REFERENCE_HEADERS = (DLQ_TRUNCATED, DLQ_ORIGINAL_SIZE, DLQ_ORIGINAL_SHA256, DLQ_ORIGINAL_KEY_SIZE,
                         DLQ_ORIGINAL_KEY_SHA256)
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
        return b"".join((
            _HEAD2.pack(MAGIC, VERSION_KINDS, KIND_ARTICLE, int(self.timestamp_ms), int(self.source_partition),
                        int(self.source_offset), min(max(int(self.engine_us), 0), 0xFFFFFFFF)),
            _short(self.source_topic), _short(self.article_id), self.fingerprint,
        ))

    @classmethod
    def decode(cls, data: bytes) -> SignatureRecord:
        record = decode_stage_record(data)
        if not isinstance(record, SignatureRecord):
            raise SignatureDecodeError("not an article signature record")
        return record


@dataclass(frozen=True)
class RejectRecord:
    """A bad input record on its way (through the signatures topic) to the dead-letter topic."""

    reason: str
    detail: str
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]  # the original's (without dlq.* ones)
    source_topic: str
    source_partition: int
    source_offset: int
    timestamp_ms: int
    reference: tuple[tuple[str, bytes], ...] = ()  # dlq.truncated, dlq.original.*: set when truncated

    def encode(self) -> bytes:
        parts = [_HEAD2.pack(MAGIC, VERSION_KINDS, KIND_REJECT, int(self.timestamp_ms), int(self.source_partition),
                             int(self.source_offset), 0),
                 _short(self.source_topic), _short(self.reason), _short(_clip(self.detail, MAX_DETAIL)),
                 _LEN32.pack(_NO_KEY) if self.key is None else _LEN32.pack(len(self.key)) + self.key,
                 ]
        for headers in (self.headers, self.reference):
            parts.append(_LEN.pack(len(headers)))
            for name, value in headers:
                parts += [_short(name), _LEN32.pack(len(value)), value]
        parts.append(self.value)
        return b"".join(parts)

    def dead_letter(self) -> tuple[bytes | None, bytes, list[tuple[str, bytes]]]:
        """``(key, value, headers)`` of its dead letter."""
        headers = dlq_headers(self.headers, reason=self.reason, detail=self.detail, topic=self.source_topic,
                              partition=self.source_partition, offset=self.source_offset,
                              timestamp_ms=self.timestamp_ms if self.timestamp_ms >= 0 else None)
        return self.key, self.value, headers + list(self.reference)


def _short(text: str) -> bytes:
    raw = text.encode("utf-8")
    if len(raw) > 0xFFFF:
        raise ValueError(f"string of {len(raw)} bytes does not fit a signature record (max 65535)")
    return _LEN.pack(len(raw)) + raw


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int) -> None:
        self.data, self.pos = data, pos

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise SignatureDecodeError("truncated signature record")
        out = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        return out

    def short(self) -> str:
        (n,) = _LEN.unpack_from(self.data, self.pos)
        self.pos += _LEN.size
        return self.take(n).decode("utf-8")

    def u32(self) -> int:
        (n,) = _LEN32.unpack_from(self.data, self.pos)
        self.pos += _LEN32.size
        return n


def decode_stage_record(data: bytes) -> SignatureRecord | RejectRecord:
    """Decode one record of the signatures topic (either version)."""
    try:
        if len(data) >= 2 and data[0] == MAGIC and data[1] == VERSION:
            _, _, ts, part, offset, engine_us = _HEAD.unpack_from(data, 0)
            kind, r = KIND_ARTICLE, _Reader(data, _HEAD.size)
        else:
            magic, version, kind, ts, part, offset, engine_us = _HEAD2.unpack_from(data, 0)
            if magic != MAGIC or version != VERSION_KINDS or kind not in (KIND_ARTICLE, KIND_REJECT):
                raise SignatureDecodeError(f"unknown signature record magic/version/kind {magic:#x}/{version}/{kind}")
            r = _Reader(data, _HEAD2.size)
        topic = r.short()
        if kind == KIND_ARTICLE:
            aid = r.short()
            return SignatureRecord(article_id=aid, fingerprint=bytes(data[r.pos:]), source_topic=topic,
                                   source_partition=part, source_offset=offset, timestamp_ms=ts,
                                   engine_us=engine_us)
        reason, detail = r.short(), r.short()
        n = r.u32()
        key = None if n == _NO_KEY else r.take(n)
        lists = []
        for _ in range(2):
            (count,) = _LEN.unpack_from(data, r.pos)
            r.pos += _LEN.size
            lists.append(tuple((r.short(), r.take(r.u32())) for _ in range(count)))
        return RejectRecord(reason=reason, detail=detail, key=key, value=bytes(data[r.pos:]), headers=lists[0],
                            source_topic=topic, source_partition=part, source_offset=offset, timestamp_ms=ts,
                            reference=lists[1])
    except (struct.error, UnicodeDecodeError, TypeError) as exc:
        raise SignatureDecodeError(f"corrupt signature record: {exc}") from exc


def reject_record(*, reason: str, detail: str, key: bytes | None, value: bytes, headers: Any, topic: str,
                  partition: int, offset: int, timestamp_ms: int | None, budget: int) -> RejectRecord:
    """The reject record of a bad input record, within ``budget`` bytes of key + value + headers.

    The original travels unchanged when it fits the dead-letter topic; otherwise the dead letter
    is a reference: the first :data:`DLQ_SAMPLE_BYTES` of the value (and key), its size and
    SHA-256, flagged ``dlq.truncated: true``, so that a poison record can never stop the stream.
    """
    items = headers.items() if isinstance(headers, dict) else (headers or [])
    original = tuple((str(k), _as_bytes(v)) for k, v in items
                     if k not in DLQ_HEADERS and k not in DLQ_REFERENCE_HEADERS)
    header_bytes = sum(len(k) + len(v) + 8 for k, v in original)
    extra: list[tuple[str, bytes]] = []
    if len(value) + len(key or b"") + header_bytes + MAX_DETAIL + 512 > budget:
        extra = [(DLQ_TRUNCATED, b"true"), (DLQ_ORIGINAL_SIZE, str(len(value)).encode()),
                 (DLQ_ORIGINAL_SHA256, hashlib.sha256(value).hexdigest().encode())]
        value = value[:DLQ_SAMPLE_BYTES]
        if key is not None and len(key) > DLQ_SAMPLE_BYTES:
            extra += [(DLQ_ORIGINAL_KEY_SIZE, str(len(key)).encode()),
                      (DLQ_ORIGINAL_KEY_SHA256, hashlib.sha256(key).hexdigest().encode())]
            key = key[:DLQ_SAMPLE_BYTES]
        if header_bytes + len(value) + len(key or b"") + MAX_DETAIL + 512 > budget:
            original = ()  # the original headers alone are too large: they are dropped
    return RejectRecord(reason=reason, detail=_clip(detail, MAX_DETAIL), key=key, value=value,
                        headers=original, source_topic=topic, source_partition=partition,
                        source_offset=offset, timestamp_ms=-1 if timestamp_ms is None else int(timestamp_ms),
                        reference=tuple(extra))


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
    out["source_topic"] = sig.source_topic
    out["source_partition"] = sig.source_partition
    out["source_offset"] = sig.source_offset
    out["processed_at"] = iso_now(processed_at)
    return out


def output_event_json(event: str, sig: SignatureRecord, processed_at_iso: str) -> bytes:
    """``encode_json(output_event(...))`` of an event already in orjson's compact form (``event``:
    a JSON object's text, what :class:`~stream_dedup.batch_decisions.EventBatch` holds with
    ``compact``), the source position and the processing time (:func:`iso_now`) appended."""
    return b"".join((event[:-1].encode(), b',"source_topic":', _topic_json(sig.source_topic), b',"source_partition":',
                     orjson.dumps(sig.source_partition), b',"source_offset":', orjson.dumps(sig.source_offset),
                     b',"processed_at":', orjson.dumps(processed_at_iso), b"}"))


@functools.lru_cache(maxsize=64)
def _topic_json(topic: str) -> bytes:
    return orjson.dumps(topic)


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
            if k not in DLQ_HEADERS and k not in DLQ_REFERENCE_HEADERS:
                headers.append((str(k), _as_bytes(v)))
    detail = _clip(detail, MAX_DETAIL)
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
    return {k: _as_bytes(v).decode("utf-8", "replace") for k, v in items
            if k in DLQ_HEADERS or k in DLQ_REFERENCE_HEADERS}
