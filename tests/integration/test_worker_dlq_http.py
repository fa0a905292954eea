"""Bad input goes to the DLQ unchanged; good records around it are processed; HTTP endpoints."""

from __future__ import annotations

import json
import time

import pytest

from stream_dedup.service.serialization import parse_dlq_headers

pytestmark = pytest.mark.kafka

SECRET = "s3cr3t-Pa55word-never-logged"


def good(i: int) -> bytes:
    text = f"Story number {i}: " + " ".join(f"word{i}x{j}" for j in range(60))
    return json.dumps({"id": f"good-{i}", "text": text, "title": f"t{i}"}).encode()


BAD = [
    (b"this is not json {", "invalid_json"),
    (json.dumps({"text": "no id here " * 10}).encode(), "missing_id"),
    (json.dumps({"id": "no-text"}).encode(), "missing_text"),
    (json.dumps({"id": "list-text", "text": ["not", "a", "string"]}).encode(), "wrong_type"),
    (json.dumps({"id": "too-big", "text": "x" * 5000}).encode(), "too_large"),
    (b'{"id": "bad-utf8", "text": "caf\xe9 au lait \xff\xfe"}', "invalid_utf8"),
    (b"[1, 2, 3]", "not_an_object"),
    (b'{"id": "twice", "text": "one", "text": "two"}', "duplicate_field"),
]


def test_bad_input_goes_to_dlq_and_metrics_and_health(kio, kafka_topics, worker_topics, start_worker):
    t = worker_topics
    kafka_topics([t.input], partitions=2)
    # bad records interleaved with good ones, on both partitions
    records, expected_bad = [], []
    for i, (value, reason) in enumerate(BAD):
        records.append((f"g{2 * i}".encode(), good(2 * i), i % 2))
        records.append((f"bad-{i}".encode(), value, i % 2))
        expected_bad.append((value, reason, i % 2))
        records.append((f"g{2 * i + 1}".encode(), good(2 * i + 1), (i + 1) % 2))
    positions = kio.produce(t.input, records)
    bad_positions = {records[3 * i + 1][1]: positions[3 * i + 1] for i in range(len(BAD))}

    w = start_worker(t, max_text_bytes=4000, env={"KAFKA_SASL_PASSWORD": SECRET})
    body = w.wait_ready(timeout=90)
    assert body["status"] == "ready"

    n_good = 2 * len(BAD)
    out = kio.consume_all([t.new, t.duplicates, t.dlq],
                          until=lambda rs: sum(r.topic != t.dlq for r in rs) >= n_good
                          and sum(r.topic == t.dlq for r in rs) >= len(BAD), timeout=90, idle=1.0)
    events = [r.json() for r in out if r.topic != t.dlq]
    assert {e["id"] for e in events} == {f"good-{i}" for i in range(n_good)}
    for e in events:
        assert {"source_partition", "source_offset", "processed_at"} <= set(e)

    dlq = [r for r in out if r.topic == t.dlq]
    assert len(dlq) == len(BAD), [parse_dlq_headers(r.headers) for r in dlq]
    by_value = {r.value: r for r in dlq}
    for value, reason, _part in expected_bad:
        assert value in by_value, f"{reason}: original bytes not found unchanged in the DLQ"
        h = parse_dlq_headers(by_value[value].headers)
        partition, offset, _ts = bad_positions[value]
        assert h["dlq.reason"] == reason, h
        assert h["dlq.source.topic"] == t.input
        assert int(h["dlq.source.partition"]) == partition
        assert int(h["dlq.source.offset"]) == offset
        assert h["dlq.detail"]

    # metrics, health, readiness over HTTP; the decision stage's metrics reach /metrics within a second or two
    deadline = time.monotonic() + 10
    while True:
        status, text = kio.http_get(w.url + "/metrics")
        assert status == 200
        if kio.metric_value(text, "stream_dedup_index_articles") == n_good or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    for _value, reason, _part in expected_bad:
        assert kio.metric_value(text, "stream_dedup_dead_letters_total", {"reason": reason}) == 1.0, reason
    assert kio.metric_value(text, "stream_dedup_articles_total", {"result": "new"}) >= 1
    assert kio.metric_value(text, "stream_dedup_processing_seconds_count") == n_good
    assert kio.metric_value(text, "stream_dedup_ready") == 1.0
    assert kio.metric_value(text, "stream_dedup_index_articles") == n_good
    # consumer lag per partition (a periodic gauge): present, and 0 once everything is processed
    deadline = time.monotonic() + 30
    while True:
        text = kio.http_get(w.url + "/metrics")[1]
        lags = {(t.input, "0"): None, (t.input, "1"): None, (t.signatures, "0"): None}
        for topic, part in lags:
            lags[topic, part] = kio.metric_value(text, "stream_dedup_consumer_lag_messages",
                                                 {"topic": topic, "partition": part})
        if all(v == 0 for v in lags.values()) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert all(v == 0 for v in lags.values()), lags
    status, body = kio.http_get(w.url + "/healthz")
    assert status == 200 and json.loads(body)["status"] == "ok"
    status, body = kio.http_get(w.url + "/readyz")
    assert status == 200
    ready = json.loads(body)
    assert ready["decision_stage"] is True and ready["decision_state"] == "deciding"
    assert ready["index_checkpoint"] is not None and ready["committed_offset"] == ready["index_checkpoint"] + 1

    # the worker keeps going after bad input
    kio.produce(t.input, [(b"late", good(999), 0)])
    out = kio.consume_all([t.new], until=lambda rs: any(r.key == b"good-999" for r in rs), timeout=60, idle=0)
    assert any(r.key == b"good-999" for r in out)

    # graceful stop; the secret never reached the log
    import signal

    w.signal(signal.SIGTERM)
    assert w.wait(timeout=60) == 0, w.log_tail()
    log = w.log_text()
    assert SECRET not in log
    assert "service config" in log


def test_unusable_signatures_topic_is_one_clear_line_and_exit_1(kio, kafka_topics, worker_topics, start_worker):
    """A signatures topic with 2 partitions cannot keep one decision order: refused, not worked around."""
    t = worker_topics
    kafka_topics([t.input])
    kafka_topics([t.signatures], partitions=2)
    w = start_worker(t, name="w0")
    assert w.wait(timeout=60) == 1
    text = w.log_text()
    lines = [x for x in text.splitlines() if "cannot prepare topics" in x]
    assert len(lines) == 1 and "2 partitions" in lines[0], text
    assert "Traceback" not in text
