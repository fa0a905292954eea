"""The rejoin watch: a member that lost its partitions and is not assigned again."""

from __future__ import annotations

from stream_dedup.service.rejoin import RejoinWatch, rejoin_limit


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_the_limit_counts_only_while_the_broker_answers() -> None:
    clock = Clock()
    watch = RejoinWatch(40, clock=clock)
    assert not watch.out and watch.reason() is None and not watch.overdue(True)
    watch.lost()
    assert watch.out and watch.reason().startswith("partitions lost 0 s ago")
    clock.t += 300
    assert not watch.overdue(False)  # an outage of 300 s: no verdict, the clock starts again
    clock.t += 39
    assert not watch.overdue(True)
    clock.t += 1
    assert watch.overdue(True)
    assert "partitions lost 340 s ago and not assigned again in 40 s" in watch.give_up()
    watch.assigned()
    assert not watch.out and not watch.overdue(True) and watch.reason() is None


def test_the_limit_leaves_a_session_timeout_and_30_s() -> None:
    assert rejoin_limit(6) == 36 and rejoin_limit(30.0) == 60
