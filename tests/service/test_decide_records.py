"""The decision stage's batched path (``Decider.decide_records``) against its one-record path.

Real engine, real RocksDB index, real signature records made by stage 1's code from the shared
sample; only the Kafka clients are replaced: messages are plain objects and the producer records
what it is given (no broker is needed to compare two ways of deciding).  A second copy of an input
record, a reject record and an undecodable signature record sit inside what would be one batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from stream_dedup.config import EngineConfig, ServiceConfig
from stream_dedup.service import stage1
from stream_dedup.service.catchup import CHECKPOINT_NAME
from stream_dedup.service.decisions import DecisionStage
from stream_dedup.service.kafka_config import GroupView
from stream_dedup.service.serialization import reject_record

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "news_sample.jsonl"


@dataclass
class Msg:
    _offset: int
    _value: bytes
    _key: bytes | None = None

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return self._value

    def key(self) -> bytes | None:
        return self._key

    def headers(self) -> list:
        return []

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000 + self._offset)

    def error(self) -> None:
        return None


class RecordingProducer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, dict]] = []

    def produce(self, topic: str, value: bytes, key: bytes | None = None, headers: object = None) -> None:
        if topic.endswith(".dlq"):  # a dead letter: the input record as it was, with its headers
            self.sent.append((topic, key, {"value": value, "headers": headers}))
            return
        event = orjson.loads(value)
        event.pop("processed_at", None)
        self.sent.append((topic, key, event))


def _messages(engine: EngineConfig) -> list[Msg]:
    lines = SAMPLE.read_bytes().splitlines()[:240]
    items = [(line, "articles", i % 3, i // 3, 1_700_000_000_000 + i * 10) for i, line in enumerate(lines)]
    stage1.init(engine)
    values = []
    for (value, topic, partition, offset, ts), (kind, a, b) in zip(items, stage1.compute(items), strict=True):
        if kind == "sig":
            values.append((b, a.encode()))
        else:
            values.append((reject_record(reason=a, detail=b, key=None, value=value, headers=(), topic=topic,
                                         partition=partition, offset=offset, timestamp_ms=ts, budget=1 << 20).encode(),
                           None))
    # inside one run: a second copy of the 10th input record (stage 1 sent it twice), a bad input
    # record's reject, an undecodable signature record, and a repeated copy of the 5th again
    values.insert(40, values[10])
    bad = reject_record(reason="not_json", detail="Expecting value", key=b"k", value=b"{nope", headers=(),
                        topic="articles", partition=1, offset=10_000, timestamp_ms=1, budget=1 << 20).encode()
    values.insert(60, (bad, b"k"))
    values.insert(90, (b"\x00garbage", b"g"))
    values.insert(91, values[5])
    return [Msg(i, v, k) for i, (v, k) in enumerate(values)]


def _stage(tmp_path: Path, name: str, engine: EngineConfig) -> DecisionStage:
    svc = ServiceConfig(bootstrap_servers="127.0.0.1:9", data_dir=str(tmp_path / name), app_id="t",
                        input_topic="articles", dlq_topic="articles.dlq")
    stage = DecisionStage(svc, engine)
    stage.producer = RecordingProducer()  # type: ignore[assignment]
    return stage


@pytest.mark.parametrize("chunk", [7, 64, 1000])
def test_batched_decisions_equal_one_record_at_a_time(tmp_path: Path, chunk: int) -> None:
    engine = EngineConfig()
    msgs = _messages(engine)
    one, many = _stage(tmp_path, "one", engine), _stage(tmp_path, "many", engine)
    try:
        for m in msgs:
            one.decider.decide_records([m], [])
        observed: list = []
        for i in range(0, len(msgs), chunk):
            many.decider.decide_records(msgs[i:i + chunk], observed)
        assert many.producer.sent == one.producer.sent
        topics = [t for t, _, _ in many.producer.sent]
        # every message answered once except the two second copies; the three bad ones dead-lettered
        assert len(many.producer.sent) == len(msgs) - 2
        assert topics.count(many.service.dlq_topic) >= 2  # the reject and the undecodable record
        assert many.metrics.redelivered._value.get() == one.metrics.redelivered._value.get() == 2
        assert many.decider.last_applied == one.decider.last_applied == msgs[-1].offset()
        assert len(observed) == len(msgs) - 2
        assert many.dedup.checkpoint(CHECKPOINT_NAME) == one.dedup.checkpoint(CHECKPOINT_NAME) == msgs[-1].offset()
        dups = sum(t == many.service.duplicates_topic for t in topics)
        assert dups > 10, dups  # the sample has duplicates: the comparison is not of new articles only
    finally:
        for s in (one, many):
            s.dedup.close()
            s.consumer.close()


def _index_state(stage: DecisionStage, msgs: list[Msg]) -> tuple:
    """What the index holds after the messages: each article's stored decision, each receipt, the checkpoint."""
    from stream_dedup.service.receipts import receipt_token
    from stream_dedup.service.serialization import SignatureDecodeError, decode_stage_record

    decisions, receipts = {}, {}
    for m in msgs:
        try:
            rec = decode_stage_record(m.value())
        except SignatureDecodeError:
            continue
        token = receipt_token(rec.source_topic, rec.source_partition, rec.source_offset)
        receipts[token] = stage.dedup.receipt(token)
        if hasattr(rec, "article_id"):
            d = stage.dedup.decision_of(rec.article_id)
            decisions[rec.article_id] = None if d is None else d.to_event()
    return decisions, receipts, stage.dedup.checkpoint(CHECKPOINT_NAME), len(stage.dedup)


