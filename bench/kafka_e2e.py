"""End-to-end benchmark of the Kafka worker against the embedded engine.

    .venv/bin/python bench/kafka_e2e.py [--records 2000] [--partitions 3] [--bootstrap HOST:PORT]

1. embedded: ``parse_record`` + ``Deduplicator.process`` over the first N records of the shared
   news stream, in one process (what ``stream-dedup dedup`` does) -> records/s;
2. throughput: one worker process (``python -m stream_dedup.service``) is started, the same N
   records are produced as fast as possible to a fresh P-partition topic, and the run lasts
   until every record has its output event -> articles/s = N / (last output event's Kafka
   timestamp - first input record's timestamp); produce->output latency per record = output
   event timestamp - input record timestamp (both CreateTime on this machine);
3. latency at half rate: the next records of the stream are produced by a rate-limited
   producer at half the measured worker rate; p50/p99/max latency;
4. decision stage alone: the N records' signature records are computed here and written
   straight to the signatures topic of a fresh worker, whose input topic stays empty -> the
   articles/s of stage 2 by itself, i.e. the ceiling of the whole service however many
   workers run stage 1 (rate = N / spread of the output events' timestamps).

Figures only (no asserts).  Uses ``$KAFKA_BOOTSTRAP_SERVERS`` or starts the test broker with
``scripts/kafka.sh start`` (and stops it afterwards).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "news_stream.jsonl"


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))
    return s[k]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_broker(bootstrap: str | None) -> tuple[str, bool]:
    if bootstrap:
        return bootstrap, False
    proc = subprocess.run(["bash", str(REPO / "scripts" / "kafka.sh"), "status"], capture_output=True, text=True)
    running = proc.returncode == 0
    proc = subprocess.run(["bash", str(REPO / "scripts" / "kafka.sh"), "start"], capture_output=True, text=True)
    line = [x for x in proc.stdout.splitlines() if x.startswith("KAFKA_BOOTSTRAP_SERVERS=")]
    if proc.returncode != 0 or not line:
        sys.exit(f"cannot start Kafka:\n{proc.stderr[-3000:]}")
    return line[0].split("=", 1)[1].strip(), not running


def embedded_rate(lines: list[bytes]) -> tuple[float, float]:
    """records/s of parse + Deduplicator.process, and the mean engine ms per record."""
    from stream_dedup.config import EngineConfig
    from stream_dedup.engine import Deduplicator
    from stream_dedup.record import RecordError, parse_record

    cfg = EngineConfig()
    tmp = tempfile.mkdtemp(prefix="bench-embedded-")
    try:
        with Deduplicator(cfg, Path(tmp) / "warm") as warm:  # load the compiled kernels outside the timing
            warm.process(parse_record(lines[0], cfg))
        with Deduplicator(cfg, Path(tmp) / "index") as d:
            t0 = time.perf_counter()
            for line in lines:
                try:
                    d.process(parse_record(line, cfg))
                except RecordError:
                    pass
            dt = time.perf_counter() - t0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return len(lines) / dt, dt / len(lines) * 1000


class Worker:
    def __init__(self, bootstrap: str, prefix: str, data_dir: str, extra: list[str]) -> None:
        self.port = free_port()
        self.log = open(Path(data_dir) / "worker.log", "wb")  # noqa: SIM115
        cmd = [sys.executable, "-m", "stream_dedup.service", "--bootstrap-servers", bootstrap,
               "--app-id", prefix, "--input-topic", f"{prefix}.articles", "--new-topic", f"{prefix}.new",
               "--duplicates-topic", f"{prefix}.dup", "--dlq-topic", f"{prefix}.dlq",
               "--signatures-topic", f"{prefix}.sig", "--data-dir", data_dir, "--metrics-host", "127.0.0.1",
               "--metrics-port", str(self.port), "--log-level", "WARNING", *extra]
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"worker exited with {self.proc.returncode}; see {self.log.name}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        sys.exit("worker not ready")

    def cpu_seconds(self) -> float:
        try:
            import psutil

            proc = psutil.Process(self.proc.pid)  # the worker and its children (fingerprint, decision stage)
            return sum(t.user + t.system for t in (p.cpu_times() for p in [proc, *proc.children(recursive=True)]))
        except Exception:  # noqa: BLE001
            return float("nan")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def produce(bootstrap: str, topic: str, lines: list[bytes], rate: float | None = None) -> dict[str, int]:
    """Produce lines (key = id); return {id: produce timestamp ms}. Rate-limited if ``rate``."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0 if rate else 5, "acks": "all",
                  "message.max.bytes": 10_000_000})
    sent: dict[str, int] = {}
    t0 = time.perf_counter()
    for i, line in enumerate(lines):
        if rate:
            due = t0 + i / rate
            while (now := time.perf_counter()) < due:
                p.poll(min(0.005, due - now))
        aid = json.loads(line)["id"]
        ts = int(time.time() * 1000)
        while True:
            try:
                p.produce(topic, key=aid.encode(), value=line, timestamp=ts)
                break
            except BufferError:
                p.poll(0.05)
        sent[aid] = ts
        p.poll(0)
    p.flush(60)
    return sent


