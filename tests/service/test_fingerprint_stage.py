"""Stage 1's offset bookkeeping: an input offset is stored only once its signature records, and those
of every batch before, are acknowledged; nothing is stored after a failed delivery or for a
partition no longer owned.  (The loop itself runs against a real broker in tests/integration.)"""

from __future__ import annotations

import threading
from collections import deque

from confluent_kafka import KafkaError

from stream_dedup.service.fingerprint_stage import FingerprintStage, _Sent
from stream_dedup.service.kafka_config import GroupView
from stream_dedup.service.rejoin import RejoinWatch
from stream_dedup.service.stall import UNOWNED, StallWatch


class _Service:
    app_id = "news-dedup"


class _Consumer:
    def __init__(self) -> None:
        self.stored: list[list[tuple[int, int]]] = []

    def store_offsets(self, offsets) -> None:
        self.stored.append(sorted((tp.partition, tp.offset) for tp in offsets))


class _Producer:
    def __init__(self, left: int = 0) -> None:
        self.left = left

    def flush(self, timeout: float) -> int:
        return self.left

    def list_topics(self, topic, timeout):
        return None


class _Msg:
    def topic(self) -> str:
        return "articles.signatures"


def _stage(owned=(0, 1, 2)) -> FingerprintStage:
    from stream_dedup.service.ordering import OrderBuffer
    from stream_dedup.service.progress import Exchange

    stage = object.__new__(FingerprintStage)
    stage.order = OrderBuffer(0.3)
    stage.topic = "articles"
    stage.owned = set(owned)
    stage.pending = deque()
    stage.consumer = _Consumer()
    stage.producer = _Producer()
    stage.fatal = None
    stage.broker_error = stage.client_error = None
    stage.service, stage.out_topic, stage._next_check = _Service(), "articles.signatures", 0.0
    stage.assigned_once, stage.state = False, "joining the group"
    stage.stall, stage.unowned, stage.rejoin = StallWatch(), StallWatch(limit=60), RejoinWatch(36)
    stage.progress = Exchange({}, "news-dedup", "articles", "articles.signatures", "w-0", 0.0,
                              lambda err: None)  # (off)
    return stage


def _batch(stage: FingerprintStage, n: int, offsets: dict[int, int]) -> _Sent:
    sent = _Sent(stage, n, offsets)
    stage.pending.append(sent)
    return sent


def test_offsets_are_stored_in_batch_order_once_every_record_is_acknowledged() -> None:
    stage = _stage()
    first = _batch(stage, 2, {0: 10, 1: 4})
    second = _batch(stage, 1, {0: 12})
    second.delivered(None, _Msg())  # the later batch first: nothing may be stored yet
    assert stage.consumer.stored == []
    first.delivered(None, _Msg())
    assert stage.consumer.stored == []  # one of its two records is still in flight
    first.delivered(None, _Msg())
    # both batches at once, the later offset of partition 0 winning; the next offset to read is stored
    assert stage.consumer.stored == [[(0, 13), (1, 5)]]
    assert not stage.pending


def test_a_failed_delivery_stops_every_store_and_makes_the_stage_fatal() -> None:
    stage = _stage()
    first = _batch(stage, 2, {0: 10})
    second = _batch(stage, 1, {1: 3})
    first.delivered(KafkaError(KafkaError._MSG_TIMED_OUT), _Msg())
    assert stage.fatal and "not delivered" in stage.fatal
    first.delivered(None, _Msg())
    second.delivered(None, _Msg())
    assert stage.consumer.stored == []


def test_offsets_of_partitions_no_longer_owned_are_not_stored() -> None:
    stage = _stage(owned=(1,))
    sent = _batch(stage, 2, {0: 7, 1: 8})
    sent.delivered(None, _Msg())
    sent.delivered(None, _Msg())
    assert stage.consumer.stored == [[(1, 9)]]


def test_drain_drops_what_was_not_acknowledged_in_time() -> None:
    stage = _stage()
    stage.producer = _Producer(left=1)
    sent = _batch(stage, 1, {0: 5})
    stage._drain(0.01)
    assert not stage.pending
    sent.delivered(None, _Msg())  # acknowledged after the revocation gave up on it
    assert stage.consumer.stored == []


