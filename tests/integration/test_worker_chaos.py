"""Exactly-once under faults, against the real broker and real worker processes.

Every test produces to a 3-partition input topic (good articles with near-duplicates, and bad
records mixed in) while it hurts the service, then reads the committed outputs with
``read_committed`` and checks them with :mod:`eos_check`: each input record has exactly one
event or dead letter, and its decision equals an uninterrupted run's on the same order.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from eos_check import check, topic_ends
from ownership import wait_decision_owner

from stream_dedup.config import EngineConfig
from stream_dedup.record import REJECT_REASONS

pytestmark = pytest.mark.kafka

PARTITIONS = 3
REPO = Path(__file__).resolve().parents[2]


class Feed(threading.Thread):
    """Produces ``records`` round-robin over the partitions at ``rate`` records/s; keeps their positions."""

    def __init__(self, kio, topic: str, records: list[tuple[bytes, bytes]], rate: float) -> None:
        super().__init__(daemon=True)
        self.kio, self.topic, self.records, self.rate = kio, topic, records, rate
        self.positions: list[tuple[int, int]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            chunk = max(1, int(self.rate / 10))
            producer = self.kio.producer()
            for i in range(0, len(self.records), chunk):
                t0 = time.monotonic()
                batch = [(k, v, (i + j) % PARTITIONS) for j, (k, v) in enumerate(self.records[i:i + chunk])]
                self.positions += [(p, o) for p, o, _ts in self.kio.produce(self.topic, batch, producer=producer)]
                time.sleep(max(0.0, 0.1 - (time.monotonic() - t0)))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def traffic(kio, n_stories: int, bad_every: int = 25) -> list[tuple[bytes, bytes]]:
    out = []
    for i, (rid, _cluster, value) in enumerate(kio.synthetic_records(n_stories, variants_per_story=2)):
        out.append((rid.encode(), value))
        if i % bad_every == 0:
            out.append((f"bad-{i}".encode(), b"not json {" if i % 2 else json.dumps({"id": f"nt-{i}"}).encode()))
    return out


def assert_exactly_once(kio, t, feed: Feed, **flags) -> None:
    assert feed.error is None, feed.error
    cfg = EngineConfig(**flags)
    report = check(kio.bootstrap, t.new, t.duplicates, t.dlq, t.signatures, feed.positions, cfg)
    print(f"exactly-once check: {report.row()}")
    if (report.lost, report.doubled, report.contradictory) != (0, 0, 0):
        # records per topic as the broker counts them, uncommitted ones included: a stage that
        # stopped shows few signatures or outputs; outputs there but not read, a transaction left open
        print(f"topic ends: {topic_ends(kio.bootstrap, [t.input, t.signatures, t.new, t.duplicates, t.dlq])}")
    assert (report.lost, report.doubled, report.contradictory) == (0, 0, 0), report.examples[:10]
    assert report.events == report.produced


def test_sigkill_cycles_lose_and_double_nothing(kio, kafka_topics, worker_topics, start_worker, tmp_path):
    t = worker_topics
    kafka_topics([t.input], partitions=PARTITIONS)
    data_dir = tmp_path / "data"
    # receipts swept every second: a sweep that dropped one too early shows up as a doubled event;
    # the lists' snapshot written every second: a restart loads the latest and files the articles
    # indexed after it again, and a list that came back wrong shows up as a contradictory decision
    w = start_worker(t, name="w0", data_dir=data_dir, batch_size=50, receipt_sweep=1, lists_snapshot_every=1)
    w.wait_ready(timeout=90)
    feed = Feed(kio, t.input, traffic(kio, 1200), rate=75)  # ~39 s: the five kills fall inside it
    feed.start()
    rnd = random.Random(7)
    restarts = []
    for cycle in range(5):
        time.sleep(rnd.uniform(1.5, 3.5))
        assert w.alive(), w.log_tail()
        assert feed.is_alive(), f"the feed ended before kill {cycle + 1}: the kills must fall while records arrive"
        w.signal(signal.SIGKILL)
        w.wait(timeout=30)
        w = start_worker(t, name=f"w{cycle + 1}", data_dir=data_dir, batch_size=50, receipt_sweep=1,
                         lists_snapshot_every=1)
        w.wait_ready(timeout=90)
        restarts.append(w)
    feed.join(timeout=120)
    assert_exactly_once(kio, t, feed)
    loaded = [r.name for r in restarts if "loaded from their snapshot and brought up to date" in r.log_path.read_text()]
    assert loaded, "no restart loaded the lists from a snapshot written while the worker ran"
    deadline = time.monotonic() + 30
    while (kio.metric_value(kio.http_get(w.url + "/metrics")[1], "stream_dedup_receipt_sweeps_total") or 0) < 1:
        assert time.monotonic() < deadline, "no receipt sweep in 30 s"
        time.sleep(0.5)


def test_sigterm_mid_stream_then_restart_is_exactly_once(kio, kafka_topics, worker_topics, start_worker,
                                                         tmp_path):
    t = worker_topics
    kafka_topics([t.input], partitions=PARTITIONS)
    data_dir = tmp_path / "data"
    feed = Feed(kio, t.input, traffic(kio, 800), rate=400)
    feed.start()
    w = start_worker(t, name="w0", data_dir=data_dir)
    w.wait_ready(timeout=90)
    time.sleep(2)
    w.signal(signal.SIGTERM)
    assert w.wait(timeout=60) == 0, w.log_tail()
    w2 = start_worker(t, name="w1", data_dir=data_dir)
    w2.wait_ready(timeout=90)
    feed.join(timeout=120)
    assert_exactly_once(kio, t, feed)


def _broker_pid() -> int | None:
    run_dir = Path(os.environ.get("KAFKA_RUN_DIR", "/tmp/stream-dedup-kafka"))
    try:
        return int((run_dir / "kafka.pid").read_text().strip())
    except (OSError, ValueError):
        return None


def test_broker_frozen_20s_worker_recovers_by_itself(kio, kafka_topics, worker_topics, start_worker):
    pid = _broker_pid()
    if pid is None:
        if os.environ.get("CI"):
            pytest.fail("no broker pid under KAFKA_RUN_DIR: CI must run the broker of scripts/kafka.sh")
        pytest.skip("the broker is not ours (KAFKA_BOOTSTRAP_SERVERS): cannot freeze it")
    t = worker_topics
    kafka_topics([t.input], partitions=PARTITIONS)
    w = start_worker(t, name="w0")
    w.wait_ready(timeout=90)
    feed = Feed(kio, t.input, traffic(kio, 300), rate=100)
    feed.start()
    time.sleep(2)
    os.kill(pid, signal.SIGSTOP)
    frozen_at = time.monotonic()
    try:
        # (when each 503 came, its reasons): the first may name a symptom (a commit waiting, the
        # partitions lost) before the broker probe's own timeout names the cause; both must come soon
        seen: list[tuple[float, list[str]]] = []
        while time.monotonic() < frozen_at + 20:
            status, body = w.readyz()
            if status == 503:
                seen.append((time.monotonic() - frozen_at, body.get("reasons", [])))
            assert w.alive(), w.log_tail()
            time.sleep(0.5)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert seen, "the worker stayed ready while the broker was frozen"
    print(f"not ready {seen[0][0]:.1f} s after the freeze: {seen[0][1]}")
    assert seen[0][0] < 8, seen[0]
    said = [at for at, reasons in seen if any("cannot reach the broker" in r for r in reasons)]
    assert said and said[0] < 8, seen[:12]
    w.wait_ready(timeout=120)
    feed.join(timeout=180)
    assert w.alive(), w.log_tail()
    assert_exactly_once(kio, t, feed)
    lines = [x for x in w.log_text().splitlines() if "retrying" in x]
    assert len(lines) < 100, f"{len(lines)} retry lines: the worker floods the log"


def test_fenced_decision_consumer_is_replaced(kio, kafka_topics, worker_topics, start_worker, tmp_path):
    """A fatal consumer error (here: fenced by a client with the worker's static id) restarts the stage.

    After a broker outage librdkafka can fence a static member by its own re-join (librdkafka#3437);
    the fenced consumer never recovers, so the worker must replace it rather than retry forever.
    """
    from confluent_kafka import Consumer

    t = worker_topics
    kafka_topics([t.input], partitions=PARTITIONS)
    data_dir = tmp_path / "data"
    w = start_worker(t, name="w0", data_dir=data_dir)
    w.wait_ready(timeout=90)
    feed = Feed(kio, t.input, traffic(kio, 300), rate=150)
    feed.start()
    time.sleep(1)
    intruder = Consumer({"bootstrap.servers": kio.bootstrap, "group.id": f"{t.app_id}.decisions",
                         "group.instance.id": (data_dir / "instance-id").read_text().strip(),
                         "enable.auto.commit": False, "session.timeout.ms": 6000, "log_level": 0})
    intruder.subscribe([t.signatures])
    try:
        deadline = time.monotonic() + 30
        while "restarting it" not in w.log_text() and time.monotonic() < deadline:
            intruder.poll(0.2)
    finally:
        intruder.close()
    assert "restarting it" in w.log_text(), w.log_tail()
    assert "fenced" in w.log_text(), w.log_tail()
    w.wait_ready(timeout=90)
    feed.join(timeout=120)
    assert_exactly_once(kio, t, feed)
    assert w.alive(), w.log_tail()
    text = kio.http_get(w.url + "/metrics")[1]
    assert (kio.metric_value(text, "stream_dedup_decision_stage_restarts_total") or 0) >= 1


def test_decision_owner_killed_and_third_worker_joining(kio, kafka_topics, worker_topics, start_worker):
    t = worker_topics
    kafka_topics([t.input], partitions=PARTITIONS)
    workers = [start_worker(t, name=f"w{i}") for i in range(2)]
    for w in workers:
        w.wait_ready(timeout=90)
    feed = Feed(kio, t.input, traffic(kio, 900), rate=75)  # ~29 s: the kill and the join fall inside it
    feed.start()
    time.sleep(3)
    owner = wait_decision_owner(workers)
    survivor = next(w for w in workers if w is not owner)
    owner.signal(signal.SIGKILL)
    owner.wait(timeout=30)
    killed_at = time.monotonic()
    took_over = None
    while time.monotonic() - killed_at < 60:
        body = survivor.readyz()[1]
        if body.get("decision_stage") and body.get("decision_state") == "deciding":
            took_over = time.monotonic() - killed_at
            break
        time.sleep(0.2)
    assert took_over is not None, survivor.log_tail()
    print(f"the survivor decides {took_over:.1f} s after the owner was killed (session timeout 6 s)")
    assert took_over < 6 + 10
    assert feed.is_alive(), "the feed ended before the third worker joined: the join must fall under load"
    third = start_worker(t, name="w-third")  # a rebalance under load
    third.wait_ready(timeout=90)
    feed.join(timeout=180)
    assert_exactly_once(kio, t, feed)


def test_flood_of_bad_records_all_reach_the_dlq(kio, kafka_topics, worker_topics, start_worker, tmp_path):
    """10,000 bad records of 13 kinds among 200 good ones; a 5 MB record becomes a reference."""
    t = worker_topics
    kafka_topics([t.input], partitions=PARTITIONS, config={"max.message.bytes": str(8 * 1024 * 1024)})
    kinds = [b"not json", b"[1, 2]", b'{"text": "no id"}', b'{"id": "", "text": "x"}', b'{"id": null, "text": "x"}',
             b'{"id": "nt"}', b'{"id": "wt", "text": 5}', b'{"id": "u", "text": "\xff\xfe"}', b"\x00\x00\x00",
             b"[" * 5000 + b"]" * 5000, b'{"id": "' + b"i" * 20000 + b'", "text": "huge id"}',
             b'{"id": "c", "text": "ctrl \x01\x02 chars"}', b'{"id": "d", "id": "e", "text": "two ids"}']
    records: list[tuple[bytes, bytes]] = []
    good = kio.synthetic_records(200, variants_per_story=1)
    n_bad = 0
    for i in range(10000):
        records.append((f"b{i}".encode(), kinds[i % len(kinds)]))
        n_bad += 1
        if i % 50 == 0 and good:
            rid, _c, value = good.pop()
            records.append((rid.encode(), value))
    records.append((b"huge", b'{"id": "huge", "text": "' + b"x" * (5 * 1024 * 1024) + b'"}'))
    w = start_worker(t, name="w0")
    w.wait_ready(timeout=90)
    feed = Feed(kio, t.input, records, rate=4000)
    feed.run()
    assert_exactly_once(kio, t, feed)
    assert w.alive(), w.log_tail()
    text = kio.http_get(w.url + "/metrics")[1]
    dead = sum(kio.metric_value(text, "stream_dedup_dead_letters_total", {"reason": r}) or 0 for r in
               REJECT_REASONS)
    assert dead >= n_bad, dead
    from eos_check import read_topic

    huge = [m for m in read_topic(kio.bootstrap, [t.dlq], idle=1.0) if m.key() == b"huge"]
    assert len(huge) == 1
    h = {k: v.decode() for k, v in huge[0].headers()}
    assert h["dlq.truncated"] == "true" and int(h["dlq.original.size"]) > 5 * 1024 * 1024
    assert len(huge[0].value()) == 1024
    # the worker and its stage processes (stage 1 read the 5 MB record, the decision stage wrote its reference)
    import psutil

    proc = psutil.Process(w.proc.pid)
    rss = {p.pid: p.memory_info().rss for p in [proc, *proc.children(recursive=True)]}
    print(f"worker RSS after the flood: {sum(rss.values()) / 2**20:.0f} MiB in {len(rss)} processes, "
          f"largest {max(rss.values()) / 2**20:.0f} MiB")
    assert sum(rss.values()) < 1_500_000_000


_DEAD_OWNER = r"""
import os, sys
from confluent_kafka import Consumer, Producer, TopicPartition
bootstrap, group, txn_id, signatures, out = sys.argv[1:6]
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "transaction.timeout.ms": 60000})
p.init_transactions(30)
p.begin_transaction()
p.produce(out, b'{"never": "committed"}')
p.send_offsets_to_transaction([TopicPartition(signatures, 0, 1)], c.consumer_group_metadata(), 30)
p.flush(10)
print("offsets pending", flush=True)
os._exit(0)  # dies mid-transaction: no commit, no abort
"""


def test_takeover_after_an_owner_died_mid_transaction_is_prompt(kio, kafka_topics, worker_topics, start_worker):
    """An owner that dies after sending its transaction's offsets leaves them pending: a read_committed
    fetch of the committed offset waits until the transaction ends. The next owner's producer must
    fence it (aborting it) before that fetch, or the takeover waits out transaction.timeout.ms (60 s)."""
    from stream_dedup.config import ServiceConfig
    from stream_dedup.service import kafka_config

    t = worker_topics
    kafka_topics([t.input], partitions=PARTITIONS)
    kafka_topics([t.signatures, t.new])
    service = ServiceConfig(bootstrap_servers=kio.bootstrap, app_id=t.app_id, input_topic=t.input,
                            signatures_topic=t.signatures)
    dead = subprocess.run([sys.executable, "-c", _DEAD_OWNER, kio.bootstrap, kafka_config.decisions_group(service),
                           kafka_config.transactional_id(service), t.signatures, t.new],
                          capture_output=True, text=True, timeout=60)
    assert "offsets pending" in dead.stdout, dead.stderr[-2000:]
    started = time.monotonic()
    w = start_worker(t, name="w0")
    w.wait_ready(timeout=90)
    deciding = None
    while time.monotonic() - started < 90:
        if w.readyz()[1].get("decision_state") == "deciding":
            deciding = time.monotonic() - started
            break
        time.sleep(0.2)
    assert deciding is not None, w.log_tail()
    print(f"deciding {deciding:.1f} s after the start, the dead owner's transaction left open")
    assert deciding < 25, w.log_tail()
    feed = Feed(kio, t.input, traffic(kio, 40), rate=200)
    feed.run()
    assert_exactly_once(kio, t, feed)
    # the dead owner's event was aborted: a read_committed reader never sees it
    from eos_check import read_topic

    assert not [m for m in read_topic(kio.bootstrap, [t.new], idle=1.0) if b"never" in (m.value() or b"")]
