"""The warm standby's follower (:mod:`stream_dedup.service.follower`) on a stand-in consumer: it
applies what the group has committed beyond the index, never more, a bounded chunk a step."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from stream_dedup.service import follower as follower_module
from stream_dedup.service.follower import Follower, follower_config


class _Msg:
    def __init__(self, offset: int, value: bytes | None = None, error: KafkaError | None = None) -> None:
        self._offset, self._value, self._error = offset, value, error

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes | None:
        return self._value

    def error(self) -> KafkaError | None:
        return self._error


class _Log:
    """signatures-0 as a consumer by manual assignment sees it, and the group's committed offset."""

    def __init__(self, records: int, committed: int | None) -> None:
        self.values = [f"sig-{i}".encode() for i in range(records)]
        self.committed_at = committed
        self.position: int | None = None
        self.assigns: list[int] = []
        self.fail_committed = False
        self.eof = False
        self.gaps: set[int] = set()  # offsets that hold no record (deleted by retention, compacted)

    def committed(self, tps, timeout: float):
        if self.fail_committed:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        return [TopicPartition(tps[0].topic, 0, -1001 if self.committed_at is None else self.committed_at)]

    def assign(self, tps) -> None:
        self.position = tps[0].offset
        self.assigns.append(tps[0].offset)

    def unassign(self) -> None:
        self.position = None

    def consume(self, n: int, timeout: float):
        assert self.position is not None, "consume before assign"
        offsets = [i for i in range(self.position, len(self.values)) if i not in self.gaps][:n]
        out = [_Msg(i, self.values[i]) for i in offsets]
        if offsets:
            self.position = offsets[-1] + 1
        if self.eof:
            out.append(_Msg(self.position, error=KafkaError(KafkaError._PARTITION_EOF)))
        return out


class _Index:
    def __init__(self) -> None:
        self.applied: list[tuple[int, bytes]] = []

    def apply(self, chunk: list[tuple[int, bytes]]) -> None:
        self.applied += chunk

    def position(self) -> int:
        return self.applied[-1][0] + 1 if self.applied else 0


def _follower(log: _Log, index: _Index, t: list[float]) -> Follower:
    return Follower({}, "sigs", "app.decisions", index.apply, index.position, clock=lambda: t[0], consumer=log)


def test_applies_what_the_group_committed_and_nothing_past_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(follower_module, "CHUNK", 4)
    t, log, index = [0.0], _Log(records=20, committed=10), _Index()
    f = _follower(log, index, t)
    assert f.behind == 0  # (nothing read yet)
    steps = [f.step() for _ in range(5)]
    assert steps == [4, 4, 2, 0, 0]  # bounded chunks, then nothing until the group commits more
    assert [o for o, _ in index.applied] == list(range(10))
    assert index.applied[3] == (3, b"sig-3")
    assert log.assigns == [0]  # one assignment: it goes on from where it stands
    assert f.behind == 0 and f.status() == {"committed_offset": 10, "behind": 0, "applied": 10}
    log.committed_at = 15
    assert f.step() == 0  # the committed offset is read once a second, not every step
    t[0] += follower_module.COMMITTED_EVERY
    assert f.step() == 4 and f.behind == 1
    assert f.step() == 1 and f.behind == 0


def test_nothing_committed_yet_applies_nothing() -> None:
    t, log, index = [0.0], _Log(records=5, committed=None), _Index()
    f = _follower(log, index, t)
    assert f.step() == 0 and index.applied == [] and log.assigns == []
    assert f.status()["committed_offset"] is None


def test_starts_from_the_index_position_and_again_after_a_pause() -> None:
    t, log, index = [0.0], _Log(records=30, committed=30), _Index()
    index.applied = [(i, b"") for i in range(12)]  # the index had these (an earlier catch-up or ownership)
    f = _follower(log, index, t)
    assert f.step() == 18 and log.assigns == [12]
    f.pause()  # assigned signatures-0: the stage's own loop writes the index
    assert log.position is None
    index.applied += [(i, b"") for i in range(30, 40)]  # decided as the owner
    log.values += [b"more"] * 20
    log.committed_at = 45
    assert f.step() == 5 and log.assigns == [12, 40]  # a standby again: from the index's position, at once


def test_a_committed_offset_it_cannot_read_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    t, log, index = [0.0], _Log(records=5, committed=5), _Index()
    log.fail_committed = True
    f = _follower(log, index, t)
    with caplog.at_level(logging.WARNING, logger="stream_dedup.service.decisions"):
        for _ in range(3):
            assert f.step() == 0
            t[0] += follower_module.COMMITTED_EVERY
    assert caplog.text.count("cannot read the group's committed offset") == 1
    log.fail_committed = False
    with caplog.at_level(logging.INFO, logger="stream_dedup.service.decisions"):
        assert f.step() == 5
    assert "following the owner again" in caplog.text


def test_end_of_partition_events_are_not_records() -> None:
    t, log, index = [0.0], _Log(records=3, committed=3), _Index()
    log.eof = True
    f = _follower(log, index, t)
    assert f.step() == 3 and [o for o, _ in index.applied] == [0, 1, 2]


def test_its_consumer_joins_no_group_and_reads_the_last_committed_offset_at_once() -> None:
    conf = follower_config({"bootstrap.servers": "b:9092"}, "app.decisions")
    assert conf["group.id"] == "app.decisions" and "group.instance.id" not in conf
    assert conf["enable.auto.commit"] is False
    assert conf["isolation.level"] == "read_uncommitted"  # (no wait on an open transaction's offsets)


def test_a_gap_in_the_offsets_never_skips_a_record() -> None:
    """Offsets 2-4 are gone: a fetch of 5 records from 0 returns 0, 1, 5, 6, 7, past the committed 6;
    the one past it is dropped and read again (re-assigned) once the group has committed it."""
    t, log, index = [0.0], _Log(records=12, committed=6), _Index()
    log.gaps = {2, 3, 4}
    f = _follower(log, index, t)
    assert f.step() == 3 and [o for o, _ in index.applied] == [0, 1, 5]
    log.committed_at = 12
    t[0] += follower_module.COMMITTED_EVERY
    while f.step():
        pass
    assert [o for o, _ in index.applied] == [0, 1, 5, 6, 7, 8, 9, 10, 11]
    assert log.assigns == [0, 6]


def test_the_receipt_sweep_bar_of_a_standby_is_what_it_holds_and_the_group_committed() -> None:
    """A former owner's index may run past the committed offset (decided in an aborted transaction):
    the records there are not answered for good, so its sweep bar stops at the committed offset."""
    t, log, index = [0.0], _Log(records=20, committed=None), _Index()
    f = _follower(log, index, t)
    assert f.settled is None  # nothing committed (or read) yet: no sweep
    index.applied = [(i, b"") for i in range(15)]  # ahead of the group
    log.committed_at = 10
    f.step()
    assert f.settled == 10
    log.committed_at = 18
    t[0] += follower_module.COMMITTED_EVERY
    f.step()
    assert index.position() == 18 and f.settled == 18
