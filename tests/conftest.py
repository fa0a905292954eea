"""Shared pytest fixtures.

Kafka
-----
Tests that need a broker are marked ``@pytest.mark.kafka`` and use these fixtures:

* ``kafka_bootstrap`` (session): the bootstrap string.  ``$KAFKA_BOOTSTRAP_SERVERS`` when set;
  otherwise a real single-node Kafka (KRaft) started by ``scripts/kafka.sh start`` once per
  session and stopped at the end (only if this session started it).  A broker that cannot be
  started makes the tests FAIL with the broker log tail; they are never skipped.
* ``kafka_admin`` (session): a ``confluent_kafka.admin.AdminClient`` on that broker.
* ``unique_topic_prefix`` (function): ``t-<8 hex>``, so tests never share topics.
* ``kafka_topics`` (function): ``kafka_topics(names, partitions=1)`` creates topics, waits until
  every partition has a leader, and deletes them after the test.

``create_topics(admin, names, partitions=1)`` is the plain helper behind ``kafka_topics``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

# Every test, and every process a test starts, checks the engine's trusted kernel calls strictly: a
# call site that passes arrays its export does not take fails the test (stream_dedup.jit.trusted)
# instead of misreading memory in production. Set before anything imports stream_dedup.
os.environ["STREAM_DEDUP_CHECK_KERNELS"] = "1"

# ----------------------------------------------------------------------------------- Kafka

KAFKA_SCRIPT = REPO_ROOT / "scripts" / "kafka.sh"
# A cold start includes the one-off download of the broker jars from Maven Central.
KAFKA_START_TIMEOUT_S = 900
KAFKA_STOP_TIMEOUT_S = 120


def _kafka_sh(command: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    # The readiness probe in kafka.sh uses confluent_kafka: give it this interpreter.
    env.setdefault("PYTHON", sys.executable)
    return subprocess.run(
        ["bash", str(KAFKA_SCRIPT), command],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def _tail(text: str, lines: int = 80) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _start_kafka() -> tuple[str, bool]:
    """Return (bootstrap, started_here)."""
    already_running = _kafka_sh("status", timeout=60).returncode == 0
    try:
        proc = _kafka_sh("start", timeout=KAFKA_START_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"scripts/kafka.sh start did not finish in {KAFKA_START_TIMEOUT_S}s:\n"
                    f"{_tail(str(exc.stderr or ''))}", pytrace=False)
    prefix = "KAFKA_BOOTSTRAP_SERVERS="
    bootstrap = next((line[len(prefix):].strip() for line in proc.stdout.splitlines()
                      if line.startswith(prefix)), "")
    if proc.returncode != 0 or not bootstrap:
        pytest.fail(f"scripts/kafka.sh start failed (exit {proc.returncode}):\n"
                    f"{_tail(proc.stdout)}\n{_tail(proc.stderr)}", pytrace=False)
    return bootstrap, not already_running


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap servers of a running Kafka broker (see the module docstring)."""
    from_env = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if from_env:
        yield from_env
        return
    bootstrap, started_here = _start_kafka()
    try:
        yield bootstrap
    finally:
        if started_here:
            proc = _kafka_sh("stop", timeout=KAFKA_STOP_TIMEOUT_S)
            if proc.returncode != 0:
                print(f"warning: scripts/kafka.sh stop failed:\n{proc.stderr}", file=sys.stderr)


@pytest.fixture(scope="session")
def kafka_admin(kafka_bootstrap: str):
    """A confluent_kafka AdminClient connected to ``kafka_bootstrap``."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    # Fail early and clearly if the broker does not answer.
    admin.list_topics(timeout=30)
    return admin


@pytest.fixture
def unique_topic_prefix() -> str:
    """A per-test topic name prefix, e.g. ``t-1a2b3c4d``."""
    return f"t-{uuid.uuid4().hex[:8]}"


def create_topics(admin, names: Iterable[str], partitions: int = 1, timeout: float = 60.0,
                  config: dict[str, str] | None = None) -> list[str]:
    """Create ``names`` (replication factor 1) and wait until every partition has a leader.

    Topics that already exist are accepted.  Returns the names.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    from stream_dedup.service.topics import wait_for_leaders

    names = list(names)
    if not names:
        return names
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {}) for name in names],
        operation_timeout=timeout, request_timeout=timeout)
    for name, future in futures.items():
        try:
            future.result(timeout=timeout)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise RuntimeError(f"creating topic {name!r} failed: {exc}") from exc

    wait_for_leaders(admin, names, timeout, min_partitions=partitions)
    return names


def delete_topics(admin, names: Iterable[str], timeout: float = 30.0) -> None:
    """Delete ``names``, ignoring errors (best effort cleanup)."""
    names = list(names)
    if not names:
        return
    for future in admin.delete_topics(names, operation_timeout=timeout, request_timeout=timeout).values():
        try:
            future.result(timeout=timeout)
        except Exception:  # noqa: BLE001 - cleanup only
            pass


@pytest.fixture
def kafka_topics(kafka_admin) -> Iterator[Callable[..., list[str]]]:
    """Factory ``kafka_topics(names, partitions=1)``; the topics are deleted after the test."""
    created: list[str] = []

    def make(names: Iterable[str], partitions: int = 1, config: dict[str, str] | None = None) -> list[str]:
        names = create_topics(kafka_admin, names, partitions=partitions, config=config)
        created.extend(names)
        return names

    yield make
    delete_topics(kafka_admin, created)