@pytest.mark.parametrize("chunk", [5, 500])
def test_catch_up_in_batches_equals_one_record_at_a_time(tmp_path: Path, chunk: int) -> None:
    """The catch-up (``apply_records``, a fetched chunk at a time) leaves the index as ``apply_only``
    one record at a time does, second copies, rejects and an undecodable record included; a later
    catch-up over records already applied changes nothing, and the live path then decides alike."""
    engine = EngineConfig()
    msgs = _messages(engine)
    head, tail = msgs[:200], msgs[200:]
    one, many = _stage(tmp_path, "one", engine), _stage(tmp_path, "many", engine)
    try:
        for m in head:
            one.decider.apply_only(m.offset(), m.value())
        for i in range(0, len(head), chunk):
            many.decider.apply_records([(m.offset(), m.value()) for m in head[i:i + chunk]])
        assert many.producer.sent == one.producer.sent == []  # the catch-up produces nothing
        state = _index_state(many, head)
        assert state == _index_state(one, head)
        assert sum(r is not None for r in state[1].values()) >= len(head) - 3   # a receipt per input record
        assert state[2] == head[-1].offset() and many.decider.last_applied == head[-1].offset()
        dups = sum(d is not None and d["type"] == "duplicate-of" for d in state[0].values())
        assert dups > 10, dups
        many.decider.apply_records([(m.offset(), m.value()) for m in head[:50]])  # applied before: no change
        assert _index_state(many, head)[:2] == state[:2]
        for s in (one, many):
            s.decider.decide_records(tail, [])
        assert many.producer.sent == one.producer.sent and len(many.producer.sent) > 20
    finally:
        for s in (one, many):
            s.dedup.close()
            s.consumer.close()


# ---------------------------------------------------------------------------------------------------
# a transaction the producer cannot end: the stage replaces the producer instead of retrying forever


class TxnProducer(RecordingProducer):
    """The transactional calls of a producer; ``commit_transaction`` fails retriably ``failures`` times."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures
        self.calls: list[str] = []

    def _call(self, name: str) -> None:
        from confluent_kafka import KafkaError, KafkaException
        self.calls.append(name)
        if name == "commit_transaction" and self.failures:
            self.failures -= 1
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "Transactional API operation "
                                            "(commit_transaction) timed out: retry call to resume", retriable=True))

    def begin_transaction(self) -> None:
        self._call("begin_transaction")

    def send_offsets_to_transaction(self, offsets: list, metadata: object, timeout: float) -> None:
        self._call("send_offsets_to_transaction")

    def commit_transaction(self, timeout: float) -> None:
        self._call("commit_transaction")

    def purge(self) -> None:
        self._call("purge")

    def flush(self, timeout: float) -> int:
        return 0


class GroupConsumer:
    """The consumer calls the loop makes around a transaction; the group's committed offset is fixed."""

    def __init__(self, topic: str, committed: int) -> None:
        from confluent_kafka import TopicPartition
        self.tp = TopicPartition(topic, 0, committed)
        self.assigned: list[list] = []

    def consumer_group_metadata(self) -> None:
        return None

    def committed(self, partitions: list, timeout: float) -> list:
        return [self.tp]

    def assign(self, partitions: list) -> None:
        self.assigned.append([(p.partition, p.offset) for p in partitions])

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list:
        return []

    def close(self) -> None:
        pass


