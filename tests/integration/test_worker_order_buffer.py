"""Stage 1's order buffer must never hold a record through a shutdown or a revocation.

Faust waits, on SIGTERM and on every revocation, until each record its agent received is acked
(``stream_wait_empty``); a record the event-time merge still holds is not acked, so a merge that
only releases from a Faust timer (stopped as soon as the app stops) hung the shutdown: this
failed CI once, as ``test_sigterm_mid_stream_then_restart_is_exactly_once`` timing out.

Here the hold is made certain rather than left to chance: the records carry timestamps an hour
old (a backlog, not a live stream) and go to one partition of three, with ``--order-wait 600``,
so the merge holds them for the two partitions that have nothing, for ten minutes.
"""

from __future__ import annotations

import signal
import time

import pytest
from eos_check import check

from stream_dedup.config import EngineConfig

pytestmark = pytest.mark.kafka

PARTITIONS = 3
ORDER_WAIT = 600


def _produce_old(kio, topic: str, n_stories: int) -> list[tuple[int, int]]:
    """Produce stories an hour old to partition 0; their ``(partition, offset)`` positions."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": kio.bootstrap, "acks": "all", "enable.idempotence": True})
    old_ms = int((time.time() - 3600) * 1000)
    positions: list[tuple[int, int]] = []

    def delivered(err, msg) -> None:
        assert err is None, err
        positions.append((msg.partition(), msg.offset()))

    for i, (rid, _cluster, value) in enumerate(kio.synthetic_records(n_stories, variants_per_story=2)):
        producer.produce(topic, key=rid.encode(), value=value, partition=0, timestamp=old_ms + i,
                         on_delivery=delivered)
    assert producer.flush(30) == 0
    return sorted(positions)


def _wait_held(kio, w, n: int, timeout: float = 60.0) -> None:
    """Until the worker's order buffer holds ``n`` records (the precondition of these tests)."""
    deadline = time.monotonic() + timeout
    held = None
    while time.monotonic() < deadline:
        status, text = kio.http_get(w.url + "/metrics")
        held = kio.metric_value(text, "stream_dedup_order_buffer_records") if status == 200 else None
        if held == n:
            return
        time.sleep(0.3)
    raise AssertionError(f"the order buffer holds {held} records, not {n}:\n{w.log_tail()}")


def _assert_exactly_once(kio, t, positions: list[tuple[int, int]]) -> None:
    report = check(kio.bootstrap, t.new, t.duplicates, t.dlq, t.signatures, positions, EngineConfig(),
                   timeout=60)
    print(f"exactly-once check: {report.row()}")
    assert (report.lost, report.doubled, report.contradictory) == (0, 0, 0), report.examples[:10]
    assert report.events == report.produced == len(positions)


def test_sigterm_with_records_held_for_the_merge_exits_and_loses_nothing(kio, kafka_topics, worker_topics,
                                                                        start_worker, tmp_path):
    t = worker_topics
    kafka_topics([t.input], partitions=PARTITIONS)
    data_dir = tmp_path / "data"
    w = start_worker(t, name="w0", data_dir=data_dir, order_wait=ORDER_WAIT)
    w.wait_ready(timeout=90)
    positions = _produce_old(kio, t.input, 10)
    _wait_held(kio, w, len(positions))
    started = time.monotonic()
    w.signal(signal.SIGTERM)
    assert w.wait(timeout=45) == 0, w.log_tail()
    print(f"stopped {time.monotonic() - started:.1f} s after SIGTERM with {len(positions)} records held")
    # the held records were decided before the exit: left unacked, they would go to w1, which
    # would hold them for ORDER_WAIT again and the check below would time out
    w2 = start_worker(t, name="w1", data_dir=data_dir, order_wait=ORDER_WAIT)
    w2.wait_ready(timeout=90)
    _assert_exactly_once(kio, t, positions)


def test_revocation_with_records_held_for_the_merge_completes(kio, kafka_topics, worker_topics, start_worker):
    t = worker_topics
    kafka_topics([t.input], partitions=PARTITIONS)
    w0 = start_worker(t, name="w0", order_wait=ORDER_WAIT)
    w0.wait_ready(timeout=90)
    positions = _produce_old(kio, t.input, 10)
    _wait_held(kio, w0, len(positions))
    # a second member joins: w0's partitions are revoked, and Faust waits for the held records
    w1 = start_worker(t, name="w1", order_wait=ORDER_WAIT)
    w1.wait_ready(timeout=90)
    w0.wait_ready(timeout=60)
    _assert_exactly_once(kio, t, positions)
    assert w0.alive() and w1.alive()
