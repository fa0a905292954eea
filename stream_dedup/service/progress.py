"""Stage 1's progress across workers: the order of input partitions that other workers own.

Each stage-1 process merges the partitions *it* owns by timestamp (:mod:`.ordering`). With
several workers, the signatures topic interleaves their merged streams, and a worker that stops
(killed, restarted, cut off) leaves a gap: while it is away, the others send newer records of
their partitions, and its backlog reaches the decision stage after them, so a copy can be
decided before its original. Measured on the chaos bench (two workers, the decision-stage owner
killed 10 times): 893 records decided after a later-produced one, F1 0.9793 against 0.9970.

So every stage-1 process that does not own all input partitions publishes, at least every
:data:`PUBLISH_INTERVAL` seconds, one small record on ``<signatures topic>.progress``: for each
partition it owns, either *caught up* (``null``: it has sent everything of the partition that
has arrived), or the **sent watermark** ``X``: every record of the partition with a timestamp
below ``X`` has been sent (the oldest record it still holds, or the newest it has fetched when
it holds none; ``-1`` before its first fetch). Each such process reads the others' records and
holds a record of its own (timestamp ``t``), for at most ``--order-wait-workers`` seconds since
it arrived, while another process's partition:

* is *silent*: nothing heard from its owner for :data:`SILENT` seconds (a worker killed or cut
  off; its partitions wait for its restart, static membership), for at most
  ``--order-wait-workers`` after it fell silent: a worker gone for good holds nobody longer;
* or is *behind* with ``X < t - 50 ms`` (a restarted worker's backlog; :data:`.ordering.SLACK_MS`):
  records less than that apart may go in either order, so that two backlogs (a restart, an
  outage) advance by at least that much event time per exchange of progress records, not record
  by record. Measured (chaos bench, two workers, the owner killed 10 times, on this 2-core
  machine): F1 0.9793 without this, 0.9857 with 300 ms of slack, 0.9918 with 50 ms, against
  0.9970 in file order; the largest gap 179 records, then 50 (at the start, before any fault).

A process publishes at once when its watermarks change, else every :data:`PUBLISH_INTERVAL`. A
partition of another process not heard of since this process's assignment counts as silent.

A *caught up* read late is only a watermark: a record saying "caught up" that was published more
than :data:`SILENT` seconds before it is read (by its Kafka timestamp against this host's clock)
counts as the watermark of its publication time, since the partition may have received a backlog
since. This matters when the reader itself stood still: after a freeze its first fetch returns the
progress records of before the freeze, and taking their "caught up" at face value let a frozen
worker release its whole backlog ahead of the others' held records (measured: a gap of 179
records where the rule otherwise keeps it under 20). Clocks that differ by more than that between
hosts make every such record a watermark: records then wait about the difference longer.

The decision stage is unchanged: it decides in signatures-topic order, so the exactly-once
argument of :mod:`.decisions` and its catch-up replays stand as they are. Holding is stage 1's,
which is at-least-once: a held record's input offset is not stored, so a crash reads it again.
A single worker that owns every input partition publishes nothing and holds nothing for anyone.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_END, TIMESTAMP_NOT_AVAILABLE, Consumer, KafkaException, TopicPartition

log = logging.getLogger("stream_dedup.service.stage1")

#: seconds between a stage-1 process's progress records
PUBLISH_INTERVAL = 0.05
#: seconds without a progress record after which a partition's owner counts as silent
SILENT = 0.2
#: seconds a record of a caught-up partition is held before its timestamp is published as the
#: partition's watermark (a shorter hold is the merge's own, over within milliseconds)
HELD_LONG = 2 * PUBLISH_INTERVAL
#: seconds after the process itself stood still during which none of its partitions counts as caught up
STALE_SECONDS = 2.0
#: the sent watermark before the first fetch: nothing is known, every later record waits
UNKNOWN = -1


def progress_topic(signatures_topic: str) -> str:
    """The topic of the stage-1 processes' progress records (one partition)."""
    return f"{signatures_topic}.progress"


