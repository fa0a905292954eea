"""How long does one batch stall when the in-memory lists grow? (issue 11's p99, at feed scale)

    python bench/table_growth.py [--articles 1000000] [--batch 200] [--threshold-ms 10] [--json FILE]

The LSH buckets (:class:`stream_dedup.band_table.BandTable`) and the permuted SimHash tables
(:class:`stream_dedup.simhash_table.SimhashTable`) are open-addressing tables that grow when they
would be too full. Up to 8b617b4 :meth:`reserve` allocated the larger arrays and rehashed every
entry in one kernel call, inside the ``add`` of whichever batch crossed the line (in the worker
that batch is one decision-stage transaction, so every record behind it waited for the rehash);
since 5749d1d the growth is incremental, spread over the adds (initialise the next, twice as
large table a chunk per add, then drain the old one 16 slots per entry added; node arrays grown by
half, copied likewise).

This files ``--articles`` articles, ``--batch`` at a time, into a band table and a SimHash table of
the default configuration's shape (bands x rows, bucket cap, table masks), with random keys
standing in for the articles' (distinct band keys and SimHashes: the dev stream's near-duplicates
share some, which makes the tables a little smaller, not the rehash cheaper per entry), and
prints every batch that took longer than ``--threshold-ms``: the articles filed by then, the
table's size after it, and the milliseconds; then the median batch, the total and the worst batch.
Memory: ~1.2-1.7 GB at 1M articles (the peak RSS is printed last). ``STREAM_DEDUP_NO_PREFAULT=1``
fills the next arrays in the caller a chunk per add instead of on their thread (:mod:`stream_dedup.next_arrays`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stream_dedup.band_table import BandTable  # noqa: E402
from stream_dedup.config import EngineConfig  # noqa: E402
from stream_dedup.engine import MAX_PER_BUCKET, lsh_params  # noqa: E402
from stream_dedup.simhash import PermutedTables  # noqa: E402
from stream_dedup.simhash_table import SimhashTable  # noqa: E402


def stalls(add, nbytes, articles: int, batch: int, threshold: float) -> tuple[list[dict], float]:
    """Times ``add(first_seq, n)`` batch by batch; the batches over ``threshold`` s and the median."""
    times, slow = [], []
    start = time.perf_counter()
    for first in range(0, articles, batch):
        n = min(batch, articles - first)
        t0 = time.perf_counter()
        add(first, n)
        dt = time.perf_counter() - t0
        times.append(dt)
        if dt > threshold:
            slow.append({"articles": first + n, "table_mib": round(nbytes() / 2**20), "ms": round(dt * 1000, 1)})
    stalls.total = time.perf_counter() - start
    return slow, float(np.median(times))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--articles", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=200, help="articles per add (one decision batch)")
    ap.add_argument("--threshold-ms", type=float, default=10.0, help="print the batches slower than this")
    ap.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = ap.parse_args()
    if args.articles < 1 or args.batch < 1:
        sys.exit("table_growth: --articles and --batch must be at least 1")
    config = EngineConfig()
    lsh = lsh_params(config)
    rng = np.random.default_rng(7)
    bands = BandTable(lsh.bands, lsh.rows, MAX_PER_BUCKET)
    masks = PermutedTables(config.simhash_k, config.simhash_blocks).key_masks
    simhash = SimhashTable(masks)

    def add_bands(first: int, n: int) -> None:
        keys = rng.integers(0, 2**62, size=(n, lsh.bands), dtype=np.uint64)
        bands.add(keys, np.arange(first, first + n, dtype=np.uint32))

    def add_simhash(first: int, n: int) -> None:
        permuted = rng.integers(0, 2**63, size=(n, len(masks)), dtype=np.uint64)
        simhash.add_many(permuted, np.arange(first, first + n, dtype=np.uint32))

    result = {}
    for name, add, nbytes in (("LSH band table", add_bands, lambda: bands.nbytes),
                              ("SimHash tables", add_simhash, lambda: simhash.nbytes)):
        slow, median = stalls(add, nbytes, args.articles, args.batch, args.threshold_ms / 1000)
        result[name] = {"median_batch_ms": round(median * 1000, 2), "total_s": round(stalls.total, 2),
                        "slow_batches": slow}
        print(f"{name}: {args.articles:,} articles, {args.batch} per batch, median batch {median * 1000:.2f} ms, "
              f"total {stalls.total:.2f} s, worst batch {max([r['ms'] for r in slow], default=0):,.1f} ms, "
              f"final size {nbytes() / 2**20:,.0f} MiB")
        print("| articles filed | table MiB after | batch ms |")
        print("| ---: | ---: | ---: |")
        for row in slow:
            print(f"| {row['articles']:,} | {row['table_mib']:,} | {row['ms']:,.1f} |")
        print()
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # (KiB on Linux)
    result["peak_rss_mib"] = round(peak)
    print(f"peak RSS of this process: {peak:,.0f} MiB")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
