"""Fixtures and helpers for the worker integration tests (real broker, real worker processes).

* ``worker_topics`` : per-test topic names / app id (``WorkerTopics``), input topic created
  by the test with the partition count it needs.
* ``start_worker``  : factory starting ``python -m stream_dedup.service`` subprocesses
  (killed at the end of the test); ``WorkerProcess.wait_ready()`` polls ``/readyz``.
* ``kio``: ``produce`` / ``consume_all`` / ``committed_offsets`` / ``metric_value`` /
  ``http_get`` / ``load_news`` helpers (confluent-kafka, urllib).
* ``load_news(n)``: the first ``n`` records of the shared news stream with their truth,
  skipped when ``../shared/data`` is absent (a failure when ``$CI`` is set).

``$STREAM_DEDUP_WORKER_CMD`` (whitespace separated) replaces ``python -m stream_dedup.service``
as the worker command, e.g. to run the installed ``stream-dedup worker``.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA = Path(os.environ.get("STREAM_DEDUP_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
STREAM_FILE = SHARED_DATA / "news_stream.jsonl"
TRUTH_FILE = SHARED_DATA / "news_stream.truth.jsonl"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class WorkerTopics:
    prefix: str

    @property
    def app_id(self) -> str:
        return f"{self.prefix}-app"

    @property
    def input(self) -> str:
        return f"{self.prefix}.articles"

    @property
    def new(self) -> str:
        return f"{self.prefix}.articles.new"

    @property
    def duplicates(self) -> str:
        return f"{self.prefix}.articles.duplicates"

    @property
    def dlq(self) -> str:
        return f"{self.prefix}.articles.dlq"

    @property
    def signatures(self) -> str:
        return f"{self.prefix}.articles.signatures"

    def all(self) -> list[str]:
        return [self.input, self.new, self.duplicates, self.dlq, self.signatures]

    def flags(self) -> dict[str, str]:
        return {"app-id": self.app_id, "input-topic": self.input, "new-topic": self.new,
                "duplicates-topic": self.duplicates, "dlq-topic": self.dlq,
                "signatures-topic": self.signatures}


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


class WorkerProcess:
    def __init__(self, name: str, bootstrap: str, topics: WorkerTopics, data_dir: Path, log_path: Path,
                 extra_flags: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.port = free_port()
        self.data_dir = data_dir
        self.log_path = log_path
        flags = {"bootstrap-servers": bootstrap, **topics.flags(), "data-dir": str(data_dir),
                 "metrics-port": str(self.port), "metrics-host": "127.0.0.1", "session-timeout": "6",
                 "commit-interval": "0.5"}
        flags.update({k: str(v) for k, v in (extra_flags or {}).items()})
        base = shlex.split(os.environ.get("STREAM_DEDUP_WORKER_CMD", "")) or [
            sys.executable, "-m", "stream_dedup.service"]
        self.cmd = [*base, *[x for k, v in flags.items() for x in (f"--{k}", v)]]
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> WorkerProcess:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(self.cmd, cwd=REPO_ROOT, env=self.env, stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def log_story(self, lines: int = 80) -> str:
        """The log's last ``lines`` lines without one-per-record rejections and the config dumps:
        what a failing test prints (a CI report shows only the first part of a long output)."""
        noise = ("] rejected ", " service config: ", " engine config: ")
        kept = [ln for ln in self.log_text().splitlines() if not any(n in ln for n in noise)]
        return "\n".join(ln[:300] for ln in kept[-lines:])

    def readyz(self) -> tuple[int, dict[str, Any]]:
        try:
            status, body = http_get(self.url + "/readyz", timeout=2)
            return status, json.loads(body)
        except (OSError, ValueError):
            return 0, {}

    def wait_ready(self, timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise AssertionError(f"worker {self.name} exited ({self.proc.returncode}):\n{self.log_tail()}")
            status, body = self.readyz()
            if status == 200:
                return body
            time.sleep(0.3)
        raise AssertionError(f"worker {self.name} not ready after {timeout}s: {self.readyz()}\n{self.log_tail()}")

    def signal(self, sig: int) -> None:
        if self.alive():
            self.proc.send_signal(sig)

    def wait(self, timeout: float = 60.0) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is not None and not self._log.closed:
                self._log.close()

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.wait(timeout=30)
        if self.proc is not None and not self._log.closed:
            self._log.close()


@pytest.fixture
def worker_topics(unique_topic_prefix: str, kafka_admin) -> Iterator[WorkerTopics]:
    topics = WorkerTopics(unique_topic_prefix)
    yield topics
    for fut in kafka_admin.delete_topics(topics.all(), operation_timeout=30, request_timeout=30).values():
        try:
            fut.result(timeout=30)
        except Exception:  # noqa: BLE001 - best-effort cleanup
            pass


@pytest.fixture
def start_worker(kafka_bootstrap: str, tmp_path: Path, request):
    """``start_worker(topics, name="w1", data_dir=None, **flags) -> WorkerProcess`` (started)."""
    started: list[WorkerProcess] = []

    def start(topics: WorkerTopics, name: str = "w1", data_dir: Path | None = None,
              env: dict[str, str] | None = None, **flags: Any) -> WorkerProcess:
        w = WorkerProcess(name, kafka_bootstrap, topics, data_dir or tmp_path / f"data-{name}",
                          tmp_path / f"{name}.log", {k.replace("_", "-"): v for k, v in flags.items()}, env)
        started.append(w)
        return w.start()

    yield start
    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    ready_at_failure = {w.name: w.readyz() for w in started if failed and w.alive()}
    for w in started:
        w.signal(signal.SIGTERM)
    for w in started:
        try:
            if w.alive():
                w.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
        w.kill()
        if w.name in ready_at_failure:
            status, body = ready_at_failure[w.name]
            print(f"\n===== worker {w.name}: /readyz at the failure: {status} {json.dumps(body)[:600]}")
        if failed:
            print(f"\n===== log of worker {w.name} ({w.log_path}), without per-record rejections =====\n"
                  f"{w.log_story()}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


# ------------------------------------------------------------------ Kafka helpers

def make_producer(bootstrap: str) -> Any:
    """An idempotent producer; a test that produces in many calls keeps one (creating one costs ~0.3 s)."""
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                     "enable.idempotence": True, "message.max.bytes": 10_000_000})


def produce(bootstrap: str, topic: str, records: Iterable[tuple[bytes | None, bytes, int | None]],
            headers: list | None = None, producer: Any = None) -> list[tuple[int, int, int]]:
    """Produce ``(key, value, partition|None)`` records in order; return ``(partition, offset, ts_ms)``.

    With ``producer`` (from ``make_producer``) the records go through it; otherwise through a new one."""
    producer = producer or make_producer(bootstrap)
    results: list[Any] = []

    def make_cb(i: int):
        def cb(err, msg):
            if err is not None:
                results[i] = err
            else:
                results[i] = (msg.partition(), msg.offset(), msg.timestamp()[1])
        return cb

    for i, (key, value, partition) in enumerate(records):
        results.append(None)
        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": make_cb(i)}
        if partition is not None:
            kwargs["partition"] = partition
        if headers:
            kwargs["headers"] = headers
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(60) == 0, "produce: messages still in queue after 60 s"
    bad = [r for r in results if not isinstance(r, tuple)]
    assert not bad, f"produce errors: {bad[:3]}"
    return results


@dataclass
class Consumed:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list
    timestamp_ms: int

    def json(self) -> dict[str, Any]:
        return json.loads(self.value)


def consume_all(bootstrap: str, topics: list[str], *, until: Any = None, timeout: float = 120.0,
                idle: float = 3.0) -> list[Consumed]:
    """Read ``topics`` from the beginning until ``until(records)`` is true (then ``idle`` s more
    to catch extra deliveries) or ``timeout``; without ``until``, until ``idle`` s of silence."""
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"test-reader-{time.time_ns()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "isolation.level": "read_committed"})  # only committed transactions count
    c.subscribe(topics)
    out: list[Consumed] = []
    deadline = time.monotonic() + timeout
    last = time.monotonic()
    done_at: float | None = None
    try:
        while time.monotonic() < deadline:
            msgs = c.consume(500, timeout=0.5)
            for m in msgs:
                if m.error() is not None:
                    continue
                out.append(Consumed(m.topic(), m.partition(), m.offset(), m.key(), m.value(),
                                    list(m.headers() or []), m.timestamp()[1]))
                last = time.monotonic()
            if until is not None:
                if done_at is None and until(out):
                    done_at = time.monotonic()
                if done_at is not None and time.monotonic() - done_at >= idle:
                    break
            elif out and time.monotonic() - last >= idle:
                break
    finally:
        c.close()
    return out


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return [tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(partitions)],
                                                timeout=15)]
    finally:
        c.close()


def metric_value(metrics_text: str, name: str, labels: dict[str, str] | None = None) -> float | None:
    """The value of one sample in a Prometheus text exposition (None if absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(metrics_text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in (labels or {}).items()):
                return s.value
    return None


# ------------------------------------------------------------------ shared data

def load_news(n: int | None = None) -> tuple[list[bytes], list[dict[str, Any]]]:
    if not STREAM_FILE.exists() or not TRUTH_FILE.exists():
        msg = f"shared news stream not found under {SHARED_DATA} (news_stream.jsonl + news_stream.truth.jsonl)"
        if os.environ.get("CI"):
            pytest.fail(msg + " and $CI is set", pytrace=False)
        pytest.skip(msg)
    with open(STREAM_FILE, "rb") as f:
        lines = [line.rstrip(b"\n") for line in f if line.strip()]
    with open(TRUTH_FILE) as f:
        truth = [json.loads(line) for line in f if line.strip()]
    if n is not None:
        lines, truth = lines[:n], truth[:n]
    return lines, truth


@pytest.fixture
def kio(kafka_bootstrap: str) -> SimpleNamespace:
    """The helpers of this module, bound to the test broker where it applies."""
    return SimpleNamespace(
        bootstrap=kafka_bootstrap,
        produce=lambda topic, records, **kw: produce(kafka_bootstrap, topic, records, **kw),
        producer=lambda: make_producer(kafka_bootstrap),
        consume_all=lambda topics, **kw: consume_all(kafka_bootstrap, topics, **kw),
        committed_offsets=lambda group, topic, n: committed_offsets(kafka_bootstrap, group, topic, n),
        metric_value=metric_value, http_get=http_get, load_news=load_news,
        synthetic_records=synthetic_records, synthetic_story=synthetic_story,
        synthetic_variant=synthetic_variant)


# ------------------------------------------------------------------ synthetic stories

_VOCAB = ("government minister said report economy market police city council election vote court "
          "judge company shares growth rate bank inflation prices energy oil gas climate weather storm "
          "flood rescue hospital health doctors patients school teachers students university research "
          "scientists study data technology software security attack military troops border talks peace "
          "agreement trade tariffs exports imports farmers crops water river bridge road transport rail "
          "airport flights airline passengers tourism hotel festival music film award players match season "
          "coach league title record fans stadium protest workers union strike wages pension tax budget").split()


def synthetic_story(i: int, words: int = 120) -> str:
    import random

    rnd = random.Random(i)
    sentences, n = [], 0
    while n < words:
        k = rnd.randint(8, 16)
        sentences.append(" ".join(rnd.choice(_VOCAB) for _ in range(k)).capitalize() + f" s{i}n{n}.")
        n += k
    return " ".join(sentences)


def synthetic_variant(text: str, v: int) -> str:
    """A near-duplicate: same first part, a different footer (v selects it)."""
    return text + f" This story was republished by outlet number {v} with permission. Read more news online."


def synthetic_records(n_stories: int, variants_per_story: int = 2) -> list[tuple[str, str, bytes]]:
    """``(id, cluster, json bytes)``: all originals first, then the variants."""
    out = []
    for i in range(n_stories):
        out.append((f"s{i}", f"s{i}", json.dumps({"id": f"s{i}", "text": synthetic_story(i)}).encode()))
    for v in range(1, variants_per_story + 1):
        for i in range(n_stories):
            if (i + v) % 3 == 0:
                continue  # not every story has every variant
            text = synthetic_variant(synthetic_story(i), v)
            out.append((f"s{i}-v{v}", f"s{i}", json.dumps({"id": f"s{i}-v{v}", "text": text}).encode()))
    return out
