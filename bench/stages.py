"""Where the engine's time goes per article, stage by stage, on one core.

    python bench/stages.py [--data ../shared/data] [--limit N] [--batch 256]

Runs ``parse_record`` + ``Deduplicator.process_batch`` over the news stream, ``--batch`` records
at a time as the ``dedup`` command does (``--batch 1``: one record per batch and per write), with a
timer around each stage's function, and prints the mean microseconds per article of each stage and
of everything else. A stage called inside another is counted in the outer one (the record reads
of the verification are verification). The timers add a little overhead (~0.1 us per call), so the
total is slightly above bench/throughput.py's figure. Figures only, no asserts.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEFAULT_DATA = ROOT.parent / "shared" / "data"

STAGES = [  # (label, owner attribute path from the Deduplicator (dotted), method name)
    ("tokens + token hashes (folding, MurmurHash3)", "fingerprinter", "token_hashes"),
    ("SimHash permutations (one article)", "tables", "permute_array"),
    ("SimHash permutations (all of a batch's, one call)", "tables", "permute_many"),
    ("LSH bucket keys (one article, or all of a batch's in one call)", "index.buckets", "keys"),
    ("lookups: LSH buckets + SimHash tables (in memory)", "index", "lookup"),
    ("verification of candidates (their records read)", "", "_verify"),
]
BATCH_STAGES = [  # (label, BatchView method): the batch's reads and writes
    ("id, exact-hash and LSH bucket multi-gets (prefetch)", "prefetch"),
    ("id and exact-hash reads (one key)", "get_one"),
    ("index write: the article's entries into the batch, its filing in the in-memory lists", "insert"),
    ("index write: one atomic RocksDB write per batch", "commit"),
]
_depth = [0]


def _timed(fn: Callable[..., Any], label: str, spent: dict[str, int]) -> Callable[..., Any]:
    """``fn`` timed under ``label``, unless it runs inside another timed stage (counted there)."""
    clock = time.perf_counter_ns

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _depth[0]:
            return fn(*args, **kwargs)
        _depth[0] += 1
        t0 = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[label] += clock() - t0
            _depth[0] -= 1
    return wrapper


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--batch", type=int, default=256, help="records per process_batch call (default: 256)")
    args = ap.parse_args()
    path = args.data / "news_stream.jsonl"
    if not path.exists():
        print(f"no shared data at {args.data}", file=sys.stderr)
        return 2
    try:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    except (AttributeError, OSError):
        pass

    from stream_dedup import fingerprint as fingerprint_module
    from stream_dedup import passages as passages_module
    from stream_dedup.batch import BatchView
    from stream_dedup.config import EngineConfig
    from stream_dedup.engine import Deduplicator
    from stream_dedup.record import parse_record

    lines = path.read_bytes().splitlines()
    lines = lines[:args.limit] if args.limit else lines
    config = EngineConfig()
    spent: dict[str, int] = defaultdict(int)
    with tempfile.TemporaryDirectory() as tmp:
        with Deduplicator(config, Path(tmp) / "warm") as warm:  # load the compiled kernels first
            warm.process(parse_record(lines[0], config))
        with Deduplicator(config, Path(tmp) / "index") as dedup:
            for label, owner, name in STAGES:
                target = dedup
                for attr in owner.split(".") if owner else ():
                    target = getattr(target, attr)
                setattr(target, name, _timed(getattr(target, name), label, spent))
            # the sketch kernel is called through the fingerprint module's reference to kernels
            kernels = fingerprint_module.kernels
            sketch = kernels.sketch
            kernels.sketch = _timed(sketch, "MinHash + SimHash kernel (sketch)", spent)
            # so are the HTML extraction and the identity sketch (module-level names in fingerprint.py)
            plain_labels = {"html_to_text": "HTML to text", "identity_sketch": "identity sketch",
                            "winnow": "passage anchors (winnowing kernel)",
                            "word_bitmap": "content-word bitmap (rewrite rule)", "exact_hash": "exact hash",
                            "strip_flag": "headline flags"}
            plain = {name: getattr(fingerprint_module, name) for name in plain_labels}
            for name, label in plain_labels.items():
                setattr(fingerprint_module, name, _timed(plain[name], label, spent))
            # the engine calls the passage functions through the module
            anchor_fns = {name: getattr(passages_module, name) for name in ("lookup", "posting_writes")}
            passages_module.lookup = _timed(anchor_fns["lookup"], "passage lists: members + shared counts", spent)
            passages_module.posting_writes = _timed(anchor_fns["posting_writes"], "passage lists: appends", spent)
            batch_fns = {name: getattr(BatchView, name) for _, name in BATCH_STAGES}
            for label, name in BATCH_STAGES:
                setattr(BatchView, name, _timed(batch_fns[name], label, spent))
            parse = _timed(parse_record, "JSON parse + record checks", spent)
            try:
                t0 = time.perf_counter_ns()
                for i in range(0, len(lines), args.batch):
                    dedup.process_batch([parse(line, config) for line in lines[i:i + args.batch]])
                total = time.perf_counter_ns() - t0
            finally:
                for name, fn in batch_fns.items():
                    setattr(BatchView, name, fn)
                kernels.sketch = sketch
                for name, fn in plain.items():
                    setattr(fingerprint_module, name, fn)
                for name, fn in anchor_fns.items():
                    setattr(passages_module, name, fn)
    n = len(lines)
    print(f"records: {n}  (one core; batches of {args.batch}; mean microseconds per article)")
    print("| stage | us/article |")
    print("| --- | --- |")
    for label, ns in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"| {label} | {ns / n / 1000:.1f} |")
    print(f"| everything else (fingerprint and Decision objects, events, Python glue) | {(total - sum(spent.values())) / n / 1000:.1f} |")
    print(f"| **total** | {total / n / 1000:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
