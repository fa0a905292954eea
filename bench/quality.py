"""Quality of duplicate decisions on the shared news stream (precision, recall, recall per kind),
then on the error classes of bench/quality_cases.py (one stream per class, built from the shared
articles).

    python bench/quality.py [--data ../shared/data] [--limit N] [--classes folding,short,page,template]
                            [--class-size N] [engine flags, e.g. --shingle-size 4]

A decision "duplicate-of X" is right when X is in the same truth cluster as the article and an
earlier record of that cluster exists; precision = right / all duplicate decisions, recall =
right / true duplicates (see ../shared/data/README.md).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import quality_cases  # noqa: E402

from stream_dedup.config import EngineConfig, add_arguments, load  # noqa: E402
from stream_dedup.engine import Deduplicator  # noqa: E402
from stream_dedup.record import article_from_object  # noqa: E402

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def score(records: list[dict], truth: list[dict], decisions: dict[str, dict]) -> dict:
    cluster_of = {t["id"]: t["cluster"] for t in truth}
    seen_clusters: set[str] = set()
    true_dups = Counter()
    right = Counter()
    decided = 0
    right_total = 0
    false_pos = []
    for t in truth:
        d = decisions.get(t["id"])
        is_dup = t["cluster"] in seen_clusters
        seen_clusters.add(t["cluster"])
        if is_dup:
            true_dups[t["kind"]] += 1
        if d and d["type"] == "duplicate-of":
            decided += 1
            ok = is_dup and cluster_of.get(d["duplicate_of"]) == t["cluster"]
            if ok:
                right[t["kind"]] += 1
                right_total += 1
            else:
                false_pos.append((t["id"], d["duplicate_of"], d["method"], d["similarity"], d.get("containment")))
    n_true = sum(true_dups.values())
    return {
        "precision": right_total / decided if decided else 1.0,
        "recall": right_total / n_true if n_true else 1.0,
        "duplicate_decisions": decided,
        "true_duplicates": n_true,
        "right": right_total,
        "per_kind": {k: (right[k], true_dups[k]) for k in sorted(true_dups)},
        "false_positives": false_pos,
    }


def run(config: EngineConfig, records: list[dict]) -> dict[str, dict]:
    """The event of every record, processed in order by a fresh engine."""
    decisions = {}
    with tempfile.TemporaryDirectory() as tmp, Deduplicator(config, tmp) as dedup:
        for rec in records:
            decisions[rec["id"]] = dedup.process(article_from_object(rec, config)).to_event()
    return decisions


def class_figures(config: EngineConfig, articles: list[dict], name: str, n: int | None = None,
                  seed: int = 1) -> dict:
    """Score of one error class: precision, recall, per-kind recall and the negatives called duplicates."""
    records, truth = quality_cases.make(name, articles, n, seed)
    decisions = run(config, records)
    s = score(records, truth, decisions)
    negatives = [t for t in truth if t["kind"].endswith("-other")]
    s["negatives"] = len(negatives)
    s["negatives_flagged"] = sum(decisions[t["id"]]["type"] == "duplicate-of" for t in negatives)
    s["decisions"] = decisions
    return s


def print_classes(config: EngineConfig, data: Path, names: list[str], n: int | None) -> None:
    articles = quality_cases.load_articles(data)
    print("| class | precision | recall | right / true duplicates | look-alikes called duplicates | recall per kind |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in names:
        s = class_figures(config, articles, name, n)
        kinds = ", ".join(f"{k} {r}/{t}" for k, (r, t) in s["per_kind"].items())
        print(f"| {name} | {s['precision']:.3f} | {s['recall']:.3f} | {s['right']} / {s['true_duplicates']} | "
              f"{s['negatives_flagged']} / {s['negatives']} | {kinds} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--limit", type=int, default=0, help="only the first N records")
    ap.add_argument("--show-errors", type=int, default=10)
    ap.add_argument("--classes", default=",".join(quality_cases.CLASSES),
                    help="error classes of bench/quality_cases.py to score after the stream ('' = none)")
    ap.add_argument("--class-size", type=int, default=None, help="originals per class (default: each maker's)")
    ap.add_argument("--no-stream", action="store_true", help="score only the error classes")
    add_arguments(ap, EngineConfig)
    args = ap.parse_args(argv)
    config = load(EngineConfig, args)
    stream = args.data / "news_stream.jsonl"
    if not stream.exists():
        print(f"no shared data at {stream}", file=sys.stderr)
        return 2
    names = [c for c in args.classes.split(",") if c]
    if args.no_stream:
        print_classes(config, args.data, names, args.class_size)
        return 0
    records = [json.loads(line) for line in stream.open()]
    truth = [json.loads(line) for line in (args.data / "news_stream.truth.jsonl").open()]
    if args.limit:
        records, truth = records[: args.limit], truth[: args.limit]
    t0 = time.perf_counter()
    decisions = run(config, records)
    elapsed = time.perf_counter() - t0
    s = score(records, truth, decisions)
    print(f"config: shingle_size={config.shingle_size} char_shingles={config.char_shingles} num_perm={config.num_perm} lsh_threshold={config.lsh_threshold} "
          f"jaccard>={config.jaccard_threshold} containment>={config.containment_threshold} simhash_k={config.simhash_k}")
    print(f"records {len(records)}  ({len(records) / elapsed:.0f} records/s)")
    print(f"precision {s['precision']:.4f}  recall {s['recall']:.4f}  "
          f"(right {s['right']} / decisions {s['duplicate_decisions']} / true duplicates {s['true_duplicates']})")
    print("| kind | recall | right / true |")
    print("| --- | --- | --- |")
    for kind, (r, n) in s["per_kind"].items():
        print(f"| {kind} | {r / n:.4f} | {r} / {n} |")
    for fp in s["false_positives"][: args.show_errors]:
        print("false positive:", fp)
    if names:
        print()
        print_classes(config, args.data, names, args.class_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