def test_a_refused_join_is_reported_once_and_not_cleared_by_a_broker_that_answers(caplog) -> None:
    stage = _stage()

    class _Answers:
        def list_topics(self, topic, timeout):
            return None

    stage.producer = _Answers()
    refused = KafkaError(KafkaError.INCONSISTENT_GROUP_PROTOCOL, "JoinGroup failed")
    for _ in range(3):  # librdkafka reports it at every retry of the join
        stage._on_error(refused)
        stage._recheck_broker()
    reason = stage.client_error
    assert "cannot join the consumer group 'news-dedup'" in reason and "--stage1-client" in reason
    assert stage.broker_error is None
    assert sum("cannot join" in r.message for r in caplog.records) == 1
    stage._on_assign(_NoCommitted(), [])
    assert stage.client_error is None


def test_an_unreachable_broker_is_cleared_once_it_answers() -> None:
    stage = _stage()

    class _Answers:
        def list_topics(self, topic, timeout):
            return None

    stage.producer = _Answers()
    stage._on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    assert stage.broker_error is not None and stage.client_error is None
    stage._recheck_broker()
    assert stage.broker_error is None


class _NoCommitted:
    def committed(self, partitions, timeout):
        return []


class _LaggingConsumer(_Consumer):
    """Positions 10 on every partition; the broker says each ends at ``end``."""

    def __init__(self, end: int) -> None:
        super().__init__()
        self.end = end

    def position(self, partitions):
        from confluent_kafka import TopicPartition
        return [TopicPartition(tp.topic, tp.partition, 10) for tp in partitions]

    def get_watermark_offsets(self, tp, timeout: float = 0, cached: bool = False):
        assert not cached, "a stalled fetcher's cached watermarks are stale: ask the broker"
        return 0, self.end


def _watched(end: int, t: list[float]) -> FingerprintStage:
    """A stage at offset 10 of partitions ending at ``end``, its stall watch on the clock ``t[0]``."""
    stage = _stage()
    stage.consumer = _LaggingConsumer(end=end)
    stage.group_view = GroupView({}, "app", "stage 1", stage.consumer)
    stage.stall = StallWatch(limit=30, report=10, interval=5, clock=lambda: t[0])
    stage.start_offsets = {}
    return stage


def test_input_waiting_and_nothing_fetched_for_the_limit_ends_the_stage() -> None:
    import pytest

    from stream_dedup.service.deciding import FatalError

    t = [0.0]
    stage = _watched(30, t)
    for _ in range(3):
        stage._watch_stall()
        t[0] += 5
    assert any("stalled: 60 records waiting" in r for r in stage.status()["reasons"])
    stage.broker_error = "1/1 brokers are down"  # an outage is not a stall: the clock starts over
    stage._watch_stall()
    stage.broker_error = None
    for _ in range(6):
        stage._watch_stall()
        t[0] += 5
    with pytest.raises(FatalError, match="60 input records waiting and none fetched for 30 s"):
        stage._watch_stall()


def test_caught_up_input_is_not_a_stall() -> None:
    t = [0.0]
    stage = _watched(10, t)
    for _ in range(30):
        stage._watch_stall()
        t[0] += 5
    assert stage.status()["reasons"] == ["waiting for the first partition assignment"]


def test_waiting_for_the_broker_to_take_records_is_not_a_stall() -> None:
    t = [0.0]
    stage = _watched(30, t)

    class FullQueue:
        refusals = 3

        def produce(self, *args, **kwargs) -> None:
            if self.refusals:
                self.refusals -= 1
                raise BufferError("queue full")

        def poll(self, timeout: float) -> int:
            t[0] += 20  # the broker takes its time
            return 0

    stage.producer = FullQueue()
    stage._stop = threading.Event()
    stage._watch_stall()  # records waiting from t=0
    stage._produce(b"v", b"k", _Sent(stage, 1, {0: 1}))  # 60 s blocked on a full queue
    stage._watch_stall()  # no FatalError: only the last 20 s count, not the 60
    assert stage.stall.idle() == 20


class _GroupView(_LaggingConsumer):
    """A member with nothing assigned: the topic's 3 partitions, the group's committed offsets."""

    def __init__(self, end: int) -> None:
        super().__init__(end)
        self.at = [10, 10, 10]

    def list_topics(self, topic, timeout: float = 0):
        from types import SimpleNamespace
        return SimpleNamespace(topics={topic: SimpleNamespace(partitions={0: None, 1: None, 2: None}, error=None)})

    def committed(self, partitions, timeout: float = 0):
        from confluent_kafka import TopicPartition
        return [TopicPartition(tp.topic, tp.partition, self.at[tp.partition]) for tp in partitions]


