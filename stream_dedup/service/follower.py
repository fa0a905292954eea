"""The warm standby: a decision stage that owns nothing keeps its index as current as the owner's.

Each worker's decision stage has an index of its own, and only the owner of ``signatures-0``
writes to it as it decides.  A standby that takes over must first replay, from the signatures
topic, everything decided since its index last moved (:mod:`.catchup`): on a standby that never
owned, the whole history, roughly 5-7 minutes per million articles, during which nothing is
decided.  So, with ``--standby-follow`` (on by default), a standby applies the records the group has
*committed* while it waits (the same :meth:`.deciding.Decider.apply_records` as the catch-up, in
the same order), and a takeover replays only what was committed in the last moments.

Following up to the group's committed offset, never past it, keeps the argument of
:mod:`.decisions` intact: the follower's index holds nothing that the catch-up would not have put
there, and the owner's decisions are a function of the signatures log, so the standby's index is
the one the owner had at that offset.  The follower runs in the decision stage's own loop, a
bounded step at a time (one fetched chunk, at most :data:`CHUNK` records), so the group membership
callbacks are served between steps and no second thread ever writes the index.  Its consumer is
not a member of any group (manual ``assign``); it stops (``unassign``) when the stage is assigned
``signatures-0``, and starts again from the index's position when it is a standby again.

Cost: the standby decides every article once more (the owner's decide CPU, on the standby's
cores). ``--standby-follow 0`` turns it off (a standby then idles, and a takeover replays).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from . import kafka_config

log = logging.getLogger("stream_dedup.service.decisions")

#: most records one step applies (one engine batch's worth: a step must leave the loop soon)
CHUNK = 500
#: seconds between reads of the group's committed offset
COMMITTED_EVERY = 1.0
#: seconds one step waits for records it knows are there (a fetch in flight)
FETCH_WAIT = 0.05
#: seconds a committed-offset read may take (the broker not answering: the step is skipped)
COMMITTED_TIMEOUT = 1.0


def follower_config(client_conf: dict[str, Any], group: str) -> dict[str, Any]:
    """A consumer that reads ``signatures-0`` by manual assignment: no member of ``group``, no
    commits, a small fetch queue (it holds at most a few chunks ahead of the index).

    ``read_uncommitted`` makes its committed-offset reads return the group's last *committed*
    offset at once: a ``read_committed`` client asks for stable offsets and waits while the owner
    has a transaction open (the signatures topic itself has no transactions: the same records)."""
    return {**kafka_config.group_view_config(client_conf, group), "auto.offset.reset": "earliest",
            "isolation.level": "read_uncommitted", "queued.max.messages.kbytes": 4096, "fetch.wait.max.ms": 100}


class Follower:
    """Applies the committed signature records beyond the index's position (see the module doc).

    ``apply`` is :meth:`.deciding.Decider.apply_records`; ``position`` gives the first offset the
    index has not applied. ``consumer``: a stand-in for the one made from :func:`follower_config`.
    """

    def __init__(self, client_conf: dict[str, Any], topic: str, group: str,
                 apply: Callable[[list[tuple[int, bytes]]], None], position: Callable[[], int],
                 clock: Callable[[], float] = time.monotonic, consumer: Any = None) -> None:
        self._conf = follower_config(client_conf, group)
        self.topic = topic
        self._apply, self._position = apply, position
        self._clock = clock
        self._consumer: Any = consumer
        self._assigned_at: int | None = None  # where the consumer was assigned (None: not assigned)
        self._next_read = 0.0
        self.committed: int | None = None  # the group's committed offset as last read
        self.applied = 0  # records applied since the stage started
        self._trouble: str | None = None

    @property
    def behind(self) -> int:
        """Committed signature records the index has not applied (as of the last read)."""
        return 0 if self.committed is None else max(0, self.committed - self._position())

    @property
    def settled(self) -> int | None:
        """The offset below which the group has committed every record and this index holds it (None:
        nothing committed yet): a former owner's index may run ahead of the committed offset (an
        aborted transaction), and records past that offset are not answered for good."""
        return None if self.committed is None else min(self.committed, self._position())

    def step(self) -> int:
        """Apply at most one chunk of what the group has committed beyond the index; the records applied."""
        now = self._clock()
        if now >= self._next_read:
            self._next_read = now + COMMITTED_EVERY
            try:
                self.committed = kafka_config.committed_offset(self._client(), self.topic, COMMITTED_TIMEOUT)
            except KafkaException as exc:
                self._say(f"cannot read the group's committed offset: {exc.args[0]}")
                return 0
        start = self._position()
        if self.committed is None or start >= self.committed:
            return 0
        consumer = self._client()
        if self._assigned_at != start:
            consumer.assign([TopicPartition(self.topic, 0, start)])
            self._assigned_at = start
        chunk: list[tuple[int, bytes]] = []
        for m in consumer.consume(min(CHUNK, self.committed - start), timeout=FETCH_WAIT):
            err = m.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    self._say(str(err))
                continue
            self._assigned_at = m.offset() + 1  # where the consumer stands now
            if m.offset() < self.committed:  # (past it only after a gap: read again once committed)
                chunk.append((m.offset(), m.value()))
        if not chunk:
            return 0
        self._apply(chunk)
        self.applied += len(chunk)
        if self._trouble is not None:
            log.info("decision stage (standby): following the owner again")
            self._trouble = None
        return len(chunk)

    def pause(self) -> None:
        """Stop fetching (the stage owns ``signatures-0`` now: its catch-up and loop take over the index)."""
        if self._consumer is not None and self._assigned_at is not None:
            try:
                self._consumer.unassign()
            except KafkaException:
                pass
        self._assigned_at = None
        self._next_read = 0.0  # a standby again: read the committed offset at once

    def close(self) -> None:
        if self._consumer is not None:
            kafka_config.close_consumer(self._consumer, "decision stage (standby follower)", 1.0)
            self._consumer = None
            self._assigned_at = None

    def status(self) -> dict[str, Any]:
        return {"committed_offset": self.committed, "behind": self.behind, "applied": self.applied}

    def _client(self) -> Any:
        if self._consumer is None:
            self._consumer = Consumer(self._conf)
        return self._consumer

    def _say(self, trouble: str) -> None:
        """Log a problem once (not per step); it clears when records are applied again."""
        if trouble != self._trouble:
            log.warning("decision stage (standby): %s (following again when it passes)", trouble)
        self._trouble = trouble

