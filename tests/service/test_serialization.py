"""Wire formats: signature records, output events, dead-letter headers."""

from __future__ import annotations

import json
import re

import pytest

from stream_dedup.service.serialization import (
    DLQ_HEADERS,
    DLQ_SAMPLE_BYTES,
    MAX_DETAIL,
    RejectRecord,
    SignatureDecodeError,
    SignatureRecord,
    decode_stage_record,
    dlq_headers,
    encode_json,
    iso_now,
    output_event,
    output_event_json,
    parse_dlq_headers,
    reject_record,
)


def sig(**kw) -> SignatureRecord:
    base = dict(article_id="näws-1 ✓", fingerprint=bytes(range(256)) * 3, source_topic="articles",
                source_partition=7, source_offset=123456789012, timestamp_ms=1_700_000_000_123, engine_us=4321)
    base.update(kw)
    return SignatureRecord(**base)


def test_signature_round_trip():
    s = sig()
    assert SignatureRecord.decode(s.encode()) == s
    assert SignatureRecord.decode(memoryview(s.encode())) == s
    empty = sig(fingerprint=b"", article_id="", engine_us=0)
    assert SignatureRecord.decode(empty.encode()) == empty


def test_signature_with_real_fingerprint():
    from stream_dedup.config import EngineConfig
    from stream_dedup.fingerprint import Fingerprint, Fingerprinter
    from stream_dedup.record import parse_record

    cfg = EngineConfig()
    fp = Fingerprinter(cfg).fingerprint(parse_record(b'{"id": "a", "text": "one two three four five six"}', cfg))
    s = sig(fingerprint=fp.to_bytes())
    back = Fingerprint.from_bytes(SignatureRecord.decode(s.encode()).fingerprint)
    assert back.simhash == fp.simhash and back.exact == fp.exact and (back.minhash == fp.minhash).all()


def test_signature_carries_the_identity_sketch_and_refuses_version_1():
    from stream_dedup.config import EngineConfig
    from stream_dedup.fingerprint import Fingerprint, Fingerprinter
    from stream_dedup.record import parse_record

    cfg = EngineConfig()
    text = "Shares of Apple rose 3.2 percent to 145.50 dollars on Tuesday, said Tim Cook in New York."
    fp = Fingerprinter(cfg).fingerprint(parse_record(json.dumps({"id": "a", "text": text}).encode(), cfg))
    assert fp.identity.shape[0] >= 4
    back = Fingerprint.from_bytes(SignatureRecord.decode(sig(fingerprint=fp.to_bytes()).encode()).fingerprint)
    assert back == fp and (back.identity == fp.identity).all()
    old = b"\x01" + fp.to_bytes()[1:]   # a stage-1 worker of the previous release
    with pytest.raises(ValueError, match="unknown fingerprint version 1"):
        Fingerprint.from_bytes(SignatureRecord.decode(sig(fingerprint=old).encode()).fingerprint)


@pytest.mark.parametrize("data", [b"", b"\x00", b"\xd5\x03" + bytes(40), b"\xd5\x02\x07" + bytes(40),
                                  sig().encode()[:30],
                                  b"\xd5\x01" + bytes(24) + b"\xff\xff"])
def test_corrupt_signature_raises(data):
    with pytest.raises(SignatureDecodeError):
        SignatureRecord.decode(data)


def test_output_event_adds_source_and_processed_at():
    ev = output_event({"id": "x", "type": "new"}, sig(), 1_700_000_000.5)
    assert ev["id"] == "x" and ev["type"] == "new"
    assert ev["source_partition"] == 7 and ev["source_offset"] == 123456789012
    assert ev["processed_at"] == "2023-11-14T22:13:20.500Z"
    assert json.loads(encode_json(ev)) == ev
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", iso_now(0.0))


@pytest.mark.parametrize("topic", ["articles", 'odd "topic" \\ é'])
def test_output_event_json_is_encode_json_of_output_event(topic: str):
    """The worker's events written compiled (orjson's form) get the very bytes of output_event's encoding."""
    event = {"id": "x\u0001 ✓", "type": "duplicate-of", "duplicate_of": "r", "similarity": 0.6172,
             "method": "minhash", "hamming_distance": 3, "containment": 1.0, "matched_id": "m",
             "methods": ["minhash", "containment"], "candidates": 2, "seen_before": False,
             "direction": "new_in_earlier"}
    s = sig(source_topic=topic)
    at = 1_700_000_000.5
    assert output_event_json(encode_json(event).decode(), s, iso_now(at)) == encode_json(output_event(event, s, at))


