"""The decision stage commits a transaction in a thread while it decides the next records.

Real engine and RocksDB index, real signature records (from :mod:`test_decide_records`); the Kafka
clients are stand-ins that keep what a broker would: the outputs of committed transactions only,
and the committed offset. The real loop's order and rollback are checked against them:

* records decided while a commit is in flight have their outputs held until it is done, and go
  out in the next transaction, after the committed ones;
* when that commit is aborted instead, the held outputs are dropped, the loop rewinds to the
  committed offset, decides those records again, and the committed output holds every input
  record's answer exactly once, the same answers as a run where nothing failed.

The real broker's side of the same loop is in ``tests/integration`` (SIGKILL cycles, a frozen
broker, a fenced owner).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from test_decide_records import Msg, RecordingProducer, _messages, _stage

from stream_dedup.config import EngineConfig
from stream_dedup.service.decisions import DecisionStage


class TxnProducer(RecordingProducer):
    """A transactional producer's contract: outputs count once their transaction commits."""

    def __init__(self) -> None:
        super().__init__()
        self.committed: list[tuple[str, bytes | None, dict]] = []
        self.committed_offset: int | None = None
        self.log: list[str] = []
        self.gate: threading.Event | None = None  # a commit waits for it (a slow broker)
        self.fail_next_commit = False
        self._offset: int | None = None

    def begin_transaction(self) -> None:
        self.log.append("begin")
        self.sent = []

    def produce(self, topic: str, value: bytes, key: bytes | None = None, headers: object = None) -> None:
        self.log.append("produce")
        super().produce(topic, value, key, headers)

    def send_offsets_to_transaction(self, offsets: list[TopicPartition], group: Any, timeout: float) -> None:
        self._offset = offsets[0].offset

    def commit_transaction(self, timeout: float) -> None:
        if self.gate is not None:
            self.gate.wait(10)
        if self.fail_next_commit:
            self.fail_next_commit = False
            raise KafkaException(KafkaError(KafkaError._STATE, "commit failed (test)", txn_requires_abort=True))
        self.log.append("commit")
        self.committed += self.sent
        self.committed_offset = self._offset
        self.sent = []

    def abort_transaction(self, timeout: float) -> None:
        self.log.append("abort")
        self.sent = []

    def flush(self, timeout: float = 0) -> int:
        return 0


class FakeConsumer:
    """Serves the messages from an assigned offset; the committed offset is the producer's."""

    def __init__(self, msgs: list[Msg], producer: TxnProducer) -> None:
        self.msgs, self.producer, self.position = msgs, producer, 0

    def consume(self, n: int, timeout: float = 0) -> list[Msg]:
        out = self.msgs[self.position:self.position + n]
        self.position += len(out)
        return out

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.position = partitions[0].offset if partitions else self.position

    def committed(self, partitions: list[TopicPartition], timeout: float = 0) -> list[TopicPartition]:
        offset = self.producer.committed_offset
        return [TopicPartition(partitions[0].topic, 0, -1001 if offset is None else offset)]

    def consumer_group_metadata(self) -> None:
        return None

    def close(self) -> None:
        pass


def _txn_stage(tmp_path: Path, name: str, engine: EngineConfig, msgs: list[Msg]) -> DecisionStage:
    stage = _stage(tmp_path, name, engine)
    stage.consumer.close()
    stage.producer = TxnProducer()  # type: ignore[assignment]
    stage.consumer = FakeConsumer(msgs, stage.producer)  # type: ignore[assignment]
    stage.owned = True
    return stage


def _drain(stage: DecisionStage, chunk: int) -> None:
    """The loop's body (fetch, transaction, housekeeping) until every message is committed."""
    deadline = time.monotonic() + 60
    while stage.producer.committed_offset != len(stage.consumer.msgs) and time.monotonic() < deadline:
        records = stage._fetch(chunk, 0)
        if records:
            stage._transaction(records)
        stage._housekeeping()
        if not records and stage._committing is not None:
            stage._settle_commit(rewind=True)


def _close(stage: DecisionStage) -> None:
    stage._committer.shutdown(wait=True)
    stage.dedup.close()


def test_outputs_decided_during_a_commit_wait_for_it(tmp_path: Path) -> None:
    engine = EngineConfig()
    msgs = _messages(engine)[:60]
    stage = _txn_stage(tmp_path, "held", engine, msgs)
    producer: TxnProducer = stage.producer  # type: ignore[assignment]
    try:
        producer.gate = threading.Event()
        stage._transaction(stage._fetch(20, 0))  # its commit now waits for the gate
        assert stage._committing is not None and producer.committed == []
        first_outputs = producer.log.count("produce")
        threading.Timer(0.3, producer.gate.set).start()
        started = time.monotonic()
        stage._transaction(stage._fetch(40, 0))  # decided at once, produced after the first commit
        assert time.monotonic() - started >= 0.25
        first_commit = producer.log.index("commit")
        assert producer.log[:first_commit].count("begin") == 1
        assert producer.log[:first_commit].count("produce") == first_outputs  # nothing produced meanwhile
        assert producer.log[first_commit + 1] == "begin"  # the held outputs go out in the next one
        stage._settle_commit(rewind=True)
        assert producer.committed_offset == len(msgs) and stage.committed == len(msgs)
        assert len(producer.committed) == len(msgs) - 1  # one second copy of an input record
    finally:
        _close(stage)


def test_an_aborted_commit_is_decided_again_with_the_same_answers(tmp_path: Path) -> None:
    engine = EngineConfig()
    msgs = _messages(engine)
    clean = _txn_stage(tmp_path, "clean", engine, msgs)
    failing = _txn_stage(tmp_path, "failing", engine, msgs)
    try:
        _drain(clean, 64)
        producer: TxnProducer = failing.producer  # type: ignore[assignment]
        failing._transaction(failing._fetch(64, 0))
        failing._settle_commit(rewind=True)
        assert producer.committed_offset == 64
        producer.gate, producer.fail_next_commit = threading.Event(), True
        failing._transaction(failing._fetch(64, 0))  # its commit will fail
        threading.Timer(0.2, producer.gate.set).start()
        failing._transaction(failing._fetch(64, 0))  # decided while it commits: held, then dropped
        assert "abort" in producer.log
        assert producer.committed_offset == 64 and failing.consumer.position == 64  # rewound
        assert failing.committed == 64
        producer.gate = None
        _drain(failing, 64)
        assert producer.committed == clean.producer.committed  # the same answers, each once
        assert len(producer.committed) == len(msgs) - 2
        assert failing.committed == clean.committed == len(msgs)
    finally:
        _close(clean)
        _close(failing)
