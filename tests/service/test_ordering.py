"""Stage 1's event-time merge of its input partitions (pure logic, a fake clock)."""

from __future__ import annotations

import random

from stream_dedup.service.ordering import OrderBuffer


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def never_caught_up(part, last):
    return False


def test_merges_partitions_by_timestamp_when_every_partition_has_a_head():
    buf = OrderBuffer(0.3, Clock())
    buf.add([(0, 0, 10, "a0"), (0, 1, 40, "a1"), (1, 0, 20, "b0"), (1, 1, 30, "b1")])
    # partition 1's queue empties after b1: a1 (ts 40) must wait for partition 1's next record
    assert buf.release([0, 1], never_caught_up) == ["a0", "b0", "b1"]
    buf.add([(1, 2, 50, "b2")])
    assert buf.release([0, 1], never_caught_up) == ["a1"]


def test_a_caught_up_partition_does_not_hold_live_records():
    buf = OrderBuffer(0.3, Clock(), wall=lambda: 0.05)  # the records (10, 11 ms) are 40 ms old: live
    buf.add([(0, 7, 10, "a7"), (0, 8, 11, "a8")])
    assert buf.release([0, 1], never_caught_up) == []          # partition 1 may still send earlier records
    assert buf.release([0, 1], lambda part, last: part == 1) == ["a7", "a8"]


def test_in_a_backlog_a_caught_up_partition_holds_older_records_until_the_wait():
    """After an outage the producer may still be delivering the caught-up partition's records."""
    clock = Clock()
    buf = OrderBuffer(0.3, clock, wall=lambda: 20.0)  # the records are ~20 s old: a backlog
    buf.add([(0, 7, 10, "a7"), (0, 8, 11, "a8")])
    caught_up = lambda part, last: part == 1  # noqa: E731
    assert buf.release([0, 1], caught_up) == []
    buf.add([(1, 3, 5, "b3")])                                 # partition 1's older record arrives
    assert buf.release([0, 1], caught_up) == ["b3"]            # ...and goes first; then it holds again
    clock.now = 0.31
    assert buf.release([0, 1], caught_up) == ["a7", "a8"]      # not longer than the wait


def test_the_wait_bounds_how_long_a_silent_partition_holds_the_others():
    clock = Clock()
    buf = OrderBuffer(0.3, clock)
    buf.add([(0, 0, 10, "a0")])
    clock.now = 0.29
    assert buf.release([0, 1], never_caught_up) == []
    clock.now = 0.31
    assert buf.release([0, 1], never_caught_up) == ["a0"]


def test_never_reorders_within_a_partition_and_loses_nothing():
    rnd = random.Random(3)
    clock = Clock()
    buf = OrderBuffer(0.3, clock)
    sent = {p: [] for p in range(3)}
    out = []
    for step in range(300):
        p = rnd.randrange(3)
        ts = step * 10 + rnd.randrange(-50, 50)  # producer clocks are not perfectly monotonic
        sent[p].append((p, len(sent[p]), ts, (p, len(sent[p]))))
        buf.add([sent[p][-1]])
        clock.now += 0.01
        out += buf.release([0, 1, 2], never_caught_up)
    clock.now += 1
    out += buf.release([0, 1, 2], never_caught_up)
    assert sorted(out) == sorted(item for recs in sent.values() for *_, item in recs)
    for p in range(3):
        assert [o for q, o in out if q == p] == list(range(len(sent[p])))


def test_wait_zero_passes_everything_through_and_forget_drops_revoked_partitions():
    buf = OrderBuffer(0.0, Clock())
    buf.add([(0, 0, 50, "a"), (1, 0, 10, "b")])
    assert sorted(buf.release([0, 1], never_caught_up)) == ["a", "b"]
    held = OrderBuffer(0.3, Clock())
    held.add([(0, 0, 50, "a"), (1, 0, 10, "b")])
    assert held.forget({1}) == ["a"]
    assert held.release([1], never_caught_up) == ["b"]


def test_records_released_because_the_wait_ran_out_are_counted():
    """Each may be decided out of produce order: stage 1 exports the count (a metric) so that an
    operator sees when the merge gave up waiting; records released merged are not counted."""
    clock = Clock()
    buf = OrderBuffer(0.3, clock)
    buf.add([(0, 0, 10, "a0"), (1, 0, 20, "b0"), (0, 1, 30, "a1")])
    assert buf.release([0, 1], never_caught_up) == ["a0", "b0"]
    assert buf.released_early == 0
    clock.now = 0.31  # partition 1 stays silent: a1 goes without it
    assert buf.release([0, 1], never_caught_up) == ["a1"]
    assert buf.released_early == 1
    buf.add([(0, 2, 40, "a2")])  # a backlog record (old): partition 1 holds it for the wait again
    assert buf.release([0, 1], never_caught_up) == [] and buf.released_early == 1


def test_a_backlog_record_waits_longer_for_a_partition_the_broker_holds_records_of():
    """After a long outage one partition's fetching can resume seconds after the others': while
    the broker holds records of it past where it stands, a backlog record waits for it up to
    BEHIND_WAIT; a partition with nothing more holds it only the usual wait."""
    from stream_dedup.service.ordering import BEHIND_WAIT

    clock = Clock()
    buf = OrderBuffer(0.3, clock, wall=lambda: 100.0)  # records of ~100 s ago: a backlog
    buf.add([(0, 0, 10, "a0"), (0, 1, 30, "a1")])
    asked = []

    def behind(part, last):
        asked.append((part, last))
        return part == 1

    clock.now = 0.31
    assert buf.release([0, 1], never_caught_up, behind=behind) == []  # past the wait: partition 1 is behind
    assert asked and asked[-1] == (1, -1)
    buf.add([(1, 0, 20, "b0")])  # its records arrive: merged in order
    assert buf.release([0, 1], never_caught_up, behind=behind) == ["a0", "b0"]
    clock.now = 0.31 + BEHIND_WAIT  # partition 1 silent again; a1's longest wait is over
    assert buf.release([0, 1], never_caught_up, behind=behind) == ["a1"]
    assert buf.released_early == 1
    buf.add([(0, 2, 40, "a2")])
    clock.now += 0.31
    assert buf.release([0, 1], never_caught_up, behind=lambda part, last: False) == ["a2"]  # nothing more there


def test_live_records_never_wait_on_the_broker_question():
    clock = Clock()
    buf = OrderBuffer(0.3, clock, wall=lambda: 0.05)  # live records
    buf.add([(0, 0, 10, "a0")])
    clock.now = 0.31

    def behind(part, last):
        raise AssertionError("a live record's wait is --order-wait alone")

    assert buf.release([0, 1], never_caught_up, behind=behind) == ["a0"]