def _stuck_stage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, producer: TxnProducer) -> DecisionStage:
    from stream_dedup.service import txn_calls
    monkeypatch.setattr(txn_calls, "STUCK_SECONDS", 0.5)
    stage = _stage(tmp_path, "stuck", EngineConfig())
    stage.consumer.close()
    # the real consumer (of a broker that is not there) may have reported that while closing
    stage.broker_error = None
    stage.consumer = GroupConsumer(stage.topic, 0)  # type: ignore[assignment]
    stage.producer = producer  # type: ignore[assignment]
    stage.owned = True
    return stage


def test_a_commit_that_stays_retriable_replaces_the_producer_and_decides_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    msgs = _messages(EngineConfig())[:30]
    stuck = TxnProducer(failures=10**9)
    stage = _stuck_stage(tmp_path, monkeypatch, stuck)
    try:
        stage._transaction(msgs)
        # given up after STUCK_SECONDS, not retried forever; nothing counted as committed
        assert stuck.calls[-1] == "purge" and stuck.calls.count("commit_transaction") > 1
        assert stage.producer is None and stage.needs_reconcile and stage.committed is None
        assert stage._txn is None and stage.consumer.assigned[-1] == []
        assert stage.status()["reasons"], "not ready while the transaction is unsettled"
        fresh = TxnProducer(failures=0)
        monkeypatch.setattr(stage, "_new_producer", lambda: fresh)
        stage._reconcile()  # the new producer; assigned again from the group's committed offset
        assert stage.producer is fresh and not stage.needs_reconcile
        assert stage.consumer.assigned[-1] == [(0, 0)]
        stage._transaction(msgs)
        assert fresh.calls == ["begin_transaction", "send_offsets_to_transaction", "commit_transaction"]
        assert stage.committed == msgs[-1].offset() + 1
        # decided again from offset 0: the same events as the transaction that never ended
        assert fresh.sent == stuck.sent and len(fresh.sent) >= 25
    finally:
        stage.dedup.close()


