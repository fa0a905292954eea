"""A stage that has records waiting and does nothing with them, while the broker answers.

Every wait in the stages is bounded (fetches, transactional calls, the merge's hold, the
stuck-commit rule of :mod:`.decisions`), yet a stage could still sit still for a reason none of
them sees: a fetcher that stopped after a broker outage, an assignment that never took effect,
a client that keeps a state the broker forgot.  An operator sees only a lag that grows while
``/readyz`` says ready.  :class:`StallWatch` turns that into something seen and acted on:

* a stage tells it when it *progressed* (the decision stage: a transaction committed; stage 1:
  records fetched) and, every :data:`CHECK_INTERVAL` seconds, how many records are *waiting*
  for it (its partitions' high watermarks, asked of the broker, minus where it stands);
* nothing waiting (or the broker not answering, or the stage busy with something that has its
  own limit) counts as progress: only records that could be worked on and are not count;
* :data:`REPORT_SECONDS` without progress: ``/readyz`` says ``stalled: ...``;
* :data:`STALL_SECONDS` without progress: the stage acts (the decision stage decides again from
  its committed offset, and exits to be restarted if that did not help; stage 1 exits: it is
  at-least-once, and its restart reads again from its committed offsets).

A stage that owns nothing has a second watch, for a member that lost its partitions (a session
expired in an outage) and never got them back, while ``/readyz`` showed a standby: the group's
committed offsets (every member's progress, asked of the broker) stand still for
:func:`unowned_limit` seconds while records wait past them.  Then the stage exits and its
restart joins the group again (librdkafka#3396: members stuck after a coordinator moved).  In a
healthy group with another owner the committed offsets move; the limit leaves room for a dead
owner's session to time out and for the new owner's own stall watch to act first.

Kafka Streams has the same kind of guard (``task.timeout.ms``); the limits here are far above
anything a healthy stage shows (a transaction commits every few ms under load).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

#: seconds between two looks at the high watermarks (each one asks the broker)
CHECK_INTERVAL = 5.0
#: seconds without progress, with records waiting, after which ``/readyz`` says so
REPORT_SECONDS = 10.0
#: seconds without progress, with records waiting, after which the stage acts
STALL_SECONDS = 30.0
#: at least this many seconds without the group's committed offsets moving before a stage that
#: owns nothing acts (:func:`unowned_limit`)
UNOWNED_SECONDS = 60.0
STALLED = "stalled: {waiting} records waiting, none handled for {idle:.0f} s"
UNOWNED = ("nothing assigned here and no member progresses: {waiting} records waiting, the group's "
           "committed offsets unchanged for {idle:.0f} s")


def unowned_limit(session_timeout: float) -> float:
    """Seconds an owner-less backlog is left to the group: two session timeouts (a dead owner's
    partitions move) and the new owner's own stall limit, at least :data:`UNOWNED_SECONDS`."""
    return max(UNOWNED_SECONDS, 2 * session_timeout + STALL_SECONDS)


class StallWatch:
    """How long a stage has had records waiting without progressing."""

    def __init__(self, limit: float = STALL_SECONDS, report: float = REPORT_SECONDS,
                 interval: float = CHECK_INTERVAL, clock: Callable[[], float] = time.monotonic,
                 words: str = STALLED) -> None:
        self.limit, self.report, self.interval, self.clock = limit, report, interval, clock
        self.words = words  # the /readyz reason, formatted with waiting and idle
        self.since = clock()  # the last progress (or the last moment nothing was waiting)
        self.waiting = 0
        self.mark: object = None
        self._next_check = 0.0

    def progressed(self) -> None:
        """The stage did something with its records (or cannot be expected to: see the module)."""
        self.since = self.clock()
        self.waiting = 0

    def due(self) -> bool:
        """Whether it is time to count the waiting records again (not while the stage progresses:
        counting asks the broker)."""
        now = self.clock()
        if now < self._next_check or now - self.since < self.interval:
            return False
        self._next_check = now + self.interval
        return True

    def observe(self, waiting: int | None, mark: object = None) -> bool:
        """``waiting`` records could be worked on now (None: unknown, the broker did not answer:
        nothing changes). True when the stage has stalled: records waiting and no progress for
        ``limit`` seconds. ``mark``: where the work stands (e.g. committed offsets), when progress
        is seen from outside: a new mark is progress."""
        if waiting is None:
            return False
        if waiting <= 0 or mark != self.mark:
            self.mark = mark
            self.progressed()
            return False
        self.waiting = waiting
        return self.idle() >= self.limit

    def idle(self) -> float:
        return self.clock() - self.since

    def reason(self) -> str | None:
        """The ``/readyz`` reason while records have waited ``report`` seconds, else None."""
        idle = self.idle()
        if self.waiting <= 0 or idle < self.report:
            return None
        return self.words.format(waiting=self.waiting, idle=idle)


def reasons(label: str, *watches: StallWatch) -> list[str]:
    """The ``/readyz`` reasons of a stage's watches, each after the stage's ``label``."""
    return [f"{label} {r}" for r in (w.reason() for w in watches) if r]


def pick(stall: StallWatch, unowned: StallWatch, away: bool, owned: bool) -> StallWatch | None:
    """Which of a stage's two watches to feed now: ``stall`` while it owns partitions, ``unowned``
    while it owns none, neither while ``away`` (the broker does not answer, or the stage is
    getting ready: other reasons say why). The watch not fed starts its clock again."""
    if away or owned:
        unowned.progressed()
    if away or not owned:
        stall.progressed()
    return None if away else stall if owned else unowned


def backlog(consumer: Any, topic: str, partitions: list[int] | None = None,
            positions: dict[int, int] | None = None) -> tuple[int, tuple[int, ...]] | None:
    """Records waiting in ``partitions`` of ``topic`` (all of them when None), from where each
    stands to its end offset as the broker says now (a stalled fetcher's cached ends are stale):
    ``positions`` given, from there (where this consumer stands); otherwise from the group's
    committed offsets (every member's progress). Returns (waiting, where each stands), or None
    when the broker did not answer in time (no verdict)."""
    try:
        if partitions is None:
            meta = consumer.list_topics(topic, timeout=2).topics.get(topic)
            partitions = sorted(meta.partitions) if meta is not None and meta.error is None else []
        tps = [TopicPartition(topic, p) for p in partitions]
        stands = {tp.partition: tp.offset for tp in consumer.committed(tps, timeout=2)} if positions is None \
            else positions
        waiting, marks = 0, []
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=2, cached=False)
            at = stands.get(p, -1)
            at = at if at >= 0 else low
            waiting += max(0, high - at)
            marks.append(at)
    except KafkaException:
        return None
    return waiting, tuple(marks)
