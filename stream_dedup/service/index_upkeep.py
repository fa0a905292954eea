"""The decision stage's periodic work on its index, between transactions.

* the receipt sweep (:class:`.receipts.ReceiptSweep`): receipts below the input offsets stage 1
  can no longer send again are dropped;
* retention (``--retention``): articles older than the window are evicted every
  :data:`EVICT_INTERVAL` seconds;
* the snapshot of the index's in-memory lists (``--lists-snapshot-every``): its file written in
  the stage's turn, synced to disk in a thread while the stage goes on deciding, and made valid
  once synced: a restart after a crash loads it and files again only what changed since
  (:mod:`stream_dedup.lists_snapshot`);
* the gauges (every :data:`GAUGE_INTERVAL` seconds): articles in the index, its bytes on disk,
  its memory, and the signatures partition's lag behind the committed offset.

None of it is urgent: each step is cheap when it has nothing to do, and a failing gauge never
stops the stage.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from stream_dedup.lists_snapshot import SnapshotSchedule
from stream_dedup.metrics import Metrics

from .receipts import ReceiptSweep

log = logging.getLogger("stream_dedup.service.decisions")

#: seconds between retention sweeps
EVICT_INTERVAL = 60.0
#: seconds between gauge updates
GAUGE_INTERVAL = 2.0


class IndexUpkeep:
    """What the decision stage does to its index now and then (:meth:`run` after each loop turn)."""

    def __init__(self, dedup: Any, metrics: Metrics, sweep: ReceiptSweep, retention: float | None,
                 clock: Callable[[], float] = time.monotonic, snapshot_every: float | None = None) -> None:
        self.dedup, self.metrics, self.sweep, self.retention, self.clock = dedup, metrics, sweep, retention, clock
        self.snapshot_every = snapshot_every
        self._last_evict = clock()
        self._snapshots = SnapshotSchedule(dedup.index, snapshot_every, clock) if snapshot_every else None
        self._last_gauges = 0.0

    def run(self, committed: int | None, end_offset: Callable[[], int | None] | None, topic: str) -> None:
        """``committed``: the signature offset last committed (None: none yet); ``end_offset``: the
        signatures partition's end as last fetched, for the lag gauge (None: not owned here)."""
        now = self.clock()
        if self.sweep.apply(self.dedup, committed):
            self.metrics.receipt_sweeps.inc()
            log.debug("receipt sweep: dropped receipts below input offsets %s", self.sweep.done)
        if self.retention and now - self._last_evict >= EVICT_INTERVAL:
            self._last_evict = now
            n = self.dedup.evict_expired(time.time())
            if n:
                self.metrics.evictions.inc(n)
                log.info("evicted %d articles older than the retention window", n)
        if self._snapshots is not None:
            self.snapshot()
        if now - self._last_gauges >= GAUGE_INTERVAL:
            self._last_gauges = now
            try:
                self.metrics.index_articles.set(len(self.dedup))
                self.metrics.index_size_bytes.set(self.dedup.disk_bytes())
                self.metrics.lists_snapshot_bytes.set(self.dedup.snapshot_bytes())
                self.metrics.observe_memory(self.dedup.memory_stats())
                high = end_offset() if end_offset is not None and committed is not None else None
                if high is not None and high >= 0:
                    self.metrics.consumer_lag.labels(topic, "0").set(max(0, high - committed))
            except Exception:  # noqa: BLE001 - gauges must never break the stage
                log.debug("gauges failed", exc_info=True)

    def snapshot(self) -> None:
        """Start the lists' snapshot once the interval has passed, and count, time and log the one
        that has ended (:class:`~stream_dedup.lists_snapshot.SnapshotSchedule`)."""
        done = self._snapshots.tick() if self._snapshots is not None else None
        if done is not None:
            written, took, paused = done
            if written:
                self.metrics.lists_snapshots.inc()
                self.metrics.lists_snapshot_seconds.set(took)
                self.metrics.lists_snapshot_pause_seconds.set(paused)
                log.info("wrote the snapshot of the index's in-memory lists (%d articles) in %.2f s, deciding "
                         "nothing for %.2f s of it", len(self.dedup), took, paused)
            else:
                log.warning("the snapshot of the index's in-memory lists was not written (see the log before); "
                            "the next one is due in %.0f s", self.snapshot_every)
