"""Memory and build time of an index's in-memory lists, rebuilt from its RocksDB records.

    python bench/lists_memory.py STATE [--rounds 2]

Opens the index in ``STATE`` (for example the one ``bench/scale.py --keep-state STATE`` leaves) and
builds its LSH buckets, passage lists and SimHash tables from the records ``--rounds`` times in this
process (:func:`stream_dedup.memory_lists.build`), printing each build's time, each list's bytes and
nodes used, and the process's peak RSS. Run it on a copy without the lists' snapshot file, so the
index is not changed; with ``PYTHONPATH`` set to another checkout it measures that code (how the
README's *In-memory lists* compared the one-member-inline layout with the one before it).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("state", type=Path)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    if not args.state.is_dir():
        print(f"no index at {args.state}", file=sys.stderr)
        return 2
    from stream_dedup import memory_lists
    from stream_dedup.config import EngineConfig
    from stream_dedup.engine import Deduplicator

    with Deduplicator(EngineConfig(), args.state) as dedup:
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            lists = memory_lists.build(dedup.index)
            seconds = time.perf_counter() - t0
            buckets, passages, simhash = lists
            buckets.settle()
            passages.settle()
            total = buckets.nbytes + passages.nbytes + simhash.nbytes
            print(f"build {seconds:.1f} s; LSH buckets {buckets.nbytes / 2**20:,.0f} MB ({buckets.members:,} members, "
                  f"{int(buckets.meta[1]):,} nodes used), passage lists {passages.nbytes / 2**20:,.0f} MB "
                  f"({int(passages.meta[1]):,} nodes used), SimHash tables {simhash.nbytes / 2**20:,.0f} MB; "
                  f"all {total / 2**20:,.0f} MB", flush=True)
            del lists, buckets, passages, simhash
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024:,} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
