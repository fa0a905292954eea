"""Stage-1 CPU work: good records become signature records, bad ones dead-letter reasons."""

from __future__ import annotations

import json

from stream_dedup.config import EngineConfig
from stream_dedup.record import REJECT_REASONS
from stream_dedup.service import stage1
from stream_dedup.service.serialization import SignatureRecord

TEXT = "The council approved the new budget on Tuesday after a long debate about schools and roads. " * 3


def test_compute_good_and_bad_records():
    stage1.init(EngineConfig(max_text_bytes=1000))
    items = [
        (json.dumps({"id": "a1", "text": TEXT}).encode(), "articles", 2, 10, 1_700_000_000_000),
        (b"not json", "articles", 2, 11, 1_700_000_000_001),
        (json.dumps({"id": "a2"}).encode(), "articles", 0, 12, 1_700_000_000_002),
        (json.dumps({"id": "big", "text": "x" * 2000}).encode(), "articles", 0, 13, 1_700_000_000_003),
        (b'{"id": "u", "text": "\xff"}', "articles", 1, 14, 1_700_000_000_004),
        (json.dumps({"id": "h1", "html": f"<html><body><p>{TEXT}</p></body></html>"}).encode(), "articles", 1,
         15, 1_700_000_000_005),
    ]
    out = stage1.compute(items)
    assert [r[0] for r in out] == ["sig", "dlq", "dlq", "dlq", "dlq", "sig"]
    assert [r[1] for r in out if r[0] == "dlq"] == ["invalid_json", "missing_text", "too_large", "invalid_utf8"]
    assert all(r[1] in REJECT_REASONS and r[2] for r in out if r[0] == "dlq")
    s = SignatureRecord.decode(out[0][2])
    assert (s.article_id, s.source_topic, s.source_partition, s.source_offset, s.timestamp_ms) == (
        "a1", "articles", 2, 10, 1_700_000_000_000)
    assert s.engine_us > 0 and len(s.fingerprint) > 100
    assert out[0][1] == "a1" and out[5][1] == "h1"


def test_same_text_same_fingerprint_in_signature():
    stage1.init(EngineConfig())
    a = stage1.compute([(json.dumps({"id": "x", "text": TEXT}).encode(), "t", 0, 0, 0)])
    b = stage1.compute([(json.dumps({"id": "y", "text": TEXT}).encode(), "t", 1, 5, 9)])
    assert SignatureRecord.decode(a[0][2]).fingerprint == SignatureRecord.decode(b[0][2]).fingerprint