def test_a_commit_that_fails_retriably_for_a_while_is_retried(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    msgs = _messages(EngineConfig())[:10]
    producer = TxnProducer(failures=2)
    stage = _stuck_stage(tmp_path, monkeypatch, producer)
    try:
        stage._transaction(msgs)
        assert producer.calls.count("commit_transaction") == 3 and "purge" not in producer.calls
        assert stage.producer is producer and not stage.needs_reconcile
        assert stage.committed == msgs[-1].offset() + 1
    finally:
        stage.dedup.close()


def test_a_commit_still_failing_after_the_broker_answers_again_is_given_up_sooner(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit that began in a broker outage: given up BROKER_BACK_SECONDS after the probe hears the
    broker again, long before STUCK_SECONDS."""
    import time

    from stream_dedup.service import txn_calls
    msgs = _messages(EngineConfig())[:10]
    stuck = TxnProducer(failures=10**9)
    stage = _stuck_stage(tmp_path, monkeypatch, stuck)
    monkeypatch.setattr(txn_calls, "STUCK_SECONDS", 600.0)
    monkeypatch.setattr(txn_calls, "BROKER_BACK_SECONDS", 0.5)
    try:
        stage.probe.answering_since = time.monotonic() + 0.3  # the broker answers again 0.3 s from now
        started = time.monotonic()
        stage._transaction(msgs)
        took = time.monotonic() - started
        assert stuck.calls[-1] == "purge" and stage.producer is None and stage.needs_reconcile
        assert 0.8 <= took < 5.0, took  # 0.3 s until the broker answered, then 0.5 s
    finally:
        stage.dedup.close()


# ---------------------------------------------------------------------------------------------------
# a stage that sits still with records waiting while the broker answers


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class WaitingConsumer(GroupConsumer):
    """The group's committed offset 0; the broker says the signatures partition ends at ``end``."""

    def __init__(self, topic: str, end: int) -> None:
        super().__init__(topic, 0)
        self.end = end

    def get_watermark_offsets(self, tp: object, timeout: float = 0, cached: bool = False) -> tuple[int, int]:
        assert not cached, "a stalled fetcher's cached watermarks are stale: ask the broker"
        return 0, self.end


def _watched_stage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, end: int, clock: Clock) -> DecisionStage:
    """A stage whose signatures partition ends at ``end``, its stall watch on ``clock``."""
    from stream_dedup.service.stall import StallWatch

    stage = _stuck_stage(tmp_path, monkeypatch, TxnProducer(failures=0))
    stage.consumer = WaitingConsumer(stage.topic, end=end)  # type: ignore[assignment]
    stage.group_view = GroupView({}, "app", "decision stage", stage.consumer)
    stage.stall = StallWatch(limit=30, report=10, interval=5, clock=clock)
    return stage


def test_a_stage_that_decides_nothing_while_records_wait_decides_again_then_exits(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from stream_dedup.service.deciding import FatalError

    clock = Clock()
    stage = _watched_stage(tmp_path, monkeypatch, 120, clock)
    try:
        stage._reconcile()
        assert stage.state == "deciding" and stage.consumer.assigned[-1] == [(0, 0)]
        for _ in range(5):  # 25 s: records wait, nothing is committed, the broker answers
            stage._housekeeping()
            clock.t += 5
        assert any("stalled: 120 records waiting" in r for r in stage.status()["reasons"])
        assert not stage.needs_reconcile
        clock.t += 5
        stage._housekeeping()  # 30 s: assigned afresh from the committed offset
        assert stage.needs_reconcile and stage.consumer.assigned[-1] == []
        assert stage.metrics.decision_stalls._value.get() == 1
        stage._reconcile()
        assert stage.consumer.assigned[-1] == [(0, 0)] and stage.status()["reasons"] == []
        # a commit in between would start over; none comes: the second stall ends the stage
        for _ in range(6):
            stage._housekeeping()
            clock.t += 5
        with pytest.raises(FatalError, match="even after deciding again"):
            stage._housekeeping()
    finally:
        stage.dedup.close()


def test_a_stage_with_nothing_waiting_or_no_broker_is_not_stalled(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    stage = _watched_stage(tmp_path, monkeypatch, 0, clock)
    try:
        stage._reconcile()
        for _ in range(20):  # idle: caught up
            stage._housekeeping()
            clock.t += 5
        stage.consumer.end = 50
        stage.probe.error = "no answer from the broker in 2 s"  # an outage: its own reason, not a stall
        for _ in range(20):
            stage._housekeeping()
            clock.t += 5
        assert not stage.needs_reconcile and stage.metrics.decision_stalls._value.get() == 0
        assert not any("stalled" in r for r in stage.status()["reasons"])
    finally:
        stage.dedup.close()


def test_a_standby_exits_when_no_member_decides_the_waiting_records(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing assigned here (a session lost in an outage and never rejoined looks the same as a
    standby): while the group's committed offset moves, another member decides; when it stands
    still with records waiting for the limit, the stage exits to join the group again."""
    from stream_dedup.service.deciding import FatalError
    from stream_dedup.service.stall import UNOWNED, StallWatch

    clock = Clock()
    stage = _watched_stage(tmp_path, monkeypatch, 100, clock)
    stage.unowned = StallWatch(limit=60, report=10, interval=5, clock=clock, words=UNOWNED)
    stage.owned, stage.state = False, "standby"
    try:
        for i in range(30):  # 150 s: another member commits as it goes
            stage.consumer.tp.offset = min(100, 5 * i)
            stage._housekeeping()
            clock.t += 5
        assert stage.status()["reasons"] == []
        stage.consumer.tp.offset, stage.consumer.end = 40, 140  # ... then nobody does
        for _ in range(12):
            stage._housekeeping()
            clock.t += 5
        assert any("no member progresses: 100 records waiting" in r for r in stage.status()["reasons"])
        with pytest.raises(FatalError, match="no member has committed a decision for 60 s"):
            stage._housekeeping()
    finally:
        stage.dedup.close()


def test_a_client_error_ends_when_the_probe_answers_after_it_even_without_records(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After an outage an idle stage (the feed has ended) stays not ready only until the broker
    probe answers again, not until the next record."""
    import time

    stage = _stuck_stage(tmp_path, monkeypatch, TxnProducer(failures=0))
    try:
        stage.probe.last_answer = time.monotonic()
        stage._broker_trouble('KafkaError{code=_ALL_BROKERS_DOWN,val=-187,str="1/1 brokers are down"}')
        stage._housekeeping()  # the probe's last answer came before the error: it stands
        assert any("brokers are down" in r for r in stage.status()["reasons"])
        stage.probe.last_answer = time.monotonic() + 0.001  # the probe hears the broker
        stage._housekeeping()
        assert stage.broker_error is None and not any("broker" in r for r in stage.status()["reasons"])
    finally:
        stage.dedup.close()


def test_a_stage_not_let_back_after_losing_signatures_0_exits(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """librdkafka#3437: a static member whose session expired in an outage can stay outside the
    group for good. Not ready from the loss on; after the limit of the broker answering (the
    outage itself does not count) the stage exits and its restart joins with a new client."""
    from stream_dedup.service.deciding import FatalError
    from stream_dedup.service.rejoin import RejoinWatch

    clock = Clock()
    stage = _watched_stage(tmp_path, monkeypatch, 0, clock)
    stage.rejoin = RejoinWatch(36, clock=clock)
    try:
        stage._reconcile()
        stage._on_lost(stage.consumer, [])
        assert stage.state == "rejoining" and not stage.owned
        stage.probe.error = "no answer from the broker in 2 s"
        for _ in range(20):
            stage._housekeeping()
            clock.t += 5
        stage.probe.error = None
        for _ in range(7):
            stage._housekeeping()
            clock.t += 5
        assert any("partitions lost 135 s ago, not assigned again yet" in r for r in stage.status()["reasons"])
        with pytest.raises(FatalError, match="not assigned again in 36 s of the broker answering"):
            stage._housekeeping()
        stage._on_assign(stage.consumer, [])  # had it rejoined (as a standby): ready, no exit
        assert stage.state == "standby" and stage.status()["reasons"] == []
        stage._housekeeping()
    finally:
        stage.dedup.close()


class _SignatureLog:
    """signatures-0 as the standby's follower reads it (manual assignment), and the group's committed offset."""

    def __init__(self, msgs: list[Msg], committed: int) -> None:
        self.msgs, self.committed_at, self.position = msgs, committed, None

    def committed(self, tps, timeout: float):
        from confluent_kafka import TopicPartition

        return [TopicPartition(tps[0].topic, 0, self.committed_at)]

    def assign(self, tps) -> None:
        self.position = tps[0].offset

    def unassign(self) -> None:
        self.position = None

    def consume(self, n: int, timeout: float):
        out = self.msgs[self.position:self.position + n]
        self.position += len(out)
        return out

    def close(self) -> None:
        pass


def test_a_standby_follows_what_the_group_committed_into_the_owners_index(tmp_path: Path) -> None:
    """The warm standby (--standby-follow) through the stage's own loop step: its index ends as the
    owner's, at the committed offset and not past it; an assignment pauses it."""
    from confluent_kafka import TopicPartition

    from stream_dedup.service.follower import Follower

    engine = EngineConfig()
    msgs = _messages(engine)
    owner, standby = _stage(tmp_path, "owner", engine), _stage(tmp_path, "standby", engine)
    try:
        committed = len(msgs) - 20  # the owner has committed all but its last 20 records
        owner.decider.decide_records(msgs[:committed], [])
        log = _SignatureLog(msgs, committed)
        standby.follower = Follower({}, standby.topic, "t.decisions", standby.decider.apply_records,
                                    standby._index_position, consumer=log)
        standby.state, standby.owned = "standby", False
        for _ in range(10):
            standby._follow()
        assert standby.decider.last_applied == committed - 1  # level with the owner, not past it
        assert standby.status()["following"] == {"committed_offset": committed, "behind": 0, "applied": committed}
        assert len(standby.dedup) == len(owner.dedup) > 0
        ids = [a.article_id for a in owner.dedup.index.articles(list(range(len(owner.dedup))))]
        # the same decisions stored under the same ids
        assert [standby.dedup.decision_of(i).to_event() for i in ids] == [owner.dedup.decision_of(i).to_event()
                                                                          for i in ids]

        class Assigner:
            def assign(self, parts) -> None:
                pass

        standby._on_assign(Assigner(), [TopicPartition(standby.topic, 0)])  # it owns signatures-0 now
        assert log.position is None and standby.owned and not standby._following()
        assert "following" not in standby.status()
    finally:
        owner.dedup.close()
        standby.dedup.close()


def test_a_standby_far_behind_the_committed_decisions_is_not_ready_until_it_follows_closer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--standby-ready-behind: a following standby whose index is more records behind the group's
    committed offset than the limit gives a reason not to be ready (a rolling update waits for it);
    once it has applied enough, the reason goes; 0 turns the gate off."""
    from dataclasses import replace

    from stream_dedup.service import follower as follower_module
    from stream_dedup.service.follower import Follower

    monkeypatch.setattr(follower_module, "CHUNK", 25)  # a step applies 25 records
    engine = EngineConfig()
    msgs = _messages(engine)
    standby = _stage(tmp_path, "standby", engine)
    try:
        standby.service = replace(standby.service, standby_ready_behind=40)
        committed = len(msgs) - 20
        standby.follower = Follower({}, standby.topic, "t.decisions", standby.decider.apply_records,
                                    standby._index_position, consumer=_SignatureLog(msgs, committed))
        standby.state, standby.owned = "standby", False
        assert standby.status()["reasons"] == []  # the committed offset not read yet: nothing known
        standby._follow()
        behind = standby.status()["following"]["behind"]
        assert behind == committed - 25 > 40
        assert standby.status()["reasons"] == [
            f"standby index {behind} signature records behind the committed decisions "
            "(following; ready within 40, --standby-ready-behind)"]
        standby.service = replace(standby.service, standby_ready_behind=0)
        assert standby.status()["reasons"] == []  # no gate
        standby.service = replace(standby.service, standby_ready_behind=40)
        while standby.status()["following"]["behind"] > 40:
            assert standby.status()["reasons"]
            standby._follow()
        assert standby.status()["reasons"] == []
    finally:
        standby.dedup.close()


def test_a_fingerprint_that_does_not_decode_inside_a_run_costs_only_its_record(tmp_path: Path) -> None:
    """A signature record whose header decodes but whose fingerprint does not (cut short) joins a run;
    decoding the run's fingerprints at once (FingerprintBatch.from_wire) raises, the run is decided one
    record at a time: the same outputs as one at a time, that record dead-lettered."""
    engine = EngineConfig()
    msgs = _messages(engine)[:120]
    cut = msgs[50] = Msg(50, msgs[50].value()[:-1], msgs[50].key())
    one, many = _stage(tmp_path, "one", engine), _stage(tmp_path, "many", engine)
    try:
        for m in msgs:
            one.decider.decide_records([m], [])
        many.decider.decide_records(msgs, [])
        assert many.producer.sent == one.producer.sent
        dead = [v for t, _, v in many.producer.sent if t == many.service.dlq_topic]
        # (the reject, the undecodable signature record and the cut one: processing errors both)
        assert len(dead) == 3 and [v["value"] for v in dead if dict(v["headers"])["dlq.reason"] == b"processing_error"] \
            == [cut.value(), b"\x00garbage"]
        assert sum(t == many.service.duplicates_topic for t, _, _ in many.producer.sent) > 5
    finally:
        for s in (one, many):
            s.dedup.close()
            s.consumer.close()
