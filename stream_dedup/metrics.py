"""Prometheus metrics exported by the service (and usable by the embedded command).

Names follow Prometheus conventions: base units (seconds, bytes), ``_total`` for counters.
The Grafana dashboard in ``helm/stream-dedup/dashboards`` may only query names listed in
:func:`exported_metric_names`; a test enforces it.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .bulk_histogram import BulkHistogram

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
CANDIDATE_BUCKETS = (0, 1, 2, 3, 5, 10, 20, 50, 100, 250, 1000)
TRANSACTION_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)
SIMILARITY_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)


class Metrics:
    """All metrics of one process, registered on their own registry (tests create many). The
    histograms observed per article are bulk ones (:class:`~stream_dedup.bulk_histogram.BulkHistogram`:
    a transaction's values at once), exposed as prometheus_client's ``Histogram`` is."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.articles = Counter(
            "stream_dedup_articles", "Articles decided, by result (new | duplicate).", ["result"], registry=r)
        self.duplicates_by_method = Counter(
            "stream_dedup_duplicates", "Duplicate decisions by the method that matched first "
            "(exact | minhash | containment | simhash).", ["method"], registry=r)
        self.dead_letters = Counter(
            "stream_dedup_dead_letters", "Records routed to the dead-letter topic / rejects file, by reason.",
            ["reason"], registry=r)
        self.processing_seconds = BulkHistogram(
            "stream_dedup_processing_seconds", "Engine time per article (fingerprint + index + decision).",
            buckets=LATENCY_BUCKETS, registry=r)
        self.end_to_end_seconds = BulkHistogram(
            "stream_dedup_end_to_end_latency_seconds",
            "Time from the input record's Kafka timestamp to its output event being produced.",
            buckets=LATENCY_BUCKETS, registry=r)
        self.candidates = BulkHistogram(
            "stream_dedup_candidates", "Candidates verified per article (LSH buckets + SimHash tables).",
            buckets=CANDIDATE_BUCKETS, registry=r)
        self.similarity = BulkHistogram(
            "stream_dedup_similarity", "Estimated Jaccard similarity of duplicate decisions.",
            buckets=SIMILARITY_BUCKETS, registry=r)
        self.index_articles = Gauge(
            "stream_dedup_index_articles", "Articles currently held in the index.", registry=r)
        self.index_size_bytes = Gauge(
            "stream_dedup_index_size_bytes", "Size of the RocksDB index on disk (the lists' snapshot apart).",
            registry=r)
        self.lists_snapshot_bytes = Gauge(
            "stream_dedup_lists_snapshot_bytes", "Size on disk of the in-memory lists' snapshot files beside the "
            "index (the latest, and the next one while it is written).", registry=r)
        self.evictions = Counter(
            "stream_dedup_evicted_articles", "Articles evicted by the retention window.", registry=r)
        self.consumer_lag = Gauge(
            "stream_dedup_consumer_lag_messages", "Consumer lag per topic partition (high watermark - position).",
            ["topic", "partition"], registry=r)
        self.order_held = Gauge(
            "stream_dedup_order_buffer_records", "Input records stage 1 holds to merge its partitions by "
            "timestamp (each at most --order-wait seconds).", registry=r)
        self.order_released_early = Counter(
            "stream_dedup_order_released_early_records", "Input records stage 1 released when their "
            "--order-wait (or --order-wait-workers) ran out while a partition could still have sent an "
            "earlier record: each may be decided out of produce order.", ["member"], registry=r)
        self.redelivered = Counter(
            "stream_dedup_redelivered_signatures", "Second copies of an input record's signature (stage 1 is "
            "at-least-once) that the decision stage recognised and answered no more.", registry=r)
        self.transaction_seconds = Histogram(
            "stream_dedup_transaction_commit_seconds", "Decision stage: time to commit one Kafka transaction "
            "(send the consumed offsets, then commit).", buckets=LATENCY_BUCKETS, registry=r)
        self.transaction_records = Histogram(
            "stream_dedup_transaction_records", "Decision stage: signature records decided per Kafka transaction.",
            buckets=TRANSACTION_BUCKETS, registry=r)
        self.receipt_sweeps = Counter(
            "stream_dedup_receipt_sweeps", "Decision stage: sweeps that dropped the delivery receipts of input "
            "records stage 1 can no longer send twice (keeps the index from growing by ~40 B per record).",
            registry=r)
        self.lists_snapshots = Counter(
            "stream_dedup_lists_snapshots", "Decision stage: snapshots of the index's in-memory lists written "
            "(every --lists-snapshot-every seconds): a restart after a crash loads the latest and files again "
            "only what changed since.", registry=r)
        self.lists_snapshot_seconds = Gauge(
            "stream_dedup_lists_snapshot_seconds", "Decision stage: how long the last snapshot of the in-memory "
            "lists took, until its file was synced to disk (the sync runs while the stage decides).", registry=r)
        self.lists_snapshot_pause_seconds = Gauge(
            "stream_dedup_lists_snapshot_pause_seconds", "Decision stage: how long the stage decided nothing "
            "for the last snapshot (its file written to the page cache).", registry=r)
        self.decision_stage_restarts = Counter(
            "stream_dedup_decision_stage_restarts", "Times the worker restarted its decision stage process "
            "(it exited: a crash, or a fatal Kafka client error such as a fenced consumer).", registry=r)
        self.stage1_restarts = Counter(
            "stream_dedup_stage1_restarts", "Times the worker restarted a stage-1 process (--stage1-client "
            "confluent; it exited: a crash, an undelivered signature record, a fatal Kafka client error or "
            "a stall: input records waiting and none fetched for 30 s while the broker answers).",
            registry=r)
        self.decision_stalls = Counter(
            "stream_dedup_decision_stage_stalls", "Times the decision stage found signature records waiting and "
            "no transaction committed for 30 s while the broker answered (it decides again from the committed "
            "offset; a second stall in a row restarts the stage).", registry=r)
        self.standby_behind = Gauge(
            "stream_dedup_standby_behind_records", "Decision stage on a standby (--standby-follow): signature "
            "records the group has committed that this worker's index has not applied yet; a takeover replays "
            "these first (0 on the owner).", registry=r)
        self.memory_budget = Gauge(
            "stream_dedup_memory_budget_bytes", "The index's memory budget (--memory): RocksDB block cache, "
            "filters, index blocks and memtables.", registry=r)
        self.block_cache_usage = Gauge(
            "stream_dedup_block_cache_usage_bytes", "Bytes of the budget in use (cached blocks and the memtables "
            "charged to the cache).", registry=r)
        self.band_table_bytes = Gauge(
            "stream_dedup_band_table_bytes", "Memory of the LSH buckets, kept out of RocksDB and outside --memory "
            "(~0.5 KB per indexed article at 37 bands; see stream_dedup.band_table).", registry=r)
        self.passage_lists_bytes = Gauge(
            "stream_dedup_passage_lists_bytes", "Memory of the passage anchors' article lists, kept out of RocksDB "
            "and outside --memory (see stream_dedup.passages).", registry=r)
        self.simhash_table_bytes = Gauge(
            "stream_dedup_simhash_table_bytes", "Memory of the permuted SimHash tables, kept out of RocksDB and "
            "outside --memory (~190-280 bytes per indexed article at 10 tables; see stream_dedup.simhash_table).",
            registry=r)
        self.key_tables_bytes = Gauge(
            "stream_dedup_key_tables_bytes", "Memory of the id and exact-hash tables (article id -> seq, exact hash "
            "-> seq), kept out of RocksDB and outside --memory (~15-30 bytes per article each; see "
            "stream_dedup.key_tables).", registry=r)
        self.record_store_bytes = Gauge(
            "stream_dedup_record_store_bytes", "Memory of the records of the articles read or written lately, "
            "kept for verifications outside --memory (up to min(64 MB, --memory / 64) and its map; see "
            "stream_dedup.record_store).", registry=r)
        self.block_cache_lookups = Counter(
            "stream_dedup_block_cache_lookups", "RocksDB block cache lookups, by result (hit | miss); hit rate = "
            "rate(hit) / rate(hit + miss).", ["result"], registry=r)
        self._cache_seen = {"hit": 0, "miss": 0}
        self.ready = Gauge(
            "stream_dedup_ready", "1 when the worker has its partitions assigned and its index open.", registry=r)

    def observe_memory(self, stats: dict[str, int]) -> None:
        """Set the memory gauges from :meth:`Deduplicator.memory_stats` (counters advance by the change)."""
        self.memory_budget.set(stats["memory_budget_bytes"])
        self.block_cache_usage.set(stats["block_cache_usage_bytes"])
        self.band_table_bytes.set(stats["band_table_bytes"])
        self.passage_lists_bytes.set(stats["passage_lists_bytes"])
        self.simhash_table_bytes.set(stats["simhash_table_bytes"])
        self.key_tables_bytes.set(stats["key_tables_bytes"])
        self.record_store_bytes.set(stats["record_store_bytes"])
        for result, key in (("hit", "block_cache_hits"), ("miss", "block_cache_misses")):
            total = stats[key]
            if total > self._cache_seen[result]:  # a reopened index counts from 0 again
                self.block_cache_lookups.labels(result=result).inc(total - self._cache_seen[result])
            self._cache_seen[result] = total


def exported_metric_names(metrics: Metrics | None = None) -> set[str]:
    """Every sample name the metrics can produce (with _total, _bucket, _sum, _count, _created)."""
    metrics = metrics or Metrics()
    names: set[str] = set()
    for family in metrics.registry.collect():
        names.add(family.name)
        if family.type == "counter":
            names.update({family.name + "_total", family.name + "_created"})
        elif family.type == "histogram":
            names.update({family.name + s for s in ("_bucket", "_sum", "_count", "_created")})
    return names
