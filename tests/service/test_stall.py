"""The stall watch: records waiting and no progress for its limit, while the broker answers."""

from __future__ import annotations

from stream_dedup.service.stall import StallWatch


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_records_waiting_without_progress_stall_after_the_limit() -> None:
    clock = Clock()
    watch = StallWatch(limit=30, report=10, interval=5, clock=clock)
    assert not watch.due()  # progressed within the interval (made just now): nothing to ask
    clock.t += 5
    assert watch.due() and not watch.due()  # then one look per interval
    assert not watch.observe(40)
    clock.t += 4
    assert watch.reason() is None  # 9 s: under the report limit
    clock.t += 1
    assert watch.reason() == "stalled: 40 records waiting, none handled for 10 s"
    assert not watch.observe(45)
    clock.t += 20
    assert watch.observe(45)  # 30 s without progress
    watch.progressed()
    assert watch.reason() is None and not watch.observe(45)


def test_progress_or_nothing_waiting_restarts_the_clock() -> None:
    clock = Clock()
    watch = StallWatch(limit=30, report=10, interval=5, clock=clock)
    watch.observe(10)
    clock.t += 25
    watch.progressed()  # e.g. a transaction committed
    clock.t += 25
    assert not watch.observe(10)
    clock.t += 10
    assert not watch.observe(0)  # caught up meanwhile: idle is not stalled
    clock.t += 25
    assert not watch.observe(10)
    clock.t += 5
    assert watch.observe(10)


def test_an_unknown_count_is_no_verdict() -> None:
    clock = Clock()
    watch = StallWatch(limit=30, report=10, interval=5, clock=clock)
    watch.observe(10)
    clock.t += 40
    assert not watch.observe(None)  # the broker did not say: nothing is claimed, nothing forgotten
    assert watch.observe(10)
