"""A group member whose partitions were lost and that is not let back in.

When a consumer's session expires (the broker froze or restarted, the network went away for
longer than ``--session-timeout``), librdkafka reports its partitions *lost* and joins the group
again once the coordinator answers; the rejoin ends in an assignment (an empty one for a
standby). With static membership (``group.instance.id``, which the worker uses so that a restart
keeps its partitions) librdkafka can stay outside the group for good instead (librdkafka#3437,
confluent-kafka-go#494): no assignment ever comes, nothing is consumed, no error is raised.
Seen here on CI after a 20 s broker freeze: stage 1 lost its three input partitions and, with the
broker answering again, never got them back while the decision stage rejoined at once.

:class:`RejoinWatch` makes that state visible and ends it:

* from the moment partitions are lost until the next assignment, ``/readyz`` says
  ``... partitions lost S s ago, not assigned again yet`` (the member consumes nothing);
* the clock runs only while the broker answers (an outage has its own ``/readyz`` reason and
  nobody can rejoin during it);
* :func:`rejoin_limit` seconds of that (the broker answering, still no assignment): the stage
  exits and the worker restarts it with a new client, which joins under the same instance id
  and takes the member's place.

A healthy rejoin takes a few seconds (a JoinGroup/SyncGroup round once the coordinator answers);
the limit leaves room for the other members' rejoins (one session timeout) and 30 s more.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: seconds, beyond one session timeout, a member that lost its partitions is given to rejoin
REJOIN_SECONDS = 30.0


def rejoin_limit(session_timeout: float) -> float:
    """Seconds (the broker answering) after which a member still not assigned again gives up."""
    return float(session_timeout) + REJOIN_SECONDS


class RejoinWatch:
    """How long a member has been out of the group since it lost its partitions."""

    def __init__(self, limit: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self.clock = limit, clock
        self.lost_at: float | None = None  # when the partitions were lost (None: assigned since)
        self.since = 0.0  # the clock's start: the loss, or the last moment the broker did not answer

    @property
    def out(self) -> bool:
        """Partitions lost and no assignment since."""
        return self.lost_at is not None

    def lost(self) -> None:
        self.lost_at = self.since = self.clock()

    def assigned(self) -> None:
        self.lost_at = None

    def overdue(self, broker_answers: bool) -> bool:
        """True once the member has been out for ``limit`` seconds of the broker answering."""
        if self.lost_at is None:
            return False
        if not broker_answers:
            self.away()
            return False
        return self.clock() - self.since >= self.limit

    def away(self) -> None:
        """The broker does not answer now: the clock starts again."""
        self.since = self.clock()

    def reason(self) -> str | None:
        """The ``/readyz`` reason while the member is out of the group, else None."""
        if self.lost_at is None:
            return None
        return f"partitions lost {self.clock() - self.lost_at:.0f} s ago, not assigned again yet (rejoining the group)"

    def give_up(self) -> str:
        """The fatal error's words."""
        lost_at = self.since if self.lost_at is None else self.lost_at
        return (f"partitions lost {self.clock() - lost_at:.0f} s ago and not assigned again in "
                f"{self.limit:.0f} s of the broker answering (librdkafka#3437): restarting the stage "
                "to join the group with a new client")
