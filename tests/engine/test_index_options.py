"""stream_dedup.index_options: one memory budget for RocksDB, reported by the index and the metrics."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from stream_dedup.index import Index
from stream_dedup.index_options import MAX_MEMTABLE, MemoryBudget, cache_counts
from stream_dedup.metrics import Metrics

SETTINGS = {"num_perm": 8, "seed": 1, "purpose": "memory-test"}


def fill(index: Index, n: int) -> None:
    for i in range(n):
        index.insert(article_id=f"a{i}", first_seen=float(i), simhash=i, n_shingles=10, exact=i.to_bytes(16, "big"),
                     minhash=np.arange(8, dtype=np.uint32) + i, root_id=f"a{i}", decision={"n": i},
                     bucket_keys=np.zeros(0, np.uint64), permuted=[], index_sketches=False, checkpoint=None)


def test_budget_split() -> None:
    small, large = MemoryBudget(64 << 20), MemoryBudget(8 << 30)
    assert (small.memtables, small.write_buffer, small.hash_buckets) == (16 << 20, 4 << 20, 1 << 16)
    assert (large.memtables, large.write_buffer, large.hash_buckets) == (2 << 30, MAX_MEMTABLE, MAX_MEMTABLE // 64)
    assert MAX_MEMTABLE == 16 << 20
    # the bucket arrays allocated up front by the hash memtables leave most of the memtable budget
    for budget in (small, large):
        assert 2 * 8 * budget.hash_buckets * 2 <= budget.memtables // 2


def test_index_reports_its_budget_and_cache_lookups(tmp_path: Path) -> None:
    index = Index(tmp_path, 8, SETTINGS, memory=64 << 20)
    fill(index, 2000)
    index.flush()
    before = index.memory_stats()
    assert before["memory_budget_bytes"] == 64 << 20
    assert index.db.property_int_value("rocksdb.block-cache-capacity") == 64 << 20
    for seq in range(0, 2000, 3):
        assert index.article(seq) is not None
    after = index.memory_stats()
    lookups = lambda s: s["block_cache_hits"] + s["block_cache_misses"]  # noqa: E731
    assert lookups(after) > lookups(before)            # reads from the flushed SST go through the cache
    assert after["block_cache_hits"] > before["block_cache_hits"]
    assert 0 < after["block_cache_usage_bytes"] <= 64 << 20
    index.close()


def test_memory_is_not_an_index_setting(tmp_path: Path) -> None:
    """Another budget reopens the same index (the budget sizes memory, not the data)."""
    index = Index(tmp_path, 8, SETTINGS, memory=64 << 20)
    fill(index, 10)
    index.close()
    index = Index(tmp_path, 8, SETTINGS, memory=256 << 20)
    assert index.count == 10 and index.memory_stats()["memory_budget_bytes"] == 256 << 20
    index.close()


def test_cache_counts_parses_the_statistics_dump() -> None:
    dump = ("rocksdb.block.cache.miss COUNT : 12\nrocksdb.block.cache.hit COUNT : 345\n"
            "rocksdb.block.cache.hit.ratio COUNT : 1\nrocksdb.block.cache.index.hit COUNT : 9\n")
    assert cache_counts(dump) == (345, 12)
    assert cache_counts(None) == (0, 0)


def test_metrics_follow_the_memory_stats() -> None:
    m = Metrics()
    stats = {"memory_budget_bytes": 1 << 30, "block_cache_usage_bytes": 5000, "block_cache_hits": 90,
             "block_cache_misses": 10, "band_table_bytes": 4096,
             "passage_lists_bytes": 2048, "simhash_table_bytes": 1024, "key_tables_bytes": 768,
             "record_store_bytes": 512}
    m.observe_memory(stats)
    m.observe_memory({**stats, "block_cache_hits": 150, "block_cache_misses": 30})
    value = m.registry.get_sample_value
    assert value("stream_dedup_memory_budget_bytes") == 1 << 30
    assert value("stream_dedup_block_cache_usage_bytes") == 5000
    assert value("stream_dedup_band_table_bytes") == 4096
    assert value("stream_dedup_passage_lists_bytes") == 2048
    assert value("stream_dedup_simhash_table_bytes") == 1024
    assert value("stream_dedup_key_tables_bytes") == 768
    assert value("stream_dedup_record_store_bytes") == 512
    assert value("stream_dedup_block_cache_lookups_total", {"result": "hit"}) == 150
    assert value("stream_dedup_block_cache_lookups_total", {"result": "miss"}) == 30


def test_write_ahead_log_stays_bounded(tmp_path: Path) -> None:
    """The rarely written families (time order) must not hold every log file back."""
    budget = MemoryBudget(64 << 20)
    index = Index(tmp_path, 8, SETTINGS, memory=64 << 20)
    for i in range(30_000):  # ~15 MB of records, past 2 memtables (8 MB) of log
        index.insert(article_id=f"a{i}", first_seen=float(i), simhash=i, n_shingles=10, exact=i.to_bytes(16, "big"),
                     minhash=np.arange(8, dtype=np.uint32) + i, root_id=f"a{i}", decision={"pad": "x" * 400},
                     bucket_keys=np.zeros(0, np.uint64), permuted=[], index_sketches=False, checkpoint=None)
    logs = sum(p.stat().st_size for p in tmp_path.glob("*.log"))
    tables = sum(p.stat().st_size for p in tmp_path.glob("*.sst"))
    index.close()
    assert tables > 0 and logs <= 3 * budget.write_buffer, (logs, tables)


def _thread_nice() -> list[tuple[str, int]]:
    """(name, nice) of each thread of this process."""
    out = []
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            out.append(((task / "comm").read_text().strip(), int(fields[16])))  # (field 19: nice)
        except OSError:  # (a thread that ended meanwhile)
            continue
    return out


def test_compactions_run_at_the_lowest_cpu_priority_and_flushes_do_not(tmp_path: Path) -> None:
    """A compaction's thread (RocksDB's low-priority pool) runs at nice 19, so it takes a core the
    deciding thread is not using; flushes (the high-priority pool) and this thread keep theirs."""
    from rocksdict import Rdict

    db = Rdict(str(tmp_path / "db"), MemoryBudget(64 << 20).db_options())
    try:
        rng = np.random.default_rng(1)
        for _ in range(3):
            for _ in range(20_000):
                db[rng.bytes(16)] = rng.bytes(100)
            db.flush()
        db.compact_range(None, None)
        threads = _thread_nice()
    finally:
        db.close()
    assert ("rocksdb:low", 19) in threads
    assert all(nice == 0 for name, nice in threads if name.startswith("rocksdb:high"))
    assert dict(_thread_nice())[Path("/proc/self/comm").read_text().strip()] == 0
