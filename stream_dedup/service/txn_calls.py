"""Ending a Kafka transaction while the broker may be away: bounded calls, retried, given up.

librdkafka's transactional calls (``commit_transaction``, ``send_offsets_to_transaction``,
``abort_transaction``) take a timeout; one that times out with a retriable error is called again
and resumes the operation ("retry call to resume").  Retried without a limit, a commit can stay
retriable for good: after a 20 s broker freeze of the chaos bench the decision stage once retried
``commit_transaction`` forever and the worker never became ready again.  :func:`retry` bounds it:

* each call blocks at most :data:`CALL_SECONDS` (:func:`call_timeout`), so the limits below are
  looked at between calls;
* still retriable :data:`STUCK_SECONDS` after the operation began, or :data:`BROKER_BACK_SECONDS`
  after the broker probe heard the broker again (a commit that began in an outage), it raises
  :class:`Stuck`: the caller drops that producer, and a new one with the same
  ``transactional.id`` settles the open transaction in its ``init_transactions``;
* an error that requires an abort raises :class:`Abort`; any other error is fatal.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from .deciding import FatalError

#: a commit (or abort) still failing with retriable errors this many seconds after it started is
#: given up (with the 60 s rule alone, one freeze run of the chaos bench was ready again 40 s
#: after the freeze) ...
STUCK_SECONDS = 60.0
#: ... or this many seconds after the broker probe hears the broker again
BROKER_BACK_SECONDS = 10.0
#: longest one transactional call blocks
CALL_SECONDS = 5.0


class Abort(Exception):
    """The current transaction must be aborted and its records decided again."""


class Stuck(Exception):
    """The producer could not end the transaction (:data:`STUCK_SECONDS`, :data:`BROKER_BACK_SECONDS`): replace it."""


def give_up_at() -> float:
    """When an operation that begins now is given up (:data:`STUCK_SECONDS`)."""
    return time.monotonic() + STUCK_SECONDS


def call_timeout(give_up: float) -> float:
    """Seconds one transactional call may block: to ``give_up``, at most :data:`CALL_SECONDS`, at
    least one (a librdkafka timeout of 0 does not wait at all)."""
    return min(CALL_SECONDS, max(1.0, give_up - time.monotonic()))


def retry(op: Callable[[], Any], give_up: float, answering_since: Callable[[], float | None],
          on_trouble: Callable[[str], None]) -> None:
    """``op`` until it succeeds; :class:`Stuck` when it still fails retriably at ``give_up``, or
    :data:`BROKER_BACK_SECONDS` after ``answering_since()`` (when the broker probe heard the broker
    again; None while it does not) or after ``op`` began, if the broker answered all along.
    ``on_trouble`` is told each retriable error."""
    began = time.monotonic()
    while True:
        try:
            op()
            return
        except KafkaException as exc:
            err = exc.args[0]
            if err.retriable():
                on_trouble(str(err))
                now, back = time.monotonic(), answering_since()
                if now >= give_up or (back is not None and now - max(back, began) >= BROKER_BACK_SECONDS):
                    raise Stuck(str(err)) from exc
                time.sleep(0.1)
                continue
            # FENCED_INSTANCE_ID says it is abortable, but another member took this static id
            # (or librdkafka fenced us by our own re-join): this consumer can never commit
            # again, so it is fatal like the rest; only a new client recovers
            if err.txn_requires_abort() and err.code() != KafkaError.FENCED_INSTANCE_ID:
                raise Abort(str(err)) from exc
            raise FatalError(str(err)) from exc
