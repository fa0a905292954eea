"""Stage 1's progress across workers (pure logic, a fake clock): what other workers' partitions hold."""

from __future__ import annotations

from stream_dedup.service.ordering import SLACK_MS, OrderBuffer
from stream_dedup.service.progress import SILENT, UNKNOWN, ForeignProgress, decode, encode, progress_topic


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Msg:
    def __init__(self, value: bytes, published_ms: int | None = None) -> None:
        self._value = value
        self._published = published_ms

    def error(self):
        return None

    def value(self) -> bytes:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_NOT_AVAILABLE
        if self._published is None:
            return TIMESTAMP_NOT_AVAILABLE, 0
        return TIMESTAMP_CREATE_TIME, self._published


def caught_up(part, last):
    return True


def test_records_round_trip_and_anything_else_is_ignored():
    assert decode(encode("w1-0", {0: None, 2: 1234, 5: UNKNOWN})) == ("w1-0", {0: None, 2: 1234, 5: UNKNOWN})
    for junk in (b"", b"{", b"[]", b'{"member": "x"}', b'{"member": "x", "partitions": {"a": 1}}', None):
        assert decode(junk) is None
    assert progress_topic("articles.signatures") == "articles.signatures.progress"


def test_own_records_and_own_partitions_are_ignored():
    foreign = ForeignProgress(5.0, "me-0", Clock())
    foreign.update([Msg(encode("me-0", {1: UNKNOWN})), Msg(encode("other-0", {0: UNKNOWN, 2: UNKNOWN})),
                    Msg(b"not json")], owned={0})
    assert set(foreign.heard) == {2}
    foreign.forget({2})  # partition 2 became ours
    assert foreign.heard == {}


def test_a_backlog_behind_a_record_holds_it():
    clock = Clock()
    foreign = ForeignProgress(5.0, "me-0", clock)
    foreign.update([Msg(encode("other-0", {1: 1000, 2: None}))], owned={0})
    assert foreign.blocking(999) is None                       # everything of partition 1 before 1000 is sent
    assert foreign.blocking(1001) == 1                         # partition 1 may still send 1000..1001
    foreign.update([Msg(encode("other-0", {1: None, 2: None}))], owned={0})
    assert foreign.blocking(10**12) is None                    # caught up: holds nobody
    foreign.update([Msg(encode("other-0", {1: UNKNOWN}))], owned={0})
    assert foreign.blocking(0) == 1                            # restarted, nothing fetched yet


def test_a_partition_not_heard_of_since_the_assignment_is_silent():
    clock = Clock()
    foreign = ForeignProgress(5.0, "me-0", clock)
    foreign.expect({0, 1, 2}, owned={0})
    assert foreign.blocking(1) in (1, 2)                       # the other worker's partitions: not heard yet
    foreign.update([Msg(encode("other-0", {1: None, 2: None}))], owned={0})
    assert foreign.blocking(1) is None                         # heard of, caught up
    lonely = ForeignProgress(5.0, "me-0", clock)
    lonely.expect({0, 1, 2}, owned={0})
    clock.now += SILENT + 5.01
    assert lonely.blocking(1) is None                          # nobody spoke up: holds nobody any longer


def test_a_silent_owner_holds_records_for_at_most_the_wait():
    clock = Clock()
    foreign = ForeignProgress(5.0, "me-0", clock)
    foreign.update([Msg(encode("other-0", {1: None}))], owned={0})
    clock.now = SILENT / 2
    assert foreign.blocking(1) is None                         # heard lately, caught up
    clock.now = SILENT + 0.01
    assert foreign.blocking(1) == 1                            # silent: killed or cut off
    clock.now = SILENT + 5.01
    assert foreign.blocking(1) is None                         # gone for good: holds nobody any longer