def test_dlq_headers_keep_original_headers_and_add_reason_and_source():
    h = dlq_headers([("trace-id", b"abc"), ("dlq.reason", b"spoofed")], reason="invalid_json",
                    detail="Expecting value: line 1 column 1", topic="articles", partition=2, offset=41,
                    timestamp_ms=1234)
    assert h[0] == ("trace-id", b"abc")
    assert [k for k, _ in h[1:]] == list(DLQ_HEADERS)
    parsed = parse_dlq_headers(h)
    assert parsed == {"dlq.reason": "invalid_json", "dlq.detail": "Expecting value: line 1 column 1",
                      "dlq.source.topic": "articles", "dlq.source.partition": "2", "dlq.source.offset": "41",
                      "dlq.source.timestamp": "1234"}


def test_dlq_detail_is_truncated_and_timestamp_optional():
    h = parse_dlq_headers(dlq_headers(None, reason="too_large", detail="x" * 5000, topic="t", partition=0,
                                      offset=0, timestamp_ms=None))
    assert len(h["dlq.detail"]) == MAX_DETAIL and h["dlq.detail"].endswith("...")
    assert h["dlq.source.timestamp"] == ""


def test_iso_now_matches_datetime_formatting_across_seconds() -> None:
    from datetime import datetime, timezone

    for t in (0.0, 0.999, 1.0, 1_700_000_000.123, 1_700_000_000.9995, 1_700_000_001.5, 1_700_000_000.001, 4_102_444_799.75):
        ms = int(t * 1000)
        expected = datetime.fromtimestamp(ms // 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{ms % 1000:03d}Z"
        assert iso_now(t) == expected
    assert iso_now(1_700_000_000.25) == "2023-11-14T22:13:20.250Z"


def _reject(value: bytes, key: bytes | None = b"k-1", headers=None, budget: int = 1_000_000) -> RejectRecord:
    return reject_record(reason="invalid_json", detail="Expecting value", key=key, value=value,
                         headers=headers or [("trace-id", b"abc")], topic="articles", partition=2, offset=41,
                         timestamp_ms=1234, budget=budget)


def test_reject_record_round_trip_keeps_the_original_unchanged():
    r = _reject(b"not json \x00\xff")
    back = decode_stage_record(r.encode())
    assert back == r
    key, value, headers = back.dead_letter()
    assert key == b"k-1" and value == b"not json \x00\xff"
    h = parse_dlq_headers(headers)
    assert headers[0] == ("trace-id", b"abc")
    assert h["dlq.reason"] == "invalid_json" and h["dlq.source.offset"] == "41" and "dlq.truncated" not in h
    no_key = _reject(b"x", key=None)
    assert decode_stage_record(no_key.encode()).key is None
    # an article signature is never read as a reject and vice versa
    assert isinstance(decode_stage_record(sig().encode()), SignatureRecord)
    with pytest.raises(SignatureDecodeError):
        SignatureRecord.decode(r.encode())


def test_reject_record_too_large_for_the_dlq_becomes_a_reference():
    import hashlib

    big = b"x" * 5_000_000
    r = _reject(big, key=b"K" * 5000, budget=1_000_000)
    assert len(r.encode()) < 20_000
    key, value, headers = decode_stage_record(r.encode()).dead_letter()
    h = parse_dlq_headers(headers)
    assert value == big[:DLQ_SAMPLE_BYTES] and key == b"K" * DLQ_SAMPLE_BYTES
    assert h["dlq.truncated"] == "true"
    assert h["dlq.original.size"] == str(len(big))
    assert h["dlq.original.sha256"] == hashlib.sha256(big).hexdigest()
    assert h["dlq.original.key.size"] == "5000"
    assert h["dlq.original.key.sha256"] == hashlib.sha256(b"K" * 5000).hexdigest()


def test_reject_record_drops_spoofed_dlq_headers_of_the_input():
    r = _reject(b"{}", headers=[("dlq.truncated", b"true"), ("dlq.reason", b"x"), ("ok", b"1")])
    _key, _value, headers = decode_stage_record(r.encode()).dead_letter()
    h = parse_dlq_headers(headers)
    assert "dlq.truncated" not in h and h["dlq.reason"] == "invalid_json"
    assert ("ok", b"1") in headers