def collect(bootstrap: str, topics: list[str], want: set[str], timeout: float) -> dict[str, int]:
    """Consume output events until every id in ``want`` is seen; return {id: first event ts ms}."""
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(topics)
    got: dict[str, int] = {}
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and not want <= got.keys():
            for m in c.consume(1000, timeout=0.5):
                if m.error() is None:
                    got.setdefault(m.key().decode(), m.timestamp()[1])
    finally:
        c.close()
    return got


def _cleanup(admin, prefix: str, data_dir: str) -> None:
    """Delete a run's topics and the worker's data dir (best effort)."""
    for fut in admin.delete_topics([f"{prefix}.{s}" for s in ("articles", "new", "dup", "dlq", "sig")],
                                   operation_timeout=30).values():
        try:
            fut.result(30)
        except Exception:  # noqa: BLE001
            pass
    shutil.rmtree(data_dir, ignore_errors=True)


def decision_stage_rate(bootstrap: str, admin, lines: list[bytes], extra: list[str]) -> float:
    from confluent_kafka import Producer
    from confluent_kafka.admin import NewTopic

    from stream_dedup.config import EngineConfig
    from stream_dedup.service import stage1

    stage1.init(EngineConfig())
    results = stage1.compute([(line, "bench", 0, i, int(time.time() * 1000)) for i, line in enumerate(lines)])
    sigs = [(aid, value) for kind, aid, value in results if kind == "sig"]
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    for fut in admin.create_topics([NewTopic(f"{prefix}.articles", 1, 1), NewTopic(f"{prefix}.sig", 1, 1)]).values():
        fut.result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for aid, value in sigs:
        p.produce(f"{prefix}.sig", key=aid.encode(), value=value, partition=0)
        p.poll(0)
    p.flush(60)
    data_dir = tempfile.mkdtemp(prefix="bench-decide-")
    worker = Worker(bootstrap, prefix, data_dir, extra)
    try:
        worker.wait_ready()
        got = collect(bootstrap, [f"{prefix}.new", f"{prefix}.dup"], {a for a, _ in sigs}, timeout=600)
    finally:
        worker.stop()
        _cleanup(admin, prefix, data_dir)
    ts = sorted(got.values())
    return (len(ts) - 1) / max(1e-3, (ts[-1] - ts[0]) / 1000)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--latency-records", type=int, default=0,
                    help="records of the half-rate run (default: 20 s worth, within what the stream has left)")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--worker-arg", action="append", default=[], help="extra worker flag (repeatable)")
    ap.add_argument("--skip-decision-stage", action="store_true", help="skip measurement 4")
    ap.add_argument("--latency-trace", type=Path,
                    help="write the half-rate run's records as CSV: id, produce ms, output event ms, latency ms")
    args = ap.parse_args()
    decide_rate = float("nan")

    if not args.data.exists():
        sys.exit(f"{args.data} not found (the shared news stream)")
    all_lines = [ln.rstrip(b"\n") for ln in args.data.open("rb") if ln.strip()]
    lines = all_lines[:args.records]
    n = len(lines)

    print(f"embedded engine: parse + Deduplicator.process over {n} records ...", flush=True)
    emb_rate, emb_ms = embedded_rate(lines)

    bootstrap, started = ensure_broker(args.bootstrap)
    from confluent_kafka.admin import AdminClient, NewTopic

    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(f"{prefix}.articles", num_partitions=args.partitions,
                                  replication_factor=1)])[f"{prefix}.articles"].result(30)
    data_dir = tempfile.mkdtemp(prefix="bench-worker-")
    worker = Worker(bootstrap, prefix, data_dir, args.worker_arg)
    out_topics = [f"{prefix}.new", f"{prefix}.dup"]
    try:
        worker.wait_ready()
        print(f"worker ready; producing {n} records to {args.partitions} partitions ...", flush=True)
        cpu0 = worker.cpu_seconds()
        sent = produce(bootstrap, f"{prefix}.articles", lines)
        got = collect(bootstrap, out_topics, set(sent), timeout=600)
        cpu = worker.cpu_seconds() - cpu0
        missing = set(sent) - got.keys()
        first_in = min(sent.values())
        last_out = max(got[k] for k in sent if k in got)
        wall = (last_out - first_in) / 1000
        worker_rate = len(got.keys() & sent.keys()) / wall
        lat_full = [(got[k] - sent[k]) / 1000 for k in sent if k in got]

        rate = worker_rate / 2
        rest = all_lines[args.records:]
        m = args.latency_records or int(rate * 20)
        m = max(1, min(m, len(rest)))
        print(f"latency run: {m} more records at {rate:.0f}/s (half the measured rate) ...", flush=True)
        sent2 = produce(bootstrap, f"{prefix}.articles", rest[:m], rate=rate)
        got2 = collect(bootstrap, out_topics, set(sent2), timeout=600)
        lat = [(got2[k] - sent2[k]) / 1000 for k in sent2 if k in got2]
        if args.latency_trace:
            with args.latency_trace.open("w") as f:
                f.write("id,produced_ms,output_ms,latency_ms\n")
                for k in sorted(sent2, key=sent2.get):
                    out = got2.get(k)
                    f.write(f"{k},{sent2[k]},{'' if out is None else out},{'' if out is None else out - sent2[k]}\n")
        missing2 = set(sent2) - got2.keys()
        if not args.skip_decision_stage:
            print("decision stage alone: signatures written directly, fresh worker ...", flush=True)
            decide_rate = decision_stage_rate(bootstrap, admin, lines, args.worker_arg)
    finally:
        worker.stop()
        _cleanup(admin, prefix, data_dir)
        if started:
            subprocess.run(["bash", str(REPO / "scripts" / "kafka.sh"), "stop"], capture_output=True)

    ratio = worker_rate / emb_rate
    print()
    print(f"{'measure':<46} {'value':>12}")
    print("-" * 59)
    print(f"{'embedded engine (parse+process), records/s':<46} {emb_rate:>12.0f}")
    print(f"{'embedded engine, ms/record':<46} {emb_ms:>12.2f}")
    print(f"{f'worker, 1 process, {args.partitions} partitions, articles/s':<46} {worker_rate:>12.0f}")
    print(f"{'worker / embedded':<46} {ratio:>11.0%}")
    print(f"{'worker CPU seconds per article (ms)':<46} {cpu / n * 1000:>12.2f}")
    print(f"{'backlog run latency p50 / p99 (s)':<46} {percentile(lat_full, 50):>5.2f} / {percentile(lat_full, 99):.2f}")
    print(f"{f'half rate ({rate:.0f}/s) latency p50 (ms)':<46} {percentile(lat, 50) * 1000:>12.1f}")
    print(f"{f'half rate ({rate:.0f}/s) latency p99 (ms)':<46} {percentile(lat, 99) * 1000:>12.1f}")
    print(f"{f'half rate ({rate:.0f}/s) latency max (ms)':<46} {max(lat) * 1000 if lat else float('nan'):>12.1f}")
    print(f"{'decision stage alone (stage 2), articles/s':<46} {decide_rate:>12.0f}")
    print(f"{'records without output event':<46} {len(missing) + len(missing2):>12d}")
    print()
    print(f"targets (issue 3): worker >= 60% of embedded: {'met' if ratio >= 0.6 else 'NOT met'} ({ratio:.0%}); "
          f"p99 < 100 ms at half rate: {'met' if percentile(lat, 99) < 0.1 else 'NOT met'} "
          f"({percentile(lat, 99) * 1000:.1f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
