"""Chaos run of the Kafka worker: SIGKILL cycles (and optional broker freezes) under load.

    .venv/bin/python bench/chaos.py [--cycles 20] [--rate 300] [--partitions 3] [--freeze-seconds 0]
                                    [--workers 1] [--keep-log]

The whole shared news stream is produced round-robin to a fresh P-partition topic at ``--rate``
records/s (bad records mixed in every 50th), while one worker on one data dir is SIGKILLed at
random moments and restarted, ``--cycles`` times; with ``--freeze-seconds S`` every fifth cycle
freezes the broker (SIGSTOP) for S seconds instead.  With ``--workers N`` (N >= 2), N workers run,
each on its own data dir, and each kill is of the worker whose decision stage decides at that
moment (the failover case): the recovery time is then until another worker (or the restarted
one) decides, and the killed worker is restarted on its data dir; with ``--down-seconds S`` it is
restarted only once another worker decides and S seconds have passed (longer than
``--session-timeout``: the takeover by a warm standby, every cycle).  Then the committed outputs are read with
``read_committed`` and checked by ``tests/integration/eos_check.py``: lost, doubled and
contradictory outputs per input record.  Also printed: how long each restart took to become
ready again, and the quality of the worker's decisions (first event per article, scored like
``bench/quality.py``) against the embedded engine in file order, and how many records stage 1's
merge released early (``stream_dedup_order_released_early_records_total``) after each fault.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests" / "integration"))

from eos_check import check, read_topic  # noqa: E402
from kafka_e2e import Worker, _cleanup, ensure_broker  # noqa: E402
from quality import score  # noqa: E402

from stream_dedup.config import EngineConfig  # noqa: E402

DATA = REPO.parent / "shared" / "data"
EARLY = "stream_dedup_order_released_early_records_total"


def f1(s: dict) -> float:
    p, r = s["precision"], s["recall"]
    return 2 * p * r / (p + r) if p + r else 0.0


def record_index(partition: int, offset: int, partitions: int) -> int:
    """The produce-order index of input record (partition, offset): records go round-robin, so
    record i is at partition i % partitions, offset i // partitions."""
    return offset * partitions + partition


def decision_order(bootstrap: str, topic: str, partitions: int) -> list[int]:
    """Indexes (in produce order) of the input records, in the order the decision stage received
    their signatures (first copy only): the signatures topic has one partition, so its order is
    the order of decisions (:func:`record_index`)."""
    from stream_dedup.service.serialization import SignatureDecodeError, decode_stage_record

    order, seen = [], set()
    for m in read_topic(bootstrap, [topic], idle=2.0):
        try:
            rec = decode_stage_record(m.value())
        except SignatureDecodeError:
            continue
        i = record_index(rec.source_partition, rec.source_offset, partitions)
        if i not in seen:
            seen.add(i)
            order.append(i)
    return order


def late_records(order: list[int]) -> tuple[int, int]:
    """(records decided after a record produced later than them, the largest such gap in records)."""
    late = gap = 0
    high = -1
    for i in order:
        if i < high:
            late += 1
            gap = max(gap, high - i)
        high = max(high, i)
    return late, gap


