"""RocksDB options of the index, sized from one memory budget (``--memory``).

One LRU block cache of ``memory`` bytes holds everything RocksDB keeps in memory that grows with
the index: data blocks, index and filter blocks (``cache_index_and_filter_blocks``; L0's are pinned)
and, through a ``WriteBufferManager`` that charges memtable arenas to that cache, the memtables
too. So the budget bounds RocksDB's memory; the process adds Python, numpy and numba (measured:
~200 MB in all for a small run, 0.65 GB beyond the budget at 1,000,000 articles).

How the budget is split (``memory`` = M):

==========================  =========================================================
block cache capacity        M (memtables are charged to it, so they take part of it)
all memtables together      M / 4 (a flush starts when they reach it)
one memtable (per family)   min(16 MB, M / 16)
hash buckets of a memtable  one per 64 bytes of it (8 bytes each: 1/8 of the memtable)
write-ahead log             at most 2 memtables (then the families it holds back flush)
compression                 snappy; zstd for the last level, which holds most of the data
==========================  =========================================================

The hash memtables allocate their bucket array up front, so it must be small beside the memtable
budget: else every write would find the memtables over budget and flush them.

Why it matters: every article probes its id and exact hash, most of them absent, so each probe
asks the bloom filter of every SST that may hold the key, and reads the records of its
candidates (the LSH buckets, SimHash tables and passage lists are in memory since index formats
8-10). Once the filters and index blocks no longer fit the cache beside the data blocks,
probes read them back from the files again and again (the likely mechanism behind issue 13's
report of a fixed 64 MB cache: ~2,000 records/s falling to ~110/s at 200k articles). With the
default 2 GB, ``bench/scale.py`` measured no collapse up to 1,000,000 articles (README).
"""

from __future__ import annotations

import os
import re

from rocksdict import (
    BlockBasedOptions,
    Cache,
    DBCompressionType,
    Env,
    MemtableFactory,
    Options,
    SliceTransform,
    WriteBufferManager,
)

#: a memtable's largest size. Its flush (in the background, and at close) sorts it: the points
#: family's hash memtable into a skip list, ~1.3 us a key at 64 MB (257,600 keys in 0.33 s, then
#: 0.17 s to write them), where a smaller one stays in the caches. At 16 MB instead of 64 a
#: ten-round short stream ran 13 % faster with the fingerprint process (2.79 -> 2.42 s, the flush
#: at close a quarter of the size), 2.5 % on one CPU, the dev stream 6 % and 4 % (three runs each,
#: alternating); the 1M scale run: README, Measured quality and speed
MAX_MEMTABLE = 16 << 20


class MemoryBudget:
    """The shared cache and write-buffer manager of one index, and the options built on them."""

    def __init__(self, memory: int) -> None:
        self.memory = memory
        self.cache = Cache(memory)
        self.memtables = memory // 4
        self.write_buffer = min(MAX_MEMTABLE, memory // 16)
        self.hash_buckets = self.write_buffer // 64   # 256k buckets for a 16 MB memtable
        self.write_buffers = WriteBufferManager.new_write_buffer_manager_with_cache(self.memtables, False, self.cache)

    def table_options(self, prefix: int | None = None, memtable: MemtableFactory | None = None) -> Options:
        """Options of one column family (``prefix``: bytes of its prefix extractor, if any)."""
        opts = Options(raw_mode=True)
        table = BlockBasedOptions()
        table.set_bloom_filter(10, False)          # absent keys (most ids, buckets) skip SST reads
        table.set_block_cache(self.cache)
        table.set_cache_index_and_filter_blocks(True)
        table.set_pin_l0_filter_and_index_blocks_in_cache(True)
        opts.set_block_based_table_factory(table)
        # the last level holds ~90 % of the data and is rewritten least often: zstd there took a
        # 200k-article index from 649 to 622 bytes per article (snappy stays on the busier levels)
        opts.set_bottommost_compression_type(DBCompressionType.zstd())
        opts.set_write_buffer_size(self.write_buffer)
        opts.set_write_buffer_manager(self.write_buffers)
        if prefix is not None:
            # (no memtable prefix bloom: the hash memtables answer an absent prefix from their bucket
            # array, and keeping the bloom up to date cost ~6 us per article of ~50 keys, measured)
            opts.set_prefix_extractor(SliceTransform.create_max_len_prefix(prefix))
        if memtable is not None:
            opts.set_memtable_factory(memtable)
        return opts

    def db_options(self) -> Options:
        """Options of the database (and its ``default`` family), with statistics for the hit rate."""
        opts = self.table_options()
        opts.create_if_missing(True)
        opts.create_missing_column_families(True)
        # compactions at the lowest CPU priority (nice 19, RocksDB's own Env call), and one core left to
        # the deciding thread (compaction threads: one fewer than the cores, 1 to 4; one flush thread):
        # on two cores two compactions beside a flush took the deciding thread's core (a 1M-article
        # run's chunk waited 8.6 % of its time for a CPU, 77 % of the first chunk's rate; at nice 19
        # 4.7-6.9 %, 79-87 %; with one compaction thread 0.5 %, 92 %); flushes keep their priority
        env = Env()
        env.lower_thread_pool_cpu_priority()
        opts.set_env(env)
        opts.increase_parallelism(max(1, min(4, (os.cpu_count() or 1) - 1)))
        opts.set_allow_concurrent_memtable_write(False)  # required by the hash memtables (one writer)
        # the families written rarely (time order, metadata) would otherwise hold every WAL file back:
        # measured, 350 MB of logs beside 235 MB of tables at 180k articles
        opts.set_max_total_wal_size(2 * self.write_buffer)
        opts.enable_statistics()
        return opts


_TICKER = re.compile(rb"^(rocksdb\.block\.cache\.(?:hit|miss)) COUNT : (\d+)$", re.M)


def cache_counts(statistics: str | None) -> tuple[int, int]:
    """(block cache hits, misses) from RocksDB's statistics dump (``Options.get_statistics()``)."""
    found = dict(_TICKER.findall((statistics or "").encode()))
    return int(found.get(b"rocksdb.block.cache.hit", 0)), int(found.get(b"rocksdb.block.cache.miss", 0))
