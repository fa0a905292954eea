"""Standbys: more workers than partitions leave ready standbys (a StatefulSet rollout waits for
every pod's readiness, so an idle replica must not stay unready); a standby decision stage keeps
its index current (--standby-follow), so that a takeover replays nothing."""

from __future__ import annotations

import signal
import time

import pytest

pytestmark = pytest.mark.kafka


def test_replicas_beyond_the_partitions_are_ready_standbys(kafka_topics, worker_topics, start_worker) -> None:
    t = worker_topics
    kafka_topics([t.input], partitions=1)          # one input partition and one decision stage for three workers
    workers = [start_worker(t, name=f"w{i}") for i in range(3)]
    bodies = {}
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        bodies = {w.name: w.readyz() for w in workers}
        assigned = sum(len(b.get("assigned_partitions", [])) for _, b in bodies.values())
        deciding = sum(bool(b.get("decision_stage")) for _, b in bodies.values())
        if all(status == 200 for status, _ in bodies.values()) and assigned == 1 and deciding == 1:
            break
        time.sleep(0.5)
    statuses = {name: status for name, (status, _) in bodies.items()}
    assert statuses == {"w0": 200, "w1": 200, "w2": 200}, bodies
    owners = [b for _, b in bodies.values() if b["assigned_partitions"] or b["decision_stage"]]
    standbys = [b for _, b in bodies.values() if not b["assigned_partitions"] and not b["decision_stage"]]
    assert standbys, bodies                          # at least one worker got nothing ...
    assert all(b["standby"] for b in standbys)       # ... and says it is a standby
    assert not any(b["standby"] for b in owners)
    assert sum(b["decision_stage"] for _, b in bodies.values()) == 1   # exactly one decision stage


def _takeover_line(log: str) -> tuple[int | None, int | None] | None:
    """(index offset, group committed) of the last ``index at signature offset L, group committed C`` line."""
    import re

    found = re.findall(r"index at signature offset (\w+), group committed (\w+)", log)
    if not found:
        return None
    last, committed = found[-1]
    return (None if last == "None" else int(last)), (None if committed == "None" else int(committed))


def test_a_standby_follows_the_owner_so_a_takeover_replays_nothing(kio, kafka_topics, worker_topics, start_worker):
    """--standby-follow (the default): the standby's index applies what the owner commits, so that
    the survivor of the owner's death starts deciding without replaying the history first."""
    from ownership import wait_decision_owner
    from test_worker_chaos import PARTITIONS, Feed, assert_exactly_once, traffic

    t = worker_topics
    kafka_topics([t.input], partitions=PARTITIONS)
    workers = [start_worker(t, name=f"w{i}") for i in range(2)]
    for w in workers:
        w.wait_ready(timeout=90)
    records = traffic(kio, 240)
    first = Feed(kio, t.input, records[:300], rate=150)
    first.run()
    owner = wait_decision_owner(workers)
    standby = next(w for w in workers if w is not owner)
    caught_up, seen = False, None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not caught_up:
        committed = owner.readyz()[1].get("committed_offset")
        body = standby.readyz()[1]
        seen = (committed, body.get("index_checkpoint"), body.get("index_behind"))
        caught_up = bool(committed) and body.get("index_checkpoint") == committed - 1 and body.get("index_behind") == 0
        time.sleep(0.5)
    assert caught_up, f"(owner committed, standby checkpoint, standby behind) = {seen}\n{standby.log_tail()}"
    text = kio.http_get(standby.url + "/metrics")[1]
    assert kio.metric_value(text, "stream_dedup_standby_behind_records") == 0
    assert (kio.metric_value(text, "stream_dedup_index_articles") or 0) > 0  # the standby's own index holds them
    owner.signal(signal.SIGKILL)
    owner.wait(timeout=30)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        body = standby.readyz()[1]
        if body.get("decision_stage") and body.get("decision_state") == "deciding":
            break
        time.sleep(0.2)
    assert standby.readyz()[1].get("decision_state") == "deciding", standby.log_tail()
    line = _takeover_line(standby.log_text())
    assert line is not None and line[0] is not None and line[1] is not None, standby.log_tail()
    index_at, committed = line
    print(f"takeover: the standby's index at signature offset {index_at}, the group committed {committed}")
    assert committed - (index_at + 1) == 0  # nothing to replay
    assert "catch-up: replaying" not in standby.log_text()
    second = Feed(kio, t.input, records[300:], rate=150)
    second.run()
    both = Feed(kio, t.input, [], rate=1)
    both.positions = first.positions + second.positions
    assert_exactly_once(kio, t, both)
