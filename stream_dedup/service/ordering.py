"""Stage 1's merge of its input partitions into event-time (record timestamp) order.

The decision stage decides in the order of the signatures topic, and a copy decided before its
original makes the original a "duplicate of" its copy.  Kafka keeps order only within a
partition; a consumer fetches partitions in chunks, so without help the signatures interleave
partitions chunk by chunk, seconds apart after a restart's backlog.  :class:`OrderBuffer` is a
k-way merge by timestamp of the partitions a worker owns:

* the record with the smallest ``(timestamp, partition, offset)`` among the partitions' heads is
  released when every other owned partition either has a head (so nothing earlier can come from
  it), or is caught up (its last seen offset + 1 >= its high watermark) while the record is
  *live*, or when the record has waited ``wait`` seconds (a partition whose records do not
  arrive cannot hold the others longer than that);
* a record is live when its timestamp is less than ``wait`` seconds before the wall clock: a
  partition caught up on a live stream gets its next records later.  In a backlog (after a
  restart, or once a broker outage ends) the producer may still be delivering a caught-up
  partition's records of the same period: measured on the chaos bench, trusting "caught up"
  there let hundreds of records of one partition go before older ones of the others, so for
  a record that is not live every partition without a head holds it, for at most ``wait``
  (Kafka Streams' ``max.task.idle.ms`` does the same for every record), and up to
  :data:`BEHIND_WAIT` for a partition the broker holds records of past where it stands: after a
  broker outage longer than the session timeout one partition's fetching can resume seconds
  after the others' (measured on the chaos bench: with only ``wait``, 2,704 records of two
  partitions went before the third's and F1 fell from 0.997 to 0.934);
* within a partition the order is never changed.

Records from partitions owned by *other* workers: with ``foreign`` (:class:`.progress.ForeignProgress`),
a record also waits, for at most that object's wait, while another worker's partition is silent
or behind it (see :mod:`.progress`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .progress import ForeignProgress

#: ms by which a record may be ahead of another worker's sent watermark (:mod:`.progress`)
SLACK_MS = 50.0
#: seconds a backlog record waits, beyond ``wait``, for an owned partition that has nothing
#: fetched yet but is *behind* (the broker holds records of it past where it stands)
BEHIND_WAIT = 5.0


class OrderBuffer:
    """Holds records of several partitions and releases them merged by timestamp."""

    def __init__(self, wait: float, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.wait = wait
        self.clock = clock
        self.wall = wall  # seconds, to compare with the records' timestamps (ms)
        self.queues: dict[Hashable, deque[tuple[int, int, float, Any]]] = {}
        self.last_offset: dict[Hashable, int] = {}
        self.last_ts: dict[Hashable, int] = {}  # the newest timestamp fetched of each partition
        self.size = 0
        #: records released because their wait ran out while a partition (or another worker's)
        #: could still have held an earlier one: each may be decided out of produce order
        self.released_early = 0

    def add(self, records: Iterable[tuple[Hashable, int, int, Any]]) -> None:
        """Add ``(partition, offset, timestamp_ms, item)`` records, each partition's in offset order."""
        now = self.clock()
        for part, offset, ts, item in records:
            self.queues.setdefault(part, deque()).append((ts, offset, now, item))
            self.last_offset[part] = offset
            self.last_ts[part] = ts
            self.size += 1

    def forget(self, keep: set[Hashable]) -> list[Any]:
        """Drop the state of partitions not in ``keep`` (revoked); returns their held items."""
        dropped = []
        for part in [p for p in self.queues if p not in keep]:
            dropped += [rec[3] for rec in self.queues.pop(part)]
            self.last_offset.pop(part, None)
            self.last_ts.pop(part, None)
        self.size -= len(dropped)
        return dropped

    def _live_after(self) -> float:
        """The timestamp (ms) from which a record is live: less than ``wait`` seconds old."""
        return (self.wall() - self.wait) * 1000.0

    def watermarks(self, owned: Iterable[Hashable], caught_up: Callable[[Hashable, int], bool],
                   held_long: float) -> dict[Hashable, int | None]:
        """Each owned partition's sent watermark (:mod:`.progress`): the timestamp below which every
        record of it has been released: its oldest held record's, else, while it is behind, its
        newest fetched one's (-1 before any fetch). None when it is caught up and holds no record
        of a backlog (older than ``wait``) nor any for ``held_long`` seconds or more: a live record
        is held for milliseconds by the merge, and a worker that waited for that would wait for
        the next progress record."""
        out: dict[Hashable, int | None] = {}
        now = self.clock()
        live_after = self._live_after()
        for part in owned:
            q = self.queues.get(part)
            if not caught_up(part, self.last_offset.get(part, -1)):
                out[part] = q[0][0] if q else self.last_ts.get(part, -1)
            else:
                out[part] = q[0][0] if q and (q[0][0] < live_after or now - q[0][2] >= held_long) else None
        return out

    def release(self, owned: Iterable[Hashable], caught_up: Callable[[Hashable, int], bool],
                foreign: ForeignProgress | None = None,
                behind: Callable[[Hashable, int], bool] | None = None) -> list[Any]:
        """The items that may go now, in merged order.

        ``caught_up(partition, last_offset_seen)`` tells whether a partition has nothing more to
        deliver now (last offset seen, -1 for none, + 1 >= high watermark, or the consumer's
        position has reached it). ``foreign``: the other workers' partitions (see :mod:`.progress`).
        ``behind(partition, last_offset_seen)``: whether the broker holds records of a partition
        past where it stands (asked afresh: after an outage one partition's fetching can resume
        seconds after the others'); a backlog record then waits for it up to :data:`BEHIND_WAIT`.
        """
        if self.wait <= 0 and foreign is None:
            out = [rec[3] for q in self.queues.values() for rec in q]
            for q in self.queues.values():
                q.clear()
            self.size = 0
            return out
        now = self.clock()
        live_after = self._live_after()
        owned = list(owned)
        out: list[Any] = []
        while self.size:
            heads = [(q[0][0], part) for part, q in self.queues.items() if q]
            ts, part = min(heads, key=lambda h: (h[0], str(h[1])))
            head = self.queues[part][0]
            with_head = {p for _, p in heads}
            live = ts >= live_after
            blocking = [p for p in owned if p not in with_head
                        and not (live and caught_up(p, self.last_offset.get(p, -1)))]
            if blocking and now - head[2] < self.wait:
                break
            if (blocking and not live and behind is not None and now - head[2] < BEHIND_WAIT
                    and any(behind(p, self.last_offset.get(p, -1)) for p in blocking)):
                break
            # another worker's partitions hold a record more than SLACK ahead of them: two backlogs then
            # advance by at least that much per exchange of progress records, not record by record
            held_by_foreign = foreign is not None and foreign.blocking(ts - SLACK_MS) is not None
            if held_by_foreign and now - head[2] < foreign.wait:  # type: ignore[union-attr]
                break
            if blocking or held_by_foreign:
                self.released_early += 1
            self.queues[part].popleft()
            self.size -= 1
            out.append(head[3])
        return out
