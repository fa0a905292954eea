"""Where the rewrite class's missed copies are lost, and what separates rewrites from other stories.

    python bench/rewrite_loss.py [--data ../shared/data] [--stream] [engine flags]

For every ``rewrite`` positive of bench/quality_cases.py that the engine does not call a duplicate
of its original: was the original a candidate at all (an LSH band bucket shared, a SimHash within
``simhash_k``), its estimated Jaccard against the band ``[rewrite_jaccard, jaccard_threshold)``, and
which condition of the ``rewrite`` rule rejected it. Then, for every candidate that reached the
rule's band (class stream and, with ``--stream``, the dev stream), the rule's evidence and the
exact content-word set Jaccard, split by whether the pair is the same story.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import quality_cases  # noqa: E402

from stream_dedup import rewrite  # noqa: E402
from stream_dedup.config import EngineConfig, add_arguments, load  # noqa: E402
from stream_dedup.engine import Deduplicator, lsh_params  # noqa: E402
from stream_dedup.html_text import html_to_text  # noqa: E402
from stream_dedup.index import Index  # noqa: E402
from stream_dedup.index_record import SIGNATURE_BITS, stored_signature  # noqa: E402
from stream_dedup.lsh import Banding  # noqa: E402
from stream_dedup.minhash import bbit_jaccard  # noqa: E402
from stream_dedup.record import article_from_object  # noqa: E402
from stream_dedup.simhash import hamming  # noqa: E402

_WORD = re.compile(r"\w+")


def words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if len(w) >= 3 and not w.isdigit()}


def set_jaccard(a: str, b: str) -> float:
    x, y = words(a), words(b)
    return len(x & y) / len(x | y) if x | y else 0.0


def run_logged(config: EngineConfig, records: list[dict]) -> tuple[dict[str, dict], list[tuple]]:
    """Events of every record, and every candidate the rewrite rule saw: (new id, stored id, j,
    shared pairs, share, length ratio, passed, estimated content-word Jaccard or None)."""
    band: list[tuple] = []
    state = {"id": None, "raw": None, "index": None}
    orig_passes, orig_identity, orig_verify = rewrite.passes, Index.identity, Deduplicator._verify

    def identity(self, value):
        state["raw"], state["index"] = value, self
        return orig_identity(self, value)

    def passes(j, a, b, n, stored_n, low, high, min_pairs, *rest):
        ok = orig_passes(j, a, b, n, stored_n, low, high, min_pairs, *rest)
        shared, share, length = rewrite.evidence(a, b, n, stored_n)
        words = rewrite.word_jaccard(*rest[:2]) if len(rest) >= 2 else None
        band.append((state["id"], state["index"].ids(state["raw"])[0], j, shared, share, length, ok, words))
        return ok

    def verify(self, view, article_id, *args, **kw):
        state["id"] = article_id
        return orig_verify(self, view, article_id, *args, **kw)

    rewrite.passes, Index.identity, Deduplicator._verify = passes, identity, verify
    try:
        decisions = {}
        with tempfile.TemporaryDirectory() as tmp, Deduplicator(config, tmp) as dedup:
            for rec in records:
                decisions[rec["id"]] = dedup.process(article_from_object(rec, config)).to_event()
    finally:
        rewrite.passes, Index.identity, Deduplicator._verify = orig_passes, orig_identity, orig_verify
    return decisions, band


def describe_band(band: list[tuple], cluster: dict[str, str], text: dict[str, str], title: str) -> None:
    seen = set()
    rows = {True: [], False: []}
    for new, old, j, shared, share, length, ok, words in band:
        if (new, old) in seen:
            continue
        seen.add((new, old))
        same = cluster.get(new) == cluster.get(old)
        rows[same].append((j, shared, share, length, set_jaccard(text[new], text[old]), words, ok))
    for same, rs in rows.items():
        print(f"{title}: band candidates, {'same story' if same else 'different stories'}: {len(rs)} "
              f"(rule passed {sum(r[-1] for r in rs)})")
        if not rs:
            continue
        ws = sorted(r[4] for r in rs)
        print("  exact word-set Jaccard (words of 3+ letters) min / 10 / 50 / 90 % / max:",
              " / ".join(f"{ws[int(q * (len(ws) - 1))]:.3f}" for q in (0, .1, .5, .9, 1)))
        es = sorted(r[5] for r in rs if r[5] is not None)
        if es:
            print(f"  estimated content-word Jaccard (bitmaps; {len(rs) - len(es)} not comparable) "
                  "min / 10 / 50 / 90 % / max:", " / ".join(f"{es[int(q * (len(es) - 1))]:.3f}"
                                                          for q in (0, .1, .5, .9, 1)))
        long = [r for r in rs if r[3] >= rewrite.MIN_LENGTH and r[5] is not None]
        if long:
            print(f"  of those with length ratio >= {rewrite.MIN_LENGTH}: {len(long)}, estimated content-word "
                  f"Jaccard {min(r[5] for r in long):.3f} - {max(r[5] for r in long):.3f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=quality_cases.DEFAULT_DATA)
    ap.add_argument("--stream", action="store_true", help="also the dev stream's band candidates")
    ap.add_argument("--class-seed", type=int, default=1, help="seed of the class generator")
    add_arguments(ap, EngineConfig)
    args = ap.parse_args(argv)
    config = load(EngineConfig, args)
    records, truth = quality_cases.make("rewrite", quality_cases.load_articles(args.data), seed=args.class_seed)
    text = {r["id"]: r["text"] for r in records}
    cluster = {t["id"]: t["cluster"] for t in truth}
    decisions, band = run_logged(config, records)
    dedup = Deduplicator(config, tempfile.mkdtemp())
    banding = Banding(lsh_params(config))
    reasons = Counter()
    positives = [t for t in truth if t["kind"] == "rewrite"]
    for t in positives:
        d = decisions[t["id"]]
        if d["type"] == "duplicate-of" and d["duplicate_of"] == t["cluster"]:
            reasons["found: " + d["method"]] += 1
            continue
        a = dedup.fingerprint(article_from_object({"id": t["cluster"], "text": text[t["cluster"]]}, config))
        b = dedup.fingerprint(article_from_object({"id": t["id"], "text": text[t["id"]]}, config))
        sa, sb = stored_signature(a.minhash), stored_signature(b.minhash)
        j = round(float(bbit_jaccard((sa == sb).sum(), config.num_perm, SIGNATURE_BITS)), 4)
        lsh = bool(set(banding.keys(sa)) & set(banding.keys(sb)))
        near = hamming(a.simhash, b.simhash) <= config.simhash_k
        if not (lsh or near):
            reasons[f"not a candidate (estimated J {'< ' if j < config.rewrite_jaccard else '>= '}"
                    f"{config.rewrite_jaccard})"] += 1
            continue
        if not rewrite.in_band(j, config.rewrite_jaccard, config.jaccard_threshold):
            reasons[f"candidate, estimated J outside the band ({'below' if j < config.rewrite_jaccard else 'above'})"] += 1
            continue
        shared, share, length = rewrite.evidence(b.identity, a.identity, b.n_shingles, a.n_shingles)
        words = rewrite.word_jaccard(b.words, a.words) if config.rewrite_word_jaccard > 0 else None
        why = []
        if length < rewrite.MIN_LENGTH:
            why.append(f"length ratio < {rewrite.MIN_LENGTH}")
        if words is not None:
            if words < config.rewrite_word_jaccard:
                why.append(f"content-word Jaccard {words:.3f} < {config.rewrite_word_jaccard}")
        else:
            if shared < config.rewrite_min_pairs:
                why.append(f"shared pairs < {config.rewrite_min_pairs}")
            if share < rewrite.MIN_SHARE:
                why.append(f"share < {rewrite.MIN_SHARE}")
        reasons["candidate in band, rejected: " + (" and ".join(why) or "other (look-alike check?)")] += 1
    dedup.close()
    print(f"rewrite positives: {len(positives)}")
    for k, v in sorted(reasons.items(), key=lambda kv: -kv[1]):
        print(f"  {v:4d}  {k}")
    describe_band(band, cluster, text, "class rewrite")
    if args.stream:
        recs = [json.loads(line) for line in (args.data / "news_stream.jsonl").open()]
        tr = [json.loads(line) for line in (args.data / "news_stream.truth.jsonl").open()]
        _, sband = run_logged(config, recs)
        describe_band(sband, {t["id"]: t["cluster"] for t in tr}, {r["id"]: r["text"] if "text" in r else html_to_text(r["html"]) for r in recs}, "dev stream")
    return 0


if __name__ == "__main__":
    sys.exit(main())
