"""The decision stage's view of its own health, between transactions.

:class:`DecisionHealth` is the part of :class:`.decisions.DecisionStage` that runs after each
loop turn (:meth:`~DecisionHealth._housekeeping`): a client error that ends once the broker probe
answers after it; the rejoin watch (:mod:`.rejoin`); the stall watches (:mod:`.stall`: records
waiting and no transaction committed, decide again from the committed offset, then exit; a
standby whose group does not progress, exit), which ask the broker through a client of their
own; and the index upkeep (:mod:`.index_upkeep`).  The transactions themselves stay in
:mod:`.decisions`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka import KafkaError, TopicPartition

from . import kafka_config
from .deciding import FatalError
from .stall import backlog, pick

log = logging.getLogger("stream_dedup.service.decisions")


class DecisionHealth:
    """Mixed into :class:`.decisions.DecisionStage` (it holds the state these read)."""

    # The stage's attributes read and set here (all made in DecisionStage.__init__): service, topic,
    # owned, state, needs_reconcile, committed, consumer, client_conf, probe, metrics, stall,
    # unowned, rejoin, group_view, upkeep, follower, broker_error, _broker_error_at, client_fatal,
    # _rewound_for_stall; and its _rewind().
    service: Any

    def _housekeeping(self) -> None:
        self._broker_back()
        if self.rejoin.overdue(not self.probe.error):
            raise FatalError(self.rejoin.give_up())
        if self.stall.due():
            self._watch_stall()
        # the receipt sweep's bar: the owner's committed offset; a following standby's, only as far as
        # its index holds the committed records (Follower.settled)
        following = self.follower is not None and not self.owned
        self.upkeep.run(self.follower.settled if following else self.committed,  # type: ignore[union-attr]
                        self._end_offset if self.owned else None, self.topic)

    def _end_offset(self) -> int | None:
        _low, high = self.consumer.get_watermark_offsets(TopicPartition(self.topic, 0), cached=True)
        return high

    def _watch_stall(self) -> None:
        """Signature records waiting and no transaction committed for :data:`.stall.STALL_SECONDS`
        while the broker answers: decide again from the committed offset (a fresh assignment and
        fetch); if that does not help either, exit: the worker restarts the stage with new clients."""
        away = bool(self.probe.error) or self.needs_reconcile or self.state in ("reconciling", "catching up")
        watch = pick(self.stall, self.unowned, away, self.owned)
        if watch is self.unowned:
            self._watch_unowned()
        if watch is not self.stall:
            return
        if self.state != "deciding" or self.committed is None:
            self.stall.progressed()
            return
        seen = backlog(self.group_view.client(), self.topic, [0], {0: self.committed})
        if seen is None or not self.stall.observe(seen[0]):
            return  # no verdict (the broker did not answer), or no stall
        waiting = seen[0]
        self.metrics.decision_stalls.inc()
        what = (f"no transaction committed for {self.stall.idle():.0f} s with {waiting} signature records "
                f"waiting (committed offset {self.committed}, end {self.committed + waiting})")
        if self._rewound_for_stall:
            raise FatalError(f"{what}, even after deciding again from the committed offset")
        log.error("decision stage: %s: deciding again from the committed offset", what)
        self._rewound_for_stall = True
        self.stall.progressed()
        self._rewind()

    def _watch_unowned(self) -> None:
        """Nothing assigned here: signature records waiting and the group's committed offset
        standing still for :func:`.stall.unowned_limit` s means no member decides (this one may be
        stuck outside the group): exit, so that the worker restarts the stage and it joins again."""
        seen = backlog(self.group_view.client(), self.topic, [0])  # (dead owner's pending offsets: no answer in time)
        if seen is not None and self.unowned.observe(*seen):
            raise FatalError(f"signatures-0 is not assigned here and no member has committed a decision for "
                             f"{self.unowned.idle():.0f} s while {seen[0]} signature records wait: "
                             "restarting the stage to join the group again")

    def _broker_trouble(self, message: str) -> None:
        if self.broker_error != message:
            log.warning("decision stage: %s (retrying)", message)
        self.broker_error = message
        self._broker_error_at = time.monotonic()

    def _broker_back(self) -> None:
        """A client error the broker probe has answered since is over, records or not: an idle
        stage would otherwise stay not-ready after an outage until a record arrives (measured on
        the chaos bench: 61 s after a freeze, and for good once the feed had ended)."""
        answer = self.probe.last_answer
        if self.broker_error is not None and answer is not None and answer > self._broker_error_at:
            log.info("decision stage: the broker answers again")
            self.broker_error = None

    def _on_error(self, err: KafkaError) -> None:
        if kafka_config.is_fatal(err):
            log.error("fatal Kafka error: %s", err)
            self.client_fatal = str(err)
            return
        self._broker_trouble(str(err))