def test_the_merge_waits_for_another_workers_backlog_then_releases_in_timestamp_order():
    clock = Clock()
    foreign = ForeignProgress(5.0, "me-0", clock)
    buf = OrderBuffer(0.3, clock, wall=lambda: clock.now + 3.0)
    buf.add([(0, 0, 1000, "a"), (0, 1, 2000, "b"), (0, 2, 3000, "c")])
    foreign.update([Msg(encode("other-0", {1: UNKNOWN}))], owned={0})
    assert buf.release([0], caught_up, foreign) == []
    foreign.update([Msg(encode("other-0", {1: 2500}))], owned={0})  # partition 1 sent everything before 2500
    assert buf.release([0], caught_up, foreign) == ["a", "b"]         # (and "c" is 500 ms past that)
    clock.now = 4.0
    foreign.update([Msg(encode("other-0", {1: 2600}))], owned={0})
    assert buf.release([0], caught_up, foreign) == []
    clock.now = 5.01                                                  # "c" arrived 5 s ago: it goes
    foreign.update([Msg(encode("other-0", {1: 2600}))], owned={0})
    assert buf.release([0], caught_up, foreign) == ["c"]


def test_records_within_the_slack_of_another_backlog_go():
    """Two backlogs that waited for each other record by record would advance one progress record at
    a time: records less than SLACK_MS apart may go in either order."""
    clock = Clock()
    foreign = ForeignProgress(5.0, "me-0", clock)
    buf = OrderBuffer(0.3, clock, wall=lambda: 100.0)
    buf.add([(0, 0, 1000, "a"), (0, 1, 1000 + SLACK_MS, "b"), (0, 2, 1001 + SLACK_MS, "c")])
    foreign.update([Msg(encode("other-0", {1: 1000}))], owned={0})
    assert buf.release([0], caught_up, foreign) == ["a", "b"]


def test_watermarks_say_what_each_owned_partition_has_sent():
    clock = Clock()
    buf = OrderBuffer(0.3, clock, wall=lambda: 0.0)
    behind = lambda part, last: part == 3  # noqa: E731  (partition 3 caught up)
    assert buf.watermarks([0], behind, 0.1) == {0: UNKNOWN}             # nothing fetched yet
    buf.add([(0, 5, 700, "x"), (0, 6, 800, "y"), (1, 0, 900, "z"), (3, 0, 950, "w")])
    assert buf.watermarks([0, 1, 3], behind, 0.1) == {0: 700, 1: 900, 3: None}  # 3 holds "w" briefly
    clock.now = 0.1
    assert buf.watermarks([0, 1, 3], behind, 0.1) == {0: 700, 1: 900, 3: 950}  # ...and now for long
    assert buf.release([0, 1, 3], lambda part, last: True) == ["x", "y", "z", "w"]
    assert buf.watermarks([0, 1, 3], behind, 0.1) == {0: 800, 1: 900, 3: None}  # newest fetched, none held
    buf.add([(3, 1, -400, "old")])                                     # a backlog's record (older than the wait)
    assert buf.watermarks([3], behind, 0.1) == {3: -400}              # counts at once


def test_a_caught_up_read_late_is_only_a_watermark():
    """After this process stood still, its first fetch returns the others' progress records of before
    the freeze: their "caught up" says nothing of a backlog that came since, only that everything before
    its publication was sent."""
    clock, wall = Clock(), Clock()
    wall.now = 1_000.0  # seconds: 1,000,000 ms
    foreign = ForeignProgress(5.0, "me-0", clock, wall)
    foreign.update([Msg(encode("other-0", {1: None}), published_ms=1_000_000 - 2_000)], owned={0})
    assert foreign.heard[1][1] == 998_000
    assert foreign.blocking(997_999) is None and foreign.blocking(998_001) == 1
    fresh = 1_000_000 - int(SILENT * 1000) + 10  # published within SILENT: caught up now
    foreign.update([Msg(encode("other-0", {1: None}), published_ms=fresh)], owned={0})
    assert foreign.blocking(10**12) is None
    foreign.update([Msg(encode("other-0", {1: 990_000}), published_ms=900_000)], owned={0})
    assert foreign.heard[1][1] == 990_000  # a watermark read late is still that watermark
