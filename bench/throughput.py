"""Engine throughput vs datasketch, in the same run, on one core.

    python bench/throughput.py [--data ../shared/data] [--limit N] [--repeat 3]

Each side runs in its own subprocess pinned to one CPU (so peak RSS is its own):

* stream-dedup: parse JSON, HTML/text, shingle, MinHash, SimHash, RocksDB index lookups and
  inserts, decision (``Deduplicator.process``) with the default configuration;
* datasketch: parse JSON, lowercase, word k-shingles, ``MinHash.update_batch`` and
  ``MinHashLSH.query`` + ``insert`` at the same num_perm and threshold (in memory, no SimHash).

Prints records/s (best of --repeat), the ratio, peak RSS, and index bytes on disk per article.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEFAULT_DATA = ROOT.parent / "shared" / "data"


def _lines(data: Path, limit: int) -> list[bytes]:
    lines = (data / "news_stream.jsonl").read_bytes().splitlines()
    return lines[:limit] if limit else lines


def run_engine(lines: list[bytes]) -> dict:
    from stream_dedup.config import EngineConfig
    from stream_dedup.engine import Deduplicator
    from stream_dedup.record import parse_record

    config = EngineConfig()
    with tempfile.TemporaryDirectory() as tmp:
        warm = Deduplicator(config, Path(tmp) / "warm")  # compile the numba kernels outside the timing
        warm.process(parse_record(lines[0], config))
        warm.close()
        with Deduplicator(config, Path(tmp) / "index") as dedup:
            t0 = time.perf_counter()
            dups = 0
            for line in lines:
                dups += dedup.process(parse_record(line, config)).is_duplicate
            elapsed = time.perf_counter() - t0
            dedup.index.flush()
            disk = dedup.disk_bytes()
            count = len(dedup)
    return {"seconds": elapsed, "duplicates": dups, "disk_bytes": disk, "indexed": count,
            "config": f"num_perm={config.num_perm} k={config.shingle_size} lsh_threshold={config.lsh_threshold}"}


def run_datasketch(lines: list[bytes]) -> dict:
    from datasketch import MinHash, MinHashLSH

    from stream_dedup.config import EngineConfig

    config = EngineConfig()
    word = re.compile(r"\w+")
    k = config.shingle_size
    lsh = MinHashLSH(threshold=config.lsh_threshold, num_perm=config.num_perm)
    t0 = time.perf_counter()
    dups = 0
    for line in lines:
        rec = json.loads(line)
        words = word.findall((rec.get("text") or rec.get("html") or "").lower())
        shingles = {" ".join(words[i:i + k]).encode() for i in range(max(1, len(words) - k + 1))}
        m = MinHash(num_perm=config.num_perm)
        m.update_batch(shingles)
        dups += bool(lsh.query(m))
        lsh.insert(rec["id"], m, check_duplication=False)
    return {"seconds": time.perf_counter() - t0, "duplicates": dups}


def child(which: str, data: Path, limit: int) -> None:
    try:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    except (AttributeError, OSError):
        pass
    lines = _lines(data, limit)
    result = run_engine(lines) if which == "engine" else run_datasketch(lines)
    result["records"] = len(lines)
    result["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(result))


def measure(which: str, data: Path, limit: int) -> dict:
    env = dict(os.environ, NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    out = subprocess.run([sys.executable, __file__, "--child", which, "--data", str(data), "--limit", str(limit)],
                         check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", choices=["engine", "datasketch"])
    args = ap.parse_args()
    if args.child:
        child(args.child, args.data, args.limit)
        return 0
    if not (args.data / "news_stream.jsonl").exists():
        print(f"no shared data at {args.data}", file=sys.stderr)
        return 2
    best: dict[str, dict] = {}
    for _ in range(args.repeat):
        for which in ("engine", "datasketch"):
            r = measure(which, args.data, args.limit)
            if which not in best or r["seconds"] < best[which]["seconds"]:
                best[which] = r
    e, d = best["engine"], best["datasketch"]
    e_rps, d_rps = e["records"] / e["seconds"], d["records"] / d["seconds"]
    print(f"records: {e['records']}  ({e['config']}; best of {args.repeat}, one core each)")
    print("| | records/s | peak RSS | duplicates flagged |")
    print("| --- | --- | --- | --- |")
    print(f"| stream-dedup engine (RocksDB index, MinHash + SimHash) | {e_rps:,.0f} | "
          f"{e['peak_rss_bytes'] / 2**20:,.0f} MiB | {e['duplicates']} |")
    print(f"| datasketch MinHash + MinHashLSH (in memory) | {d_rps:,.0f} | "
          f"{d['peak_rss_bytes'] / 2**20:,.0f} MiB | {d['duplicates']} |")
    print(f"speed ratio (stream-dedup / datasketch): {e_rps / d_rps:.2f}x")
    print(f"index on disk: {e['disk_bytes'] / 2**20:.1f} MiB for {e['indexed']} articles = "
          f"{e['disk_bytes'] / max(1, e['indexed']):,.0f} bytes/article")
    return 0


if __name__ == "__main__":
    sys.exit(main())
