"""The decision stage's index upkeep: retention on its interval, gauges, and a failing gauge that
never stops the stage."""

from __future__ import annotations

from stream_dedup.metrics import Metrics
from stream_dedup.service.index_upkeep import EVICT_INTERVAL, GAUGE_INTERVAL, IndexUpkeep


class Index:
    def __init__(self) -> None:
        self.evicted = 0
        self.broken = False

    def __len__(self) -> int:
        return 40

    def disk_bytes(self) -> int:
        if self.broken:
            raise OSError("disk gone")
        return 4096

    def snapshot_bytes(self) -> int:
        return 1024

    def memory_stats(self) -> dict:
        return dict.fromkeys(("memory_budget_bytes", "block_cache_usage_bytes", "band_table_bytes",
                              "passage_lists_bytes", "simhash_table_bytes", "key_tables_bytes", "record_store_bytes", "block_cache_hits",
                              "block_cache_misses"), 7)

    def evict_expired(self, now: float) -> int:
        self.evicted += 1
        return 3


class NoSweep:
    done = None

    def apply(self, dedup, committed) -> bool:
        return False


def _value(metric) -> float:
    return metric._value.get()


def test_retention_runs_on_its_interval_and_the_gauges_follow_the_index() -> None:
    t = [1000.0]
    index, metrics = Index(), Metrics()
    upkeep = IndexUpkeep(index, metrics, NoSweep(), retention=3600.0, clock=lambda: t[0])
    upkeep.run(120, lambda: 150, "sig")
    assert index.evicted == 0  # not before the first interval
    assert _value(metrics.index_articles) == 40 and _value(metrics.index_size_bytes) == 4096
    assert _value(metrics.lists_snapshot_bytes) == 1024
    assert metrics.consumer_lag.labels("sig", "0")._value.get() == 30
    t[0] += EVICT_INTERVAL
    upkeep.run(150, None, "sig")  # not owned here: the lag gauge is left alone
    assert index.evicted == 1 and _value(metrics.evictions) == 3
    assert metrics.consumer_lag.labels("sig", "0")._value.get() == 30
    t[0] += 1
    upkeep.run(150, None, "sig")
    assert index.evicted == 1


def test_a_failing_gauge_does_not_stop_the_stage() -> None:
    t = [0.0]
    index = Index()
    index.broken = True
    upkeep = IndexUpkeep(index, Metrics(), NoSweep(), retention=None, clock=lambda: t[0])
    t[0] += GAUGE_INTERVAL
    upkeep.run(None, None, "sig")  # no exception
    assert index.evicted == 0  # no retention configured


def test_the_lists_snapshot_is_written_on_its_interval_and_synced_meanwhile(tmp_path) -> None:
    """With ``--lists-snapshot-every``, the upkeep writes the lists' snapshot of a real index once the
    interval has passed, its sync in a thread, and a later turn makes it valid, counts and times it
    on /metrics; not before the interval, and not again until the next (a crash then restarts from
    it: tests/engine/test_lists_snapshot.py)."""
    import time

    from stream_dedup import lists_snapshot
    from stream_dedup.config import EngineConfig
    from stream_dedup.engine import Deduplicator
    from stream_dedup.record import Article

    t = [0.0]
    metrics = Metrics()
    with Deduplicator(EngineConfig(), tmp_path) as dedup:
        upkeep = IndexUpkeep(dedup, metrics, NoSweep(), retention=None, clock=lambda: t[0], snapshot_every=600.0)
        dedup.process(Article(id="a", text="one two three four five six seven eight nine ten"), now=1.0)
        t[0] += 599
        upkeep.run(None, None, "sig")
        assert dedup.index._snapshot_writer is None and dedup.index.db.get(lists_snapshot.TOKEN_KEY) is None
        t[0] += 1
        upkeep.run(None, None, "sig")  # started: synced while the stage goes on
        assert dedup.index._snapshot_writer is not None
        deadline = time.monotonic() + 30
        while _value(metrics.lists_snapshots) == 0:
            assert time.monotonic() < deadline, "the snapshot was not written in 30 s"
            time.sleep(0.01)
            t[0] += 0.01
            upkeep.run(None, None, "sig")
        assert dedup.index.db.get(lists_snapshot.TOKEN_KEY) is not None
        assert (tmp_path / lists_snapshot.SNAPSHOT_FILE).exists() and _value(metrics.lists_snapshot_seconds) > 0
        size = (tmp_path / lists_snapshot.SNAPSHOT_FILE).stat().st_size
        assert dedup.snapshot_bytes() == size and dedup.disk_bytes() > 0
        assert dedup.disk_bytes() + size == sum(f.stat().st_size for f in tmp_path.iterdir() if f.is_file())
        upkeep.run(None, None, "sig")
        assert dedup.index._snapshot_writer is None  # not again before the next interval
