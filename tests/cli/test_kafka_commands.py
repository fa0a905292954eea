"""Issue 14, item 9: ``produce`` and ``tail`` without a reachable broker fail within a few seconds with
one clear line; ``produce --partitions`` creates the topic it says it created (that one needs a broker)."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import SAMPLE, cli, one_line_error


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]   # closed again when the test uses it: connections are refused


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts TCP connections and never answers (a black hole, not a broker)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield s.getsockname()[1]


@pytest.mark.parametrize("command", ["produce", "tail"])
@pytest.mark.parametrize("port_kind", ["closed_port", "silent_port"])
def test_unreachable_broker_fails_fast_in_one_line(command: str, port_kind: str,
                                                   request: pytest.FixtureRequest) -> None:
    port = request.getfixturevalue(port_kind)
    argv = [command, str(SAMPLE)] if command == "produce" else [command]
    t0 = time.monotonic()
    proc = cli(*argv, "--bootstrap-servers", f"127.0.0.1:{port}", "--connect-timeout", "2", timeout=60)
    took = time.monotonic() - t0
    assert proc.returncode == 1
    line = one_line_error(proc)
    assert line.startswith(f"stream-dedup {command}: cannot reach the Kafka broker at 127.0.0.1:{port} within 2 s")
    assert took < 8, f"took {took:.1f} s"
    assert proc.stdout == ""


def test_default_connect_timeout_is_a_few_seconds(closed_port: int) -> None:
    t0 = time.monotonic()
    proc = cli("tail", env={"KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{closed_port}"}, timeout=60)
    assert proc.returncode == 1 and "within 5 s" in one_line_error(proc)
    assert time.monotonic() - t0 < 12


@pytest.mark.parametrize(("argv", "message"), [
    (["--partitions", "0"], "--partitions 0: must be at least 1"),
    (["--rate", "-1"], "--rate and --limit must be >= 0"),
    (["--connect-timeout", "0"], "--connect-timeout 0.0: must be > 0"),
])
def test_produce_usage_errors(argv: list[str], message: str, closed_port: int) -> None:
    proc = cli("produce", str(SAMPLE), "--bootstrap-servers", f"127.0.0.1:{closed_port}", *argv)
    assert proc.returncode == 2 and message in one_line_error(proc)


def test_produce_missing_file_before_connecting(tmp_path: Path, closed_port: int) -> None:
    t0 = time.monotonic()
    proc = cli("produce", str(tmp_path / "nope.jsonl"), "--bootstrap-servers", f"127.0.0.1:{closed_port}")
    assert proc.returncode == 2 and "no such input file" in one_line_error(proc)
    assert time.monotonic() - t0 < 5


@pytest.mark.kafka
def test_produce_creates_the_topic_with_partitions(kafka_bootstrap: str, kafka_admin, tmp_path: Path) -> None:
    topic = f"t-{uuid.uuid4().hex[:8]}-articles"
    inp = tmp_path / "in.jsonl"
    inp.write_bytes(b"\n".join(SAMPLE.read_bytes().splitlines()[:20]) + b"\n")
    try:
        proc = cli("produce", str(inp), "--topic", topic, "--partitions", "3", "--bootstrap-servers", kafka_bootstrap,
                   timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert f"stream-dedup produce: created topic {topic} with 3 partitions" in proc.stderr
        assert f"produced 20 messages to {topic}" in proc.stderr
        assert len(kafka_admin.list_topics(topic=topic, timeout=30).topics[topic].partitions) == 3
        again = cli("produce", str(inp), "--topic", topic, "--partitions", "5", "--bootstrap-servers", kafka_bootstrap,
                    timeout=120)
        assert again.returncode == 0, again.stderr
        assert (f"topic {topic} exists with 3 partitions (--partitions 5 ignored: an existing topic is left as it is)"
                in again.stderr)
    finally:
        for future in kafka_admin.delete_topics([topic], operation_timeout=30).values():
            try:
                future.result(timeout=30)
            except Exception:  # noqa: BLE001 - cleanup only
                pass
