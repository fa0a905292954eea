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


def test_compute_pool_child_process_round_trip_and_failure():
    import asyncio

    import pytest

    pool = stage1.ComputePool(EngineConfig(), 1)
    try:
        async def run():
            items = [(json.dumps({"id": f"p{i}", "text": TEXT + str(i)}).encode(), "t", 0, i, 0) for i in range(50)]
            # several batches in flight: answered in order
            results = await asyncio.gather(*(pool.compute(items[i:i + 10]) for i in range(0, 50, 10)))
            flat = [r for batch in results for r in batch]
            assert [r[1] for r in flat] == [f"p{i}" for i in range(50)]
            def strip(rs):  # the same signatures as in-process, but for the measured engine time
                return [(k, a, SignatureRecord.decode(b).fingerprint) for k, a, b in rs]

            assert strip(flat) == strip(stage1.compute(items))
            # the child dies: calls fail instead of hanging
            pool.procs[0].proc.kill()
            with pytest.raises(RuntimeError):
                await asyncio.wait_for(pool.compute(items[:1]), 10)

        stage1.init(EngineConfig())
        asyncio.run(run())
    finally:
        pool.close()


def test_a_record_whose_fingerprint_raises_is_dead_lettered_alone(monkeypatch):
    """The batch's fingerprints are one call; when it raises, the records are fingerprinted one at a
    time: only the failing one becomes a ``processing_error``, the others get the signatures of a
    batch without it."""
    from stream_dedup.fingerprint import Fingerprinter

    stage1.init(EngineConfig())
    items = [(json.dumps({"id": f"p{i}", "text": f"{TEXT} story {i}"}).encode(), "t", 0, i, 0) for i in range(8)]
    clean = stage1.compute([item for i, item in enumerate(items) if i != 5])
    unflagged = Fingerprinter.unflagged

    def failing(self, text):
        if text.endswith(" story 5"):
            raise RuntimeError("boom")
        return unflagged(self, text)

    monkeypatch.setattr(Fingerprinter, "unflagged", failing)
    out = stage1.compute(items)
    assert out[5] == ("dlq", stage1.PROCESSING_ERROR, "RuntimeError: boom")
    fingerprints = [(r[1], SignatureRecord.decode(r[2]).fingerprint) for r in out if r[0] == "sig"]
    assert fingerprints == [(r[1], SignatureRecord.decode(r[2]).fingerprint) for r in clean]
