"""Two workers, a multi-partition input topic: duplicates are found whichever partition the
original went to, and still after the owner of the decision stage dies (catch-up of an empty
index: the workers run with ``--standby-follow 0``)."""

from __future__ import annotations

import json
import signal
import time

import pytest
from ownership import wait_decision_owner

pytestmark = pytest.mark.kafka

PARTITIONS = 4
STORIES = 12


def _article(aid: str, text: str) -> bytes:
    return json.dumps({"id": aid, "text": text}).encode()


def _events_by_id(records) -> dict[str, dict]:
    out = {}
    for r in records:
        e = r.json()
        out.setdefault(e["id"], e)
    return out


def test_two_workers_cross_partition_duplicates_and_failover(kio, kafka_topics, worker_topics, start_worker):
    t = worker_topics
    kafka_topics([t.input], partitions=PARTITIONS)
    # no warm standby here: the survivor's index stays empty, so the takeover exercises the catch-up
    # from the signatures topic (a new worker or disk); following is tested in test_worker_standby.py
    w1 = start_worker(t, name="w1", standby_follow=0)
    w2 = start_worker(t, name="w2", standby_follow=0)
    w1.wait_ready(timeout=90)
    w2.wait_ready(timeout=90)
    owner = wait_decision_owner([w1, w2])
    # both workers must have input partitions: the stages really run on both
    for w in (w1, w2):
        parts = [p for p in w.readyz()[1]["assigned_partitions"] if p.startswith(t.input + "-")]
        assert parts, f"{w.name} has no input partition: {w.readyz()}"

    stories = {f"story{i}": kio.synthetic_story(1000 + i) for i in range(STORIES)}
    # phase 1: originals on partition i % P
    originals = [(sid.encode(), _article(sid, text), i % PARTITIONS) for i, (sid, text) in enumerate(stories.items())]
    kio.produce(t.input, originals)
    kio.consume_all([t.new, t.duplicates], until=lambda rs: len(_events_by_id(rs)) >= STORIES, timeout=60, idle=0)
    # phase 2: two variants of each story, each on a partition different from the original's
    variants = []
    for i, (sid, text) in enumerate(stories.items()):
        for v in (1, 2):
            vid = f"{sid}-v{v}"
            variants.append((vid.encode(), _article(vid, kio.synthetic_variant(text, v)), (i + v) % PARTITIONS))
    kio.produce(t.input, variants)
    expected = set(stories) | {v[0].decode() for v in variants}
    out = kio.consume_all([t.new, t.duplicates], until=lambda rs: set(_events_by_id(rs)) >= expected,
                          timeout=90, idle=1.0)
    events = _events_by_id(out)
    assert set(events) >= expected
    for sid in stories:
        assert events[sid]["type"] == "new", events[sid]
    for vid_b, _value, _p in variants:
        e = events[vid_b.decode()]
        assert e["type"] == "duplicate-of", e
        assert e["duplicate_of"].split("-v")[0] == vid_b.decode().split("-v")[0], e

    # phase 3: kill the worker that owns the decision stage; the other one takes it over,
    # catches its (empty) index up from the signatures topic and still finds the duplicates
    survivor = w2 if owner is w1 else w1
    time.sleep(1.5)  # let the owner commit its signatures offset
    owner.signal(signal.SIGKILL)
    owner.wait(timeout=30)
    late = []
    for i, (sid, text) in enumerate(stories.items()):
        vid = f"{sid}-v3"
        late.append((vid.encode(), _article(vid, kio.synthetic_variant(text, 3)), (i + 3) % PARTITIONS))
    kio.produce(t.input, late)
    expected |= {v[0].decode() for v in late}
    out = kio.consume_all([t.new, t.duplicates], until=lambda rs: set(_events_by_id(rs)) >= expected,
                          timeout=120, idle=1.0)
    events = _events_by_id(out)
    missing = expected - set(events)
    assert not missing, f"missing events {sorted(missing)}\n{survivor.log_tail()}"
    for vid_b, _value, _p in late:
        e = events[vid_b.decode()]
        assert e["type"] == "duplicate-of", (e, survivor.log_tail())
        assert e["duplicate_of"].split("-v")[0] == vid_b.decode().split("-v")[0], e
    assert wait_decision_owner([survivor]) is survivor
    log = survivor.log_text()
    assert "catch-up: applied" in log, survivor.log_tail()