def encode(member: str, partitions: dict[int, int | None]) -> bytes:
    """A progress record: ``member`` (the publishing process) and each owned partition's sent
    watermark (ms; ``None`` caught up, :data:`UNKNOWN` nothing fetched yet)."""
    return json.dumps({"member": member, "partitions": {str(p): x for p, x in partitions.items()}},
                      separators=(",", ":")).encode()


def decode(value: bytes | None) -> tuple[str, dict[int, int | None]] | None:
    """``(member, {partition: watermark})`` of a progress record, or None for anything else."""
    try:
        obj = json.loads(value or b"")
        return str(obj["member"]), {int(p): (None if x is None else int(x)) for p, x in obj["partitions"].items()}
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


class ForeignProgress:
    """What the other stage-1 processes last said of their partitions, and whether it holds a record."""

    def __init__(self, wait: float, member: str, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.wait = wait
        self.member = member
        self.clock = clock
        self.wall = wall  # this host's clock, against the progress records' Kafka timestamps
        self.heard: dict[int, tuple[float, int | None]] = {}  # partition -> (when heard, watermark)
        self.since = clock()
        self.expected: set[int] = set()  # the input partitions of other processes (silent until heard)
        self.silent: set[int] = set()  # partitions logged as silent (one line per change, not per record)

    def expect(self, partitions: set[int], owned: set[int]) -> None:
        """After an assignment: ``partitions`` are the input topic's, ``owned`` this process's."""
        self.forget(owned)
        if partitions - owned - self.expected - set(self.heard):
            self.since = self.clock()  # partitions never heard of: silent from now on
        self.expected = partitions - owned

    def update(self, records: list[Any], owned: set[int]) -> None:
        """Take the progress records ``records`` (messages) in; partitions in ``owned`` are ours."""
        now, wall_ms = self.clock(), self.wall() * 1000.0
        for m in records:
            if m.error() is not None:
                continue
            said = decode(m.value())
            if said is None or said[0] == self.member:
                continue
            kind, published = m.timestamp()
            late = kind != TIMESTAMP_NOT_AVAILABLE and wall_ms - published > SILENT * 1000.0
            for part, mark in said[1].items():
                if mark is None and late:  # caught up back then: a backlog may have come since
                    mark = published
                if part not in owned:
                    if part not in self.heard or part in self.silent:
                        self.silent.discard(part)
                        log.info("stage 1: input partition %d heard from %s (%s)", part, said[0],
                                 "caught up" if mark is None else f"watermark {mark}")
                    self.heard[part] = (now, mark)

    def forget(self, owned: set[int]) -> None:
        """Partitions now ours: what others said of them no longer counts."""
        for part in owned:
            self.heard.pop(part, None)

    def blocking(self, ts: int) -> int | None:
        """A partition of another process that holds a record of timestamp ``ts`` (ms), or None."""
        now = self.clock()
        if now - self.since < SILENT + self.wait:
            for part in self.expected:
                if part not in self.heard:  # never heard of since the assignment: silent
                    return part
        for part, (heard, mark) in self.heard.items():
            quiet = now - heard
            if quiet > SILENT:
                if part not in self.silent:
                    self.silent.add(part)
                    log.info("stage 1: input partition %d silent for %.1f s: records wait for it for at most "
                             "%.1f s", part, quiet, self.wait)
                if quiet < SILENT + self.wait:  # its owner is silent (for at most the wait)
                    return part
                continue
            if mark is not None and (mark == UNKNOWN or mark < ts):
                return part
        return None


class Exchange:
    """One stage-1 process's progress records: the others' read, its own published. Active only
    while the process owns some but not all input partitions (checked after each assignment, in
    :meth:`tick`: no Kafka call is made from the rebalance callback itself)."""

    def __init__(self, client_conf: dict[str, Any], app_id: str, input_topic: str, signatures_topic: str,
                 member: str, wait: float, on_error: Callable[[Any], None]) -> None:
        self.client_conf, self.app_id, self.member, self.wait = client_conf, app_id, member, wait
        self.input_topic = input_topic
        self.topic = progress_topic(signatures_topic)
        self.on_error = on_error
        self.foreign: ForeignProgress | None = None  # None: holding for nobody
        self.reader: Any = None  # made when first needed: a single worker has none
        self._assigned = False  # an assignment not looked at yet
        self._next_look = 0.0
        self._next_publish = 0.0
        self._published: dict[int, int | None] = {}
        self._last_tick = 0.0
        self._stale_until = 0.0

    def watch(self, owned: set[int]) -> None:
        """An assignment happened (the rebalance callback): :meth:`tick` looks at it."""
        self._assigned = self.wait > 0
        self._next_look = 0.0
        if not owned:
            self.foreign = None

    def _look(self, producer: Any, owned: set[int]) -> None:
        """Whether some input partitions are other processes': then hold for them."""
        now = time.monotonic()
        if now < self._next_look:
            return
        try:
            meta = producer.list_topics(self.input_topic, timeout=2).topics.get(self.input_topic)
            total = len(meta.partitions) if meta is not None and meta.error is None else 0
        except KafkaException as exc:
            log.debug("input topic metadata: %s", exc)
            total = 0
        if not total:  # the broker did not answer: look again in a second
            self._next_look = now + 1.0
            return
        self._assigned = False
        if not (owned and len(owned) < total):
            if self.foreign is not None:
                log.info("stage 1: every input partition is this process's: holding for no other worker")
            self.foreign = None
            return
        if self.reader is None:  # (its first records come ~0.5 s later: until then the others count as silent)
            self.reader = Consumer({**self.client_conf, "group.id": f"{self.app_id}.progress",
                                    "enable.auto.commit": False, "enable.auto.offset.store": False,
                                    "fetch.wait.max.ms": 100, "error_cb": self.on_error})
            self.reader.assign([TopicPartition(self.topic, 0, OFFSET_END)])
        if self.foreign is None:
            self.foreign = ForeignProgress(self.wait, self.member)
            log.info("stage 1: %d of %d input partitions are this process's: records wait for the other "
                     "workers' (--order-wait-workers %.1f s)", len(owned), total, self.wait)
        self.foreign.expect(set(range(total)), owned)

    def tick(self, producer: Any, owned: set[int], watermarks: Callable[[bool], dict[int, int | None]]) -> None:
        """Read what the others said; publish this process's watermarks when they are due.

        ``watermarks(stale)``: with ``stale`` True, no partition may count as caught up. It is True for
        :data:`STALE_SECONDS` after this loop itself stood still for :data:`SILENT` (the process was
        frozen, starved or paused): what it knew of the partitions' ends is old then, and a
        partition that looks caught up may have a backlog it has not fetched yet."""
        now = time.monotonic()
        if self._last_tick and now - self._last_tick > SILENT:
            self._stale_until = now + STALE_SECONDS
        self._last_tick = now
        if self._assigned:
            self._look(producer, owned)
        if self.foreign is None:
            return
        records = self.reader.consume(1000, timeout=0)
        if records:
            self.foreign.update(records, owned)
        marks = watermarks(now < self._stale_until)
        if now >= self._next_publish or marks != self._published:  # changes at once, else a heartbeat
            self._next_publish = now + PUBLISH_INTERVAL
            try:
                producer.produce(self.topic, encode(self.member, marks))
                self._published = marks
            except BufferError:  # the broker is slow: the next one goes later
                pass

    def close(self) -> None:
        if self.reader is not None:
            try:
                self.reader.close()
            except Exception:  # noqa: BLE001
                log.debug("progress reader close failed", exc_info=True)
            self.reader = None
