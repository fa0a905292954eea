"""Stage 1's view of its own health: client errors, the broker coming back, and the watches.

:class:`Stage1Health` is the part of :class:`.fingerprint_stage.FingerprintStage` that decides
what ``/readyz`` says and when the stage gives up: a client error noted once per change and
cleared when the broker answers or records flow; the stall, group and rejoin watches
(:mod:`.stall`, :mod:`.rejoin`), which ask the broker through a client of their own; the lag
gauges from librdkafka's statistics; the count of records the merge released early.  The loop
itself (fetch, merge, fingerprint, send, store offsets) stays in :mod:`.fingerprint_stage`.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from . import kafka_config
from .deciding import FatalError
from .stall import backlog, pick

log = logging.getLogger("stream_dedup.service.stage1")

#: seconds between looks at the broker while the last client error stands
RECHECK_INTERVAL = 2.0
#: seconds between two log lines about records the merge released early
EARLY_LOG_SECONDS = 10.0

#: client errors that mean the broker cannot be reached (cleared once it answers again); any other
#: error (the group refused us, authorisation) stands until the stage is assigned or records flow
UNREACHABLE = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE,
                         KafkaError._TIMED_OUT, KafkaError.NETWORK_EXCEPTION})


def describe_error(err: KafkaError, group: str) -> str:
    """What ``/readyz`` and the log say of a client error (the usual cause where there is one)."""
    if err.code() == KafkaError.INCONSISTENT_GROUP_PROTOCOL:
        return (f"stage 1 cannot join the consumer group {group!r}: its other members use another "
                "--stage1-client (stop every worker of this app id to switch)")
    return f"stage 1: {err.str()}"


class Stage1Health:
    """Mixed into :class:`.fingerprint_stage.FingerprintStage` (it holds the state these read)."""

    # The stage's attributes read and set here: service, topic, out_topic, owned, order, consumer,
    # producer, metrics, stall, unowned, rejoin, group_view, broker_error, client_error,
    # client_fatal, client_conf, start_offsets, _next_check, _early, _early_counted, _early_logged,
    # _lag_labels (all made in FingerprintStage.__init__).
    service: Any

    def _count_early(self) -> None:
        """Count records the merge let go before a silent partition could send an earlier one; say so
        in the log at most every :data:`EARLY_LOG_SECONDS` (a backlog after an outage makes many)."""
        new = self.order.released_early - self._early_counted
        self._early_counted = self.order.released_early
        self._early.inc(new)
        now = time.monotonic()
        if now - self._early_logged >= EARLY_LOG_SECONDS:
            self._early_logged = now
            log.info("stage 1: %d records so far released after --order-wait with a partition still silent: "
                     "they may be decided out of produce order", self._early_counted)

    def _watch_stall(self) -> None:
        """Input records waiting and none fetched for :data:`.stall.STALL_SECONDS` while the broker
        answers: exit, so that the worker restarts the stage (it reads again from its committed offsets)."""
        watch = pick(self.stall, self.unowned, self.broker_error is not None, bool(self.owned))
        if watch is self.unowned:
            self._watch_unowned()
        if watch is not self.stall:
            return
        try:
            at = {tp.partition: tp.offset if tp.offset >= 0 else self.start_offsets.get(tp.partition, -1)
                  for tp in self.consumer.position([TopicPartition(self.topic, p) for p in sorted(self.owned)])}
        except KafkaException:
            return  # the broker did not answer this time: no verdict
        seen = backlog(self.group_view.client(), self.topic, sorted(self.owned), at)
        if seen is None:
            return
        waiting = seen[0]
        if self.stall.observe(waiting):
            raise FatalError(f"{waiting} input records waiting and none fetched for {self.stall.idle():.0f} s "
                             "while the broker answers: restarting the stage")

    def _watch_rejoin(self) -> None:
        """Partitions lost and no assignment since, for :func:`.rejoin.rejoin_limit` s of the broker
        answering: exit, so that the worker restarts the stage with a new client (librdkafka#3437)."""
        if not self.rejoin.overdue(self.broker_error is None):
            return
        try:  # a frozen broker may have raised no client error yet: ask it (once per limit)
            self.producer.list_topics(self.out_topic, timeout=2.0)
        except KafkaException:
            self.rejoin.away()
            return
        raise FatalError(self.rejoin.give_up())

    def _watch_unowned(self) -> None:
        """Nothing assigned here: input records waiting and the group's committed offsets standing
        still for :func:`.stall.unowned_limit` s means no member consumes (this one may be stuck
        outside the group): exit, so that the worker restarts the stage and it joins again."""
        seen = backlog(self.group_view.client(), self.topic)
        if seen is not None and seen[1] and self.unowned.observe(*seen):
            raise FatalError(f"no input partition is assigned here and no member has committed an input offset for "
                             f"{self.unowned.idle():.0f} s while {seen[0]} records wait: restarting the stage to "
                             "join the group again")

    # ------------------------------------------------------------------ client errors and gauges
    def _on_stats(self, raw: str) -> None:
        """Consumer lag per owned input partition (committed offset to high watermark), from librdkafka's statistics."""
        try:
            parts = json.loads(raw).get("topics", {}).get(self.topic, {}).get("partitions", {})
        except ValueError:
            return
        labels = set()
        for key, p in parts.items():
            part = int(key)
            lag = p.get("consumer_lag", -1)
            if part < 0 or part not in self.owned or lag is None or lag < 0:
                continue
            labels.add(key)
            self.metrics.consumer_lag.labels(self.topic, key).set(lag)
        for key in self._lag_labels - labels:
            try:
                self.metrics.consumer_lag.remove(self.topic, key)
            except KeyError:
                pass
        self._lag_labels = labels

    def _client_trouble(self, err: KafkaError) -> None:
        """Note a client error: logged once per change, shown on ``/readyz`` until it is over."""
        if err.code() in UNREACHABLE:
            if self.broker_error != str(err):
                log.warning("stage 1: %s (retrying)", err)
            self.broker_error = str(err)
            return
        message = describe_error(err, self.service.app_id)
        if self.client_error != message:
            log.warning("%s (retrying)", message)
        self.client_error = message

    def _broker_back(self) -> None:
        if self.broker_error is not None:
            log.info("stage 1: the broker answers again")
            self.broker_error = None

    def _flowing(self) -> None:
        """Records flow: whatever client error stood is over."""
        self._broker_back()
        if self.client_error is not None:
            log.info("stage 1: records flow again")
            self.client_error = None

    def _recheck_broker(self) -> None:
        """While an error stands and no record flows, ask the broker now and then whether it answers."""
        now = time.monotonic()
        if now < self._next_check:
            return
        self._next_check = now + RECHECK_INTERVAL
        try:
            self.producer.list_topics(self.out_topic, timeout=1.0)
        except KafkaException:
            return
        self._broker_back()

    def _on_error(self, err: KafkaError) -> None:
        if kafka_config.is_fatal(err):
            log.error("fatal Kafka error: %s", err)
            self.client_fatal = str(err)
            return
        self._client_trouble(err)

