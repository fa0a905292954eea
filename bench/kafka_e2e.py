"""End-to-end benchmark of the Kafka worker against the embedded engine (issue 11's targets).

    .venv/bin/python bench/kafka_e2e.py [--records 7431] [--partitions 3] [--bootstrap HOST:PORT]

1. embedded: ``parse_record`` + ``Deduplicator.process`` over the first N records of the shared
   news stream (default: all 7,431), in one process (what ``stream-dedup dedup`` does) -> records/s;
2. throughput: one worker process (``python -m stream_dedup.service``) is started, the same N
   records are produced as fast as possible to a fresh P-partition topic, and the run lasts
   until every record's output event has been *received* by a ``read_committed`` reader running
   beside the producer -> articles/s = N / (last event received - first record produced);
3. latency at half rate (or ``--latency-rate``): another round of the stream (every word suffixed, so it matches nothing
   of round 1 and costs the same) is produced at half the measured worker rate for ~20 s, by a
   producer with the client libraries' default ``linger.ms`` of 5 (``--producer-linger-ms``);
   latency = the reader's receive time - the time the record was handed to the producer (both
   on this machine's clock, so it includes the producer's linger and the transaction commit: an
   event is visible only once committed); ``--latency-runs K`` makes K such runs, one after the
   other, and reports the median run's p50 and p99 (and each run's), after ``--latency-warmup``
   (default 1) runs that are printed but not counted: a broker started by this bench is a cold
   JVM whose JIT compiling shares the cores (measured, the first run after a broker start:
   p50 / p99 205-350 / 666-1,178 ms, against 37-61 / 151-229 ms once the broker had run a while);
4. decision stage alone: signature records of R rounds of the stream (default 3, ~22k) are
   computed here and written straight to the signatures topic of a fresh worker whose input
   topic stays empty -> stage 2's articles/s, against ``Deduplicator.decide_batch`` on the same
   signatures in this process, 256 at a time (the engine's decide rate; ``decide`` one at a time
   before 2026-11-27 10:20 UTC, which the batches' compiled decisions outran).

Also printed: the worker's CPU ms per article and peak RSS (its process and children), and
during the latency run the CPU of each process that shares the machine's cores (the worker's
three, the broker when it runs here, this benchmark), in % of one core.
Figures only (no asserts).  Uses ``$KAFKA_BOOTSTRAP_SERVERS`` or starts the test broker with
``scripts/kafka.sh start`` (and stops it afterwards).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TX_METRICS = ('stream_dedup_transaction_commit_seconds_sum', 'stream_dedup_transaction_commit_seconds_count', 'stream_dedup_transaction_records_sum')
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
        self.log = open(Path(data_dir) / "worker.log", "ab")  # noqa: SIM115 (a restart's log follows the last)
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

    def readyz(self) -> dict:
        """The body of ``/readyz`` (an empty dict when the worker does not answer)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=2) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as exc:
            return json.loads(exc.read() or b"{}")
        except (OSError, ValueError):
            return {}

    def metric_sums(self, *names: str) -> dict[str, float]:
        """``{name: value}`` of samples named exactly ``names`` on the worker's /metrics, summed over their
        labels (0 when absent)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
                text = r.read().decode()
        except OSError:
            return dict.fromkeys(names, float("nan"))
        out = dict.fromkeys(names, 0.0)
        for line in text.splitlines():
            sample, _, value = line.rpartition(" ")
            name = sample.split("{", 1)[0]
            if name in out and not line.startswith("#"):
                out[name] += float(value)
        return out

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


ROUND_DIGITS = 3  # rounds 1-999 suffix the same number of characters (as bench/scale.py's)


def round_variant(line: bytes, r: int) -> bytes:
    """Round ``r`` of a record: every word of its text/html/title suffixed with ``r`` and ``r`` in
    three digits, the id too (r = 0: unchanged). Every round's records are as long as every
    other's: a suffix that grew with ``r`` (``r1`` ... ``r81`` in a 600,000-record run) made later
    rounds' records longer, so more work per article, in a run whose point is that only the
    index grows."""
    if r == 0:
        return line
    if not 0 < r < 10 ** ROUND_DIGITS:
        raise ValueError(f"round {r}: only 1-{10 ** ROUND_DIGITS - 1} have a suffix of {ROUND_DIGITS} digits")
    obj = json.loads(line)
    suffix = f"r{r:0{ROUND_DIGITS}d}"

    def words(text: str) -> str:
        return re.sub(r"(\w+)", lambda m: m.group(1) + suffix, text)

    for key in ("text", "title"):
        if isinstance(obj.get(key), str):
            obj[key] = words(obj[key])
    if isinstance(obj.get("html"), str):  # words between tags only
        obj["html"] = "".join(part if part.startswith("<") else words(part)
                              for part in re.split(r"(<[^>]*>)", obj["html"]))
    obj["id"] = f"{obj['id']}~{suffix}"
    return json.dumps(obj).encode()


def produce(bootstrap: str, topic: str, lines: list[bytes], rate: float | None = None,
            linger_ms: float = 5.0) -> dict[str, int]:
    """Produce lines (key = id); return {id: produce time ms}. Rate-limited if ``rate``.

    The produce time is taken when the record is handed to the client, so a record's latency
    includes the time it lingers in the client (up to ``linger_ms``).
    """
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": linger_ms, "acks": "all",
                  "message.max.bytes": 10_000_000})
    sent: dict[str, int] = {}
    ids = [json.loads(line)["id"] for line in lines]  # parsed up front: the producer's CPU is the machine's
    t0 = time.perf_counter()
    for i, (aid, line) in enumerate(zip(ids, lines, strict=True)):
        if rate:
            # sleep, not poll(timeout): librdkafka rounds a timeout to whole milliseconds, so
            # at 1 ms or less between records poll() returned at once and the loop spun a core
            # (measured: 105 % of a core at 1,000/s, taken from the worker on a 2-core machine)
            due = t0 + i / rate
            if (gap := due - time.perf_counter()) > 0:
                time.sleep(gap)
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


class Reader(threading.Thread):
    """A read_committed reader of the output topics, running beside the producer: {id: receive time ms}."""

    def __init__(self, bootstrap: str, topics: list[str], isolation: str = "read_committed") -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Consumer

        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                  "isolation.level": isolation,
                                  # a parked fetch returns as soon as records (or, read_committed, a
                                  # commit marker) arrive: a short wait only makes the broker answer
                                  # empty fetches, on the cores the worker needs (5 ms: 200 a second)
                                  "fetch.wait.max.ms": 100})
        self.consumer.subscribe(topics)
        self.got: dict[str, int] = {}
        self.created: dict[str, int] = {}  # the record's CreateTime: when its producer produced it
        self.stopped = threading.Event()

    def run(self) -> None:
        try:
            while not self.stopped.is_set():
                # consume(n, timeout) waits for n records or the whole timeout: that would add up
                # to the timeout to each latency, so wait for one record, then take what came too
                first = self.consumer.poll(0.05)
                if first is None:
                    continue
                for m in [first, *self.consumer.consume(1000, timeout=0)]:
                    if m.error() is None:
                        key = m.key().decode()
                        self.got.setdefault(key, int(time.time() * 1000))
                        self.created.setdefault(key, m.timestamp()[1])
        finally:
            self.consumer.close()

    def wait_for(self, want: set[str], timeout: float) -> dict[str, int]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not want <= self.got.keys():
            time.sleep(0.05)
        return {k: v for k, v in self.got.items() if k in want}


def collect(bootstrap: str, topics: list[str], want: set[str], timeout: float) -> dict[str, int]:
    """Consume output events until every id in ``want`` is seen; return {id: event CreateTime ms}."""
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
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


def _mean_commit(tx: dict[str, float]) -> str:
    n = tx[TX_METRICS[1]]
    return f"{tx[TX_METRICS[0]] / n * 1000:.1f} / {tx[TX_METRICS[2]] / n:.1f}" if n else "n/a"


def breakdown(produced: dict[str, int], signed: dict[str, int], created: dict[str, int],
              received: dict[str, int]) -> dict[str, list[float]]:
    """Where the latency goes, per record, from the records' own timestamps (ms; one clock):

    stage 1 = signature produced - input produced (Faust fetch, fingerprint, merge, send);
    stage 2 = event produced - signature produced (signature fetch, decide, transaction batching);
    commit  = event received by the read_committed reader - event produced (commit, fetch).
    """
    out: dict[str, list[float]] = {"stage 1 (input -> signature)": [], "stage 2 (signature -> event)": [],
                                   "commit + read (event -> received)": []}
    for k, t0 in produced.items():
        if k in signed and k in created and k in received:
            for name, v in zip(out, (signed[k] - t0, created[k] - signed[k], received[k] - created[k]),
                               strict=True):
                out[name].append(float(v))
    return out


def _cleanup(admin, prefix: str, data_dir: str) -> None:
    """Delete a run's topics and the worker's data dir (best effort)."""
    for fut in admin.delete_topics([f"{prefix}.{s}" for s in ("articles", "new", "dup", "dlq", "sig")],
                                   operation_timeout=30).values():
        try:
            fut.result(30)
        except Exception:  # noqa: BLE001
            pass
    shutil.rmtree(data_dir, ignore_errors=True)


DECIDE_BATCH = 256  # the engine's reference decides in batches of this many (as `dedup` does)


def decide_rate_in_process(sigs: list[bytes]) -> float:
    """``Deduplicator.decide_batch`` on the signature records, :data:`DECIDE_BATCH` at a time (the
    engine's batched path, as the ``dedup`` command and the decision stage decide), in this
    process: the engine's decide rate."""
    from stream_dedup.config import EngineConfig
    from stream_dedup.engine import Deduplicator
    from stream_dedup.fingerprint import Fingerprint
    from stream_dedup.service.serialization import SignatureRecord

    tmp = tempfile.mkdtemp(prefix="bench-decide-")
    try:
        recs = [SignatureRecord.decode(v) for v in sigs]
        with Deduplicator(EngineConfig(), Path(tmp) / "warm") as warm:
            warm.decide(recs[0].article_id, Fingerprint.from_bytes(recs[0].fingerprint))
        with Deduplicator(EngineConfig(), Path(tmp) / "index") as d:
            t0 = time.perf_counter()
            for i in range(0, len(recs), DECIDE_BATCH):
                batch = recs[i:i + DECIDE_BATCH]
                d.decide_batch([r.article_id for r in batch], [Fingerprint.from_bytes(r.fingerprint) for r in batch],
                               now=[r.timestamp_ms / 1000.0 for r in batch])
            return len(recs) / (time.perf_counter() - t0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def signature_records(lines: list[bytes]) -> list[tuple[str, bytes]]:
    from stream_dedup.config import EngineConfig
    from stream_dedup.service import stage1

    stage1.init(EngineConfig())
    now = int(time.time() * 1000)
    results = stage1.compute([(line, "bench", 0, i, now) for i, line in enumerate(lines)])
    return [(aid, value) for kind, aid, value in results if kind == "sig"]


def decision_stage_rate(bootstrap: str, admin, sigs: list[tuple[str, bytes]], extra: list[str]) -> float:
    from confluent_kafka import Producer
    from confluent_kafka.admin import NewTopic

    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    for fut in admin.create_topics([NewTopic(f"{prefix}.articles", 1, 1), NewTopic(f"{prefix}.sig", 1, 1)]).values():
        fut.result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for aid, value in sigs:
        while True:
            try:
                p.produce(f"{prefix}.sig", key=aid.encode(), value=value, partition=0)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    p.flush(60)
    data_dir = tempfile.mkdtemp(prefix="bench-decide-")
    worker = Worker(bootstrap, prefix, data_dir, extra)
    try:
        worker.wait_ready()
        got = collect(bootstrap, [f"{prefix}.new", f"{prefix}.dup"], {a for a, _ in sigs}, timeout=900)
    finally:
        worker.stop()
        _cleanup(admin, prefix, data_dir)
    ts = sorted(got.values())
    return (len(ts) - 1) / max(1e-3, (ts[-1] - ts[0]) / 1000)


def cpu_by_process(worker_pid: int) -> dict[str, float]:
    """CPU seconds so far of each process on the latency path, by role (what shares the cores).

    The worker's children are told apart by the name of their main thread (``sd-decisions``,
    ``sd-stage1-N``; :func:`stream_dedup.service.stage_process.thread_name`); with
    ``--stage1-client faust`` a child without one is the fingerprint process. The broker counts when it runs on this
    machine (a ``kafka.Kafka`` process).
    """
    import psutil

    def seconds(proc) -> float:
        t = proc.cpu_times()
        return t.user + t.system

    out: dict[str, float] = {}
    try:
        worker = psutil.Process(worker_pid)
        children = worker.children(recursive=True)
        names = {}
        for child in children:
            try:
                names[child.pid] = Path(f"/proc/{child.pid}/comm").read_text().strip()
            except OSError:
                names[child.pid] = ""
        faust = not any(n.startswith("sd-stage1") for n in names.values())
        out["worker event loop (Faust)" if faust else "worker main process (HTTP, watching)"] = seconds(worker)
        for child in children:
            name = names[child.pid]
            role = ("decision stage" if name == "sd-decisions" else
                    "stage 1 (consume, fingerprint, send)" if name.startswith("sd-stage1") else
                    "fingerprint process" if faust else "other (multiprocessing's resource tracker)")
            out[role] = out.get(role, 0.0) + seconds(child)
    except psutil.Error:
        pass
    for proc in psutil.process_iter(["cmdline"]):
        if any("kafka.Kafka" in part for part in proc.info["cmdline"] or ()):
            try:
                out["broker"] = out.get("broker", 0.0) + seconds(proc)
            except psutil.Error:
                pass
    out["this benchmark (producer, readers)"] = seconds(psutil.Process())
    return out


class PeakRSS(threading.Thread):
    """Samples the RSS of a process and its children every 0.2 s; ``peak`` in bytes."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.stopped = pid, 0, threading.Event()

    def run(self) -> None:
        import psutil

        while not self.stopped.wait(0.2):
            try:
                proc = psutil.Process(self.pid)
                self.peak = max(self.peak, sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)]))
            except Exception:  # noqa: BLE001 - the worker is gone
                return


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=0, help="records of the throughput run (default: the whole stream)")
    ap.add_argument("--latency-seconds", type=float, default=20.0, help="length of the half-rate run")
    ap.add_argument("--latency-rate", type=float, default=0.0,
                    help="records/s of the latency run (default: half the measured worker rate)")
    ap.add_argument("--producer-linger-ms", type=float, default=5.0,
                    help="linger.ms of the latency run's producer (5 = the default of librdkafka and, since "
                         "Kafka 4.0, of the Java client; 0 = one produce request per record)")
    ap.add_argument("--latency-runs", type=int, default=1,
                    help="latency runs one after the other (each of new rounds); the figures are the median run's")
    ap.add_argument("--latency-warmup", type=int, default=1,
                    help="half-rate runs made first and not counted (default 1: a broker this bench starts "
                         "is a cold JVM, and its JIT compiling costs CPU on the same cores for minutes)")
    ap.add_argument("--decision-rounds", type=int, default=3, help="rounds of the stream for measurement 4")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--worker-arg", action="append", default=[], help="extra worker flag (repeatable)")
    ap.add_argument("--breakdown", action="store_true",
                    help="also read the signatures topic and print where the latency goes (stage 1, stage 2, commit)")
    ap.add_argument("--skip-decision-stage", action="store_true", help="skip measurement 4")
    ap.add_argument("--latency-trace", type=Path,
                    help="write the half-rate run's records as CSV: id, produce ms, event received ms, latency ms")
    args = ap.parse_args()
    decide_rate = engine_decide_rate = float("nan")
    warm_runs: list[tuple[float, float]] = []  # the warm-up runs' p50, p99 (s): printed, not counted
    extra = [x for arg in args.worker_arg for x in arg.split(maxsplit=1)]

    if not args.data.exists():
        sys.exit(f"{args.data} not found (the shared news stream)")
    all_lines = [ln.rstrip(b"\n") for ln in args.data.open("rb") if ln.strip()]
    lines = all_lines[:args.records] if args.records else all_lines
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
    worker = Worker(bootstrap, prefix, data_dir, extra)
    out_topics = [f"{prefix}.new", f"{prefix}.dup"]
    reader = Reader(bootstrap, out_topics)
    reader.start()
    sig_reader = None
    if args.breakdown:  # a second reader costs CPU on the same 2 cores: off for the headline figures
        sig_reader = Reader(bootstrap, [f"{prefix}.sig"], isolation="read_uncommitted")  # stage 1 -> 2
        sig_reader.start()
    rss = PeakRSS(worker.proc.pid)
    try:
        worker.wait_ready()
        rss.start()
        print(f"worker ready; producing {n} records to {args.partitions} partitions ...", flush=True)
        cpu0 = worker.cpu_seconds()
        sent = produce(bootstrap, f"{prefix}.articles", lines)
        got = reader.wait_for(set(sent), timeout=900)
        cpu = worker.cpu_seconds() - cpu0
        missing = set(sent) - got.keys()
        wall = (max(got.values()) - min(sent.values())) / 1000
        worker_rate = len(got) / wall
        lat_full = [(got[k] - sent[k]) / 1000 for k in sent if k in got]

        rate = args.latency_rate or worker_rate / 2
        m = int(rate * args.latency_seconds)
        per_run = m // len(all_lines) + 1  # rounds a run takes: every run new ones, matching nothing before
        warmup = args.latency_warmup
        batches = [[round_variant(all_lines[i % len(all_lines)], 1 + run * per_run + i // len(all_lines))
                    for i in range(m)] for run in range(warmup + args.latency_runs)]  # made before the CPU is counted
        for run, half in enumerate(batches[:warmup]):
            print(f"latency warm-up run {run + 1}/{warmup} (not counted): {m} records at {rate:.0f}/s ...", flush=True)
            sent2 = produce(bootstrap, f"{prefix}.articles", half, rate=rate, linger_ms=args.producer_linger_ms)
            got2 = reader.wait_for(set(sent2), timeout=600)
            run_lat = [(got2[k] - sent2[k]) / 1000 for k in sent2 if k in got2]
            warm_runs.append((percentile(run_lat, 50), percentile(run_lat, 99)))
        batches = batches[warmup:]
        tx0 = worker.metric_sums(*TX_METRICS)
        cpu_start, wall_start = cpu_by_process(worker.proc.pid), time.monotonic()
        runs: list[tuple[float, float]] = []  # each latency run's p50, p99 (s)
        lat: list[float] = []
        parts: dict[str, list[float]] = {}
        missing2: set[str] = set()
        trace = args.latency_trace.open("w") if args.latency_trace else None
        if trace:
            trace.write("id,produced_ms,received_ms,latency_ms\n")
        for run, half in enumerate(batches):
            print(f"latency run {run + 1}/{args.latency_runs}: {m} records of new rounds at {rate:.0f}/s "
                  f"(half the measured rate) ...", flush=True)
            sent2 = produce(bootstrap, f"{prefix}.articles", half, rate=rate, linger_ms=args.producer_linger_ms)
            got2 = reader.wait_for(set(sent2), timeout=600)
            run_lat = [(got2[k] - sent2[k]) / 1000 for k in sent2 if k in got2]
            runs.append((percentile(run_lat, 50), percentile(run_lat, 99)))
            lat += run_lat
            for name, values in (breakdown(sent2, sig_reader.created, reader.created, got2)
                                 if sig_reader else {}).items():
                parts.setdefault(name, []).extend(values)
            if trace:
                for k in sorted(sent2, key=sent2.get):
                    out = got2.get(k)
                    trace.write(f"{k},{sent2[k]},{'' if out is None else out},{'' if out is None else out - sent2[k]}\n")
            missing2 |= set(sent2) - got2.keys()
        if trace:
            trace.close()
        cpu_end, wall = cpu_by_process(worker.proc.pid), time.monotonic() - wall_start
        shares = {k: (v - cpu_start.get(k, 0.0)) / wall for k, v in cpu_end.items()}
        tx = {k: v - tx0[k] for k, v in worker.metric_sums(*TX_METRICS).items()}
    finally:
        rss.stopped.set()
        reader.stopped.set()
        if sig_reader is not None:
            sig_reader.stopped.set()
        worker.stop()
        _cleanup(admin, prefix, data_dir)
    try:
        if not args.skip_decision_stage:
            rounds = [round_variant(line, r) for r in range(args.decision_rounds) for line in all_lines]
            print(f"decision stage alone: {len(rounds)} signature records written directly, fresh worker ...",
                  flush=True)
            sigs = signature_records(rounds)
            engine_decide_rate = decide_rate_in_process([v for _a, v in sigs])
            decide_rate = decision_stage_rate(bootstrap, admin, sigs, extra)
    finally:
        if started:
            subprocess.run(["bash", str(REPO / "scripts" / "kafka.sh"), "stop"], capture_output=True)

    ratio = worker_rate / emb_rate
    stage_ratio = decide_rate / engine_decide_rate
    # the median run's figures: one run's figure near saturation can be three times the next one's
    p50, p99 = (statistics.median(r[i] for r in runs) * 1000 for i in (0, 1))
    print()
    print(f"{'measure':<52} {'value':>12}")
    print("-" * 65)
    rows = [
        ("embedded engine (parse+process), records/s", f"{emb_rate:.0f}"),
        ("embedded engine, ms/record", f"{emb_ms:.2f}"),
        (f"worker, 1 process, {args.partitions} partitions, articles/s", f"{worker_rate:.0f}"),
        ("worker / embedded", f"{ratio:.0%}"),
        ("worker CPU ms per article (all its processes)", f"{cpu / n * 1000:.2f}"),
        ("worker peak RSS (MiB, all its processes)", f"{rss.peak / 2**20:.0f}"),
        ("backlog run latency p50 / p99 (s)", f"{percentile(lat_full, 50):.2f} / {percentile(lat_full, 99):.2f}"),
        ("latency run's producer linger.ms", f"{args.producer_linger_ms:g}"),
        (f"latency run ({rate:.0f}/s) p50 (ms)" + (", median run" if len(runs) > 1 else ""), f"{p50:.1f}"),
        (f"latency run ({rate:.0f}/s) p99 (ms)" + (", median run" if len(runs) > 1 else ""), f"{p99:.1f}"),
        *([("  each run: p50 / p99 (ms)", ", ".join(f"{a * 1000:.0f} / {b * 1000:.0f}" for a, b in runs))]
          if len(runs) > 1 else []),
        *([("  warm-up runs, not counted: p50 / p99 (ms)",
            ", ".join(f"{a * 1000:.0f} / {b * 1000:.0f}" for a, b in warm_runs))] if warm_runs else []),
        (f"latency run ({rate:.0f}/s) max (ms)", f"{max(lat) * 1000 if lat else float('nan'):.1f}"),
        ("  transactions: mean commit (ms) / records each", f"{_mean_commit(tx)}"),
        *[(f"  {name} p50 / p99 (ms)", f"{percentile(v, 50):.0f} / {percentile(v, 99):.0f}")
          for name, v in parts.items()],
        (f"  CPU in the latency run, % of a core (of {os.cpu_count() * 100})", f"{sum(shares.values()):.0%}"),
        *[(f"    {name}", f"{share:.0%}") for name, share in sorted(shares.items(), key=lambda kv: -kv[1])],
        ("decision stage alone (stage 2), articles/s", f"{decide_rate:.0f}"),
        ("engine decide rate, same signatures, in process", f"{engine_decide_rate:.0f}"),
        ("decision stage / engine decide", f"{stage_ratio:.0%}"),
        ("records without output event", f"{len(missing) + len(missing2)}"),
    ]
    for name, value in rows:
        print(f"{name:<52} {value:>12}")
    print()
    checks = [("worker >= 60% of embedded", ratio >= 0.6, f"{ratio:.0%}"),
              ("half-rate p50 < 20 ms", p50 < 20, f"{p50:.1f} ms"),
              ("half-rate p99 < 100 ms", p99 < 100, f"{p99:.1f} ms"),
              ("decision stage >= 80% of engine decide", stage_ratio >= 0.8, f"{stage_ratio:.0%}")]
    if args.skip_decision_stage:
        checks[-1] = ("decision stage >= 80% of engine decide", None, "--skip-decision-stage")
    verdict = {True: "met", False: "NOT met", None: "not measured"}
    print("targets (issue 11): " + "; ".join(f"{name}: {verdict[ok]} ({v})" for name, ok, v in checks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
