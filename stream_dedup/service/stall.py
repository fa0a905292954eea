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

Kafka Streams has the same kind of guard (``task.timeout.ms``); the limits here are far above
anything a healthy stage shows (a transaction commits every few ms under load).
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: seconds between two looks at the high watermarks (each one asks the broker)
CHECK_INTERVAL = 5.0
#: seconds without progress, with records waiting, after which ``/readyz`` says so
REPORT_SECONDS = 10.0
#: seconds without progress, with records waiting, after which the stage acts
STALL_SECONDS = 30.0


class StallWatch:
    """How long a stage has had records waiting without progressing."""

    def __init__(self, limit: float = STALL_SECONDS, report: float = REPORT_SECONDS,
                 interval: float = CHECK_INTERVAL, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self.report, self.interval, self.clock = limit, report, interval, clock
        self.since = clock()  # the last progress (or the last moment nothing was waiting)
        self.waiting = 0
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

    def observe(self, waiting: int | None) -> bool:
        """``waiting`` records could be worked on now (None: unknown, the broker did not answer:
        nothing changes). True when the stage has stalled: records waiting and no progress for
        ``limit`` seconds."""
        if waiting is None:
            return False
        if waiting <= 0:
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
        return f"stalled: {self.waiting} records waiting, none handled for {idle:.0f} s"
