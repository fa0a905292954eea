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
  (Kafka Streams' ``max.task.idle.ms`` does the same for every record);
* within a partition the order is never changed.

Records from partitions owned by *other* workers are merged only by the decision stage's single
order; with one worker per group, or workers that keep up, the order is the produce order.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from typing import Any


class OrderBuffer:
    """Holds records of several partitions and releases them merged by timestamp."""

    def __init__(self, wait: float, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.wait = wait
        self.clock = clock
        self.wall = wall  # seconds, to compare with the records' timestamps (ms)
        self.queues: dict[Hashable, deque[tuple[int, int, float, Any]]] = {}
        self.last_offset: dict[Hashable, int] = {}
        self.size = 0

    def add(self, records: Iterable[tuple[Hashable, int, int, Any]]) -> None:
        """Add ``(partition, offset, timestamp_ms, item)`` records, each partition's in offset order."""
        now = self.clock()
        for part, offset, ts, item in records:
            self.queues.setdefault(part, deque()).append((ts, offset, now, item))
            self.last_offset[part] = offset
            self.size += 1

    def forget(self, keep: set[Hashable]) -> list[Any]:
        """Drop the state of partitions not in ``keep`` (revoked); returns their held items."""
        dropped = []
        for part in [p for p in self.queues if p not in keep]:
            dropped += [rec[3] for rec in self.queues.pop(part)]
            self.last_offset.pop(part, None)
        self.size -= len(dropped)
        return dropped

    def release(self, owned: Iterable[Hashable], caught_up: Callable[[Hashable, int], bool]) -> list[Any]:
        """The items that may go now, in merged order.

        ``caught_up(partition, last_offset_seen)`` tells whether a partition has nothing more to
        deliver now (last offset seen, -1 for none, + 1 >= high watermark, or the consumer's
        position has reached it).
        """
        if self.wait <= 0:
            out = [rec[3] for q in self.queues.values() for rec in q]
            for q in self.queues.values():
                q.clear()
            self.size = 0
            return out
        now = self.clock()
        live_after = (self.wall() - self.wait) * 1000.0
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
            self.queues[part].popleft()
            self.size -= 1
            out.append(head[3])
        return out