def test_a_member_outside_the_group_exits_when_nobody_consumes() -> None:
    import pytest

    from stream_dedup.service.deciding import FatalError

    t = [0.0]
    stage = _watched(30, t)
    view = _GroupView(end=30)
    stage.group_view = GroupView({}, "app", "stage 1", view)  # the watch asks its own client, not the stage's consumer
    stage.consumer = None
    stage.unowned = StallWatch(limit=60, report=10, interval=5, clock=lambda: t[0], words=UNOWNED)
    stage.owned = set()  # lost in an outage, or a standby: the same from here
    for i in range(30):  # another member consumes partition 1
        view.at[1] = 10 + i
        stage._watch_stall()
        t[0] += 5
    for _ in range(11):  # nobody consumes (partition 1 is caught up; 0 and 2 wait)
        stage._watch_stall()
        t[0] += 5
    assert any("no member progresses: 40 records waiting" in r for r in stage.status()["reasons"])
    with pytest.raises(FatalError, match="no member has committed an input offset for 60 s while 40 records wait"):
        stage._watch_stall()


def test_a_member_not_let_back_after_losing_its_partitions_is_not_ready_then_exits() -> None:
    """librdkafka#3437 (seen on CI after a 20 s broker freeze): stage 1's partitions were lost and,
    the broker answering again, never assigned again; /readyz said ready. Now it says why not and,
    after the limit of the broker answering, the stage exits to be restarted with a new client."""
    import pytest

    from stream_dedup.service.deciding import FatalError

    t = [0.0]
    stage = _stage()
    stage.rejoin = RejoinWatch(36, clock=lambda: t[0])
    stage.assigned_once = True
    stage._on_lost(None, [])
    assert stage.owned == set() and stage.state == "rebalancing"
    stage.broker_error = "1/1 brokers are down"
    for _ in range(20):  # the outage: nobody rejoins during it, the clock waits
        stage._watch_rejoin()
        t[0] += 5
    assert any("partitions lost 100 s ago, not assigned again yet" in r for r in stage.status()["reasons"])
    stage.broker_error = None
    for _ in range(7):  # 35 s with no client error
        stage._watch_rejoin()
        t[0] += 5

    class Frozen(_Producer):
        def list_topics(self, topic, timeout):
            from confluent_kafka import KafkaException
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))

    stage.producer = Frozen()
    stage._watch_rejoin()  # no client error yet, but the broker does not answer: the clock starts again
    for _ in range(7):
        t[0] += 5
        stage._watch_rejoin()
    stage.producer = _Producer()
    with pytest.raises(FatalError, match="not assigned again in 36 s of the broker answering"):
        t[0] += 1
        stage._watch_rejoin()


def test_an_assignment_after_a_loss_ends_the_rejoin_watch() -> None:
    t = [0.0]
    stage = _stage()
    stage.rejoin = RejoinWatch(36, clock=lambda: t[0])
    stage.assigned_once = True
    stage._on_lost(None, [])
    t[0] += 20
    stage._on_assign(None, [])  # rejoined as a standby (an empty assignment)
    assert stage.state == "standby" and stage.status()["reasons"] == []
    t[0] += 100
    stage._watch_rejoin()  # no error


def test_records_the_merge_released_early_are_counted_per_member(caplog) -> None:
    import logging

    from stream_dedup.metrics import Metrics

    stage = _stage()
    stage.metrics = Metrics()
    stage._early = stage.metrics.order_released_early.labels("0")
    stage._early_counted, stage._early_logged = 0, 0.0
    stage.order.released_early = 3
    with caplog.at_level(logging.INFO, logger="stream_dedup.service.stage1"):
        stage._count_early()
        stage.order.released_early = 5
        stage._count_early()  # counted, not logged again within EARLY_LOG_SECONDS
    assert stage._early._value.get() == 5
    assert caplog.text.count("records so far released after --order-wait") == 1


def test_behind_asks_the_broker_afresh_at_most_every_quarter_second() -> None:
    import time

    from confluent_kafka import KafkaException

    class Ends:
        calls = 0
        end = 50
        fail = False

        def get_watermark_offsets(self, tp, timeout: float = 0, cached: bool = True):
            assert not cached, "a stuck partition's cached end is stale: ask the broker"
            self.calls += 1
            if self.fail:
                raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
            return 0, self.end

    stage = _stage()
    ends = Ends()
    stage.group_view, stage.start_offsets, stage._ends = GroupView({}, "app", "stage 1", ends), {1: 20}, {}
    assert stage._behind(1, 30)  # the broker holds 31..49
    assert not stage._behind(1, 49)  # (the same answer, reused): nothing past 49
    assert ends.calls == 1
    assert stage._behind(1, -1)  # nothing fetched yet: from its start offset 20
    stage._ends[1] = (time.monotonic() - 1, 50)  # the answer is old: ask again
    ends.fail = True
    assert not stage._behind(1, 30)  # no answer in time: not behind
