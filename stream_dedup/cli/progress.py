"""What a ``dedup`` run prints while it runs, on stderr: :class:`Progress` (the progress bar) and
:class:`StatsLines` (``--stats-every``: a JSON line of statistics per N input lines)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..engine import Deduplicator
    from .summary import Summary


class Progress:
    """A tqdm progress bar on stderr (bytes read, rate, ETA); off when stderr is no terminal or with -q."""

    def __init__(self, total_bytes: int | None, enabled: bool, initial: int = 0) -> None:
        self.bar = None
        self.pending = 0
        if enabled:
            from tqdm import tqdm

            # the size as the terminal reports it; one that reports 0 x 0 (a fresh pty) counts as 80 x 24
            size = shutil.get_terminal_size((80, 24))
            self.bar = tqdm(total=total_bytes, initial=initial, unit="B", unit_scale=True, unit_divisor=1024,
                            file=sys.stderr, ncols=size.columns, nrows=size.lines, mininterval=0.2,
                            leave=False, desc="stream-dedup")

    def update(self, summary: Summary, nbytes: int, now: bool = False) -> None:
        """``nbytes`` more read; shown every 64 lines, or ``now`` (a batch of lines at once)."""
        if self.bar is None:
            return
        self.pending += nbytes
        if now or summary.lines % 64 == 0:
            self.bar.update(self.pending)
            self.pending = 0
            dup = summary.duplicates / summary.records if summary.records else 0.0
            self.bar.set_postfix_str(f"{summary.lines:,} lines, duplicates {dup:.1%}, "
                                     f"rejects {sum(summary.rejects.values()):,}", refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.update(self.pending)
            self.bar.close()


def rss_bytes() -> int:
    """Resident set size of this process now (Linux /proc; elsewhere the peak)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class StatsLines:
    """``--stats-every N``: one JSON line on stderr per N input lines, for benchmarks and monitoring.

    Fields: ``lines`` and ``seconds`` so far, ``chunk_records_per_second`` over the last chunk,
    ``cpu_seconds`` of the process since the clock started (RocksDB's compaction threads included),
    ``main_thread_cpu_seconds`` (the thread that reads, decides and writes: the rest is RocksDB's
    flushes and compactions, a table's growth, the lists' snapshot), ``rss_bytes``, ``index_articles``, ``index_bytes`` (on disk), ``memory_budget_bytes``,
    ``block_cache_usage_bytes``, ``band_table_bytes``, ``passage_lists_bytes``, ``simhash_table_bytes`` and
    ``key_tables_bytes`` (the LSH buckets, passage lists, SimHash tables and id and exact-hash tables in
    memory) and ``block_cache_hit_rate``
    over the chunk.
    """

    def __init__(self, dedup: Deduplicator, t0: float) -> None:
        self.dedup = dedup
        self.last = (t0, 0, 0, 0)  # time, lines, cache hits, cache misses
        self.t0 = t0
        # (the process's CPU, every thread's: process_time's clock has ns resolution where os.times
        # counts 10 ms ticks, and a 100-record chunk of short items takes less than one)
        self.cpu0 = time.process_time()
        self.thread0 = time.thread_time()  # (the main thread's: it reads, decides and writes)

    def emit(self, summary: Summary) -> None:
        now = time.perf_counter()
        t, lines, hits, misses = self.last
        mem = self.dedup.memory_stats()
        dh, dm = mem["block_cache_hits"] - hits, mem["block_cache_misses"] - misses
        line = {"stats": "chunk", "lines": summary.lines, "seconds": round(now - self.t0, 3),
                "chunk_records_per_second": round((summary.lines - lines) / max(now - t, 1e-9), 1),
                "cpu_seconds": round(time.process_time() - self.cpu0, 4),
                "main_thread_cpu_seconds": round(time.thread_time() - self.thread0, 3),
                "rss_bytes": rss_bytes(), "index_articles": len(self.dedup), "index_bytes": self.dedup.disk_bytes(),
                "memory_budget_bytes": mem["memory_budget_bytes"],
                "block_cache_usage_bytes": mem["block_cache_usage_bytes"],
                "band_table_bytes": mem["band_table_bytes"], "passage_lists_bytes": mem["passage_lists_bytes"],
                "simhash_table_bytes": mem["simhash_table_bytes"], "key_tables_bytes": mem["key_tables_bytes"],
                "block_cache_hit_rate": round(dh / (dh + dm), 4) if dh + dm else None}
        print(json.dumps(line), file=sys.stderr, flush=True)
        self.last = (time.perf_counter(), summary.lines, mem["block_cache_hits"], mem["block_cache_misses"])
