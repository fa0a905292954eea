"""More workers than partitions: the extra ones are ready standbys (a StatefulSet rollout waits for
every pod's readiness, so an idle replica must not stay unready)."""

from __future__ import annotations

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
