"""`stream-dedup produce` and `stream-dedup tail` against the real broker."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.kafka


def _cli(args: list[str], bootstrap: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {"KAFKA_BOOTSTRAP_SERVERS": bootstrap, "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "stream_dedup.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=Path(__file__).resolve().parents[2])


def test_produce_then_tail_round_trip(kafka_bootstrap: str, kafka_topics, unique_topic_prefix: str,
                                      tmp_path: Path) -> None:
    topic = f"{unique_topic_prefix}-cli"
    kafka_topics([topic], partitions=2)
    records = [{"id": f"a{i}", "text": f"article number {i}"} for i in range(25)]
    lines = [json.dumps(r) for r in records] + ["not json at all"]
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(lines) + "\n\n")

    produced = _cli(["produce", str(src), "--topic", topic], kafka_bootstrap)
    assert produced.returncode == 0, produced.stderr
    assert f"produced 26 messages to {topic}" in produced.stderr

    tailed = _cli(["tail", topic, "--from-beginning", "--max-messages", "26", "--idle-timeout", "20"],
                  kafka_bootstrap)
    assert tailed.returncode == 0, tailed.stderr
    messages = [json.loads(line) for line in tailed.stdout.splitlines()]
    assert len(messages) == 26
    by_key = {m["key"]: m for m in messages}
    for r in records:  # keyed by id, value parsed back to the same object
        assert by_key[r["id"]]["value"] == r
    assert [m["value"] for m in messages if m["key"] == ""] == ["not json at all"]


def test_produce_fails_clearly_without_a_broker(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text('{"id": "a", "text": "x"}\n')
    result = _cli(["produce", str(src), "--topic", "t"], "127.0.0.1:1", timeout=60)
    assert result.returncode != 0
    assert "cannot reach the Kafka broker at 127.0.0.1:1" in result.stderr