def embedded_decisions(lines: list[bytes]) -> dict[str, dict]:
    from stream_dedup.engine import Deduplicator
    from stream_dedup.record import RecordError, parse_record

    cfg = EngineConfig()
    out = {}
    with tempfile.TemporaryDirectory() as d, Deduplicator(cfg, d) as dedup:
        for line in lines:
            try:
                art = parse_record(line, cfg)
            except RecordError:
                continue
            out[art.id] = dedup.process(art).to_event()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--rate", type=float, default=300.0)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--freeze-seconds", type=float, default=0.0)
    ap.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--keep-log", action="store_true", help="copy each worker's log to the temp dir at the end")
    ap.add_argument("--workers", type=int, default=1,
                    help="workers in the group; with 2 or more, each kill is of the decision-stage owner")
    ap.add_argument("--down-seconds", type=float, default=0.0,
                    help="with 2 or more workers: restart a killed owner only once another worker decides and "
                         "this long has passed since the kill (the takeover path: make it exceed the session "
                         "timeout); 0 = restart at once (it then usually gets the decision stage back)")
    ap.add_argument("--session-timeout", type=float, default=0.0,
                    help="the workers' --session-timeout (0 = the worker's default)")
    args = ap.parse_args()

    lines = [ln.rstrip(b"\n") for ln in (args.data / "news_stream.jsonl").open("rb") if ln.strip()]
    truth = [json.loads(x) for x in (args.data / "news_stream.truth.jsonl").open() if x.strip()]
    records = []
    for i, line in enumerate(lines):
        records.append((json.loads(line)["id"].encode(), line))
        if i % 50 == 0:
            records.append((f"bad-{i}".encode(), b"not json {"))
    duration = len(records) / args.rate
    print(f"{len(records)} records at {args.rate:.0f}/s (~{duration:.0f} s), {args.cycles} fault cycles", flush=True)

    bootstrap, started = ensure_broker(args.bootstrap)
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    prefix = f"chaos-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(f"{prefix}.articles", args.partitions, 1)])[f"{prefix}.articles"].result(30)
    data_dir = tempfile.mkdtemp(prefix="chaos-")
    positions: list[tuple[int, int]] = []
    done = threading.Event()

    feed_start: list[float] = []
    acked: dict[int, float] = {}  # record index -> when the broker acknowledged it (perf_counter)
    faults: list[tuple[float, str]] = []  # (perf_counter time, "kill" or "freeze")

    def feed() -> None:
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "enable.idempotence": True})
        t0 = time.perf_counter()
        feed_start.append(t0)

        def report(err, msg) -> None:
            if err is None:
                positions.append((msg.partition(), msg.offset()))
                acked[record_index(msg.partition(), msg.offset(), args.partitions)] = time.perf_counter()

        for i, (key, value) in enumerate(records):
            while time.perf_counter() < t0 + i / args.rate:
                p.poll(0.002)
            p.produce(f"{prefix}.articles", value, key, partition=i % args.partitions, on_delivery=report)
            p.poll(0)
        p.flush(60)
        done.set()

    rnd = random.Random(args.seed)
    recoveries: list[float] = []
    broker_pid = None
    run_dir = Path(os.environ.get("KAFKA_RUN_DIR", "/tmp/stream-dedup-kafka"))
    if args.freeze_seconds and (run_dir / "kafka.pid").exists():
        broker_pid = int((run_dir / "kafka.pid").read_text().strip())
    dirs = [data_dir] if args.workers <= 1 else [tempfile.mkdtemp(prefix=f"w{i}-", dir=data_dir)
                                                 for i in range(args.workers)]
    extra = ["--session-timeout", f"{args.session_timeout:g}"] if args.session_timeout else []
    workers = [Worker(bootstrap, prefix, d, extra) for d in dirs]
    worker = workers[0]
    freezes = 0

    def deciding() -> int | None:
        """The index of the worker whose decision stage decides now, if exactly one does."""
        owners = [i for i, w in enumerate(workers) if w.readyz().get("decision_state") == "deciding"]
        return owners[0] if len(owners) == 1 else None

    # records stage 1's merge let go when its wait ran out, by the fault they follow (each worker's
    # counter starts at 0 in each process: read before a kill, and at every fault for the others)
    early_seen = [0.0] * len(workers)
    early: dict[str, float] = {}

    def close_early_bucket(since: str) -> None:
        for i, w in enumerate(workers):
            now = w.metric_sums(EARLY)[EARLY]
            if now == now:  # not NaN: the worker answered
                early[since] = early.get(since, 0.0) + max(0.0, now - early_seen[i])
                early_seen[i] = now

    bucket = "start"
    try:
        for w in workers:
            w.wait_ready()
        threading.Thread(target=feed, daemon=True).start()
        gap = duration / (args.cycles + 1)
        for cycle in range(args.cycles):
            time.sleep(rnd.uniform(0.5, 1.5) * gap)
            close_early_bucket(bucket)
            if broker_pid and cycle % 5 == 4:
                bucket = f"freeze {cycle + 1}"
                faults.append((time.perf_counter(), "freeze"))
                os.kill(broker_pid, signal.SIGSTOP)
                time.sleep(args.freeze_seconds)
                os.kill(broker_pid, signal.SIGCONT)
                freezes += 1
                t0 = time.monotonic()
                for w in workers:
                    worker = w
                    w.wait_ready(timeout=300)
                recoveries.append(time.monotonic() - t0)
                print(f"  cycle {cycle + 1}: broker frozen {args.freeze_seconds:.0f} s; ready again "
                      f"{recoveries[-1]:.1f} s after it resumed", flush=True)
                continue
            victim = 0
            if len(workers) > 1:  # the decision-stage owner
                deadline = time.monotonic() + 60
                while (owner := deciding()) is None and time.monotonic() < deadline:
                    time.sleep(0.2)
                victim = owner if owner is not None else 0
            bucket = f"kill {cycle + 1}"
            faults.append((time.perf_counter(), "kill"))
            worker = workers[victim]
            worker.proc.send_signal(signal.SIGKILL)
            worker.proc.wait(30)
            worker.log.close()
            t0 = time.monotonic()
            down = len(workers) > 1 and args.down_seconds > 0  # another worker must take over first
            if down:
                while deciding() in (None, victim) and time.monotonic() - t0 < 300:
                    time.sleep(0.1)
                recoveries.append(time.monotonic() - t0)
                print(f"  cycle {cycle + 1}: worker {victim} (the owner) killed; worker {deciding()} decides "
                      f"after {recoveries[-1]:.1f} s", flush=True)
                time.sleep(max(0.0, args.down_seconds - (time.monotonic() - t0)))
            worker = workers[victim] = Worker(bootstrap, prefix, dirs[victim], extra)
            early_seen[victim] = 0.0
            if down:
                continue
            if len(workers) > 1:
                while deciding() is None and time.monotonic() - t0 < 300:
                    time.sleep(0.1)
                recoveries.append(time.monotonic() - t0)
                worker.wait_ready(timeout=300)
                print(f"  cycle {cycle + 1}: worker {victim} (the owner) killed; another decides after "
                      f"{recoveries[-1]:.1f} s", flush=True)
            else:
                worker.wait_ready(timeout=300)
                recoveries.append(time.monotonic() - t0)
                print(f"  cycle {cycle + 1}: ready again after {recoveries[-1]:.1f} s", flush=True)
        done.wait(duration * 3 + 120)
        report = check(bootstrap, f"{prefix}.new", f"{prefix}.dup", f"{prefix}.dlq", f"{prefix}.sig", positions,
                       EngineConfig(), timeout=600)
        first: dict[str, dict] = {}
        for m in read_topic(bootstrap, [f"{prefix}.new", f"{prefix}.dup"], idle=2.0):
            first.setdefault(m.key().decode(), json.loads(m.value()))
        order = decision_order(bootstrap, f"{prefix}.sig", args.partitions)
        close_early_bucket(bucket)
    except SystemExit:
        print(f"the worker did not become ready again; the last lines of {worker.log.name}:")
        print("\n".join(Path(worker.log.name).read_text(errors="replace").splitlines()[-40:]))
        kept = Path(tempfile.gettempdir()) / f"{prefix}-worker.log"
        shutil.copy(worker.log.name, kept)  # the data dir is removed below
        print(f"the whole log: {kept}")
        raise
    finally:
        for w in workers:
            w.stop()
        if args.keep_log:
            for i, w in enumerate(workers):
                kept = Path(tempfile.gettempdir()) / f"{prefix}-worker{i}.log"
                shutil.copy(w.log.name, kept)
                print(f"worker {i}'s log (every restart): {kept}")
        _cleanup(admin, prefix, data_dir)
        if started:
            import subprocess

            subprocess.run(["bash", str(REPO / "scripts" / "kafka.sh"), "stop"], capture_output=True)

    embedded = score([], truth, embedded_decisions(lines))
    served = score([], truth, first)
    # the embedded engine on the worker's decision order: what the order alone costs
    replayed = score([], truth, embedded_decisions([records[i][1] for i in order if i < len(records)]))
    late, gap = late_records(order)
    print()
    print("| measure | value |")
    print("| --- | --- |")
    for name, value in report.row().items():
        print(f"| {name} | {value:,} |")
    print(f"| workers | {len(workers)} |")
    print(f"| SIGKILL cycles / broker freezes | {args.cycles - freezes} / {freezes} |")
    if recoveries:
        what = "until another decides" if len(workers) > 1 else "until ready"
        print(f"| recovery s ({what}): median / max | {statistics.median(recoveries):.1f} / "
              f"{max(recoveries):.1f} |")
    print(f"| worker F1 (first event per article) | {f1(served):.4f} (P {served['precision']:.4f}, "
          f"R {served['recall']:.4f}) |")
    print(f"| embedded F1 (file order) | {f1(embedded):.4f} |")
    print(f"| embedded F1 (the worker's decision order) | {f1(replayed):.4f} |")
    print(f"| records decided after a later-produced one / largest gap (records) | {late:,} / {gap:,} |")
    if late and feed_start:
        # which fault each late record follows (record i was produced at feed start + i / rate)
        by_fault: dict[str, int] = {}
        high = -1
        arrived_late = 0  # late records the broker acknowledged after the record they came after
        for i in order:
            if i < high:
                at = feed_start[0] + i / args.rate
                before = [f"{kind} {n + 1}" for n, (t, kind) in enumerate(faults) if t <= at + 5.0]
                key = before[-1] if before else "before any fault"
                by_fault[key] = by_fault.get(key, 0) + 1
                arrived_late += acked.get(i, 0.0) > acked.get(high, float("inf"))
            high = max(high, i)
        print("  late records by the fault they follow (within 5 s):",
              ", ".join(f"{k}: {v}" for k, v in by_fault.items()))
        print(f"  of them acknowledged by the broker after the later-produced record they follow "
              f"(the input reached Kafka out of order): {arrived_late:,}")
    print("  records stage 1's merge released early (its --order-wait ran out), by the fault they follow:",
          ", ".join(f"{k}: {v:.0f}" for k, v in early.items() if v) or "none")
    for example in report.examples[:10]:
        print("  ", example)
    return 0 if (report.lost, report.doubled, report.contradictory) == (0, 0, 0) else 1


if __name__ == "__main__":
    sys.exit(main())
