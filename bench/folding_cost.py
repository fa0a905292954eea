"""Per-record cost of text folding (stream_dedup.folding.fold) against plain NFKC + casefold, and
of the identity sketch (stream_dedup.identity.identity_sketch).

    python bench/folding_cost.py [--data ../shared/data]

Three sets of texts: the shared articles that take the ASCII fast path (folding is never called
for them), those that do not (non-ASCII letters), and articles disguised by
bench/quality_cases.py (diacritics, look-alike letters, full-width forms, invisible characters).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import unicodedata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import quality_cases  # noqa: E402

from stream_dedup.folding import fold  # noqa: E402
from stream_dedup.identity import identity_sketch  # noqa: E402
from stream_dedup.text import ascii_equivalent  # noqa: E402


def _cost(f, texts: list[str], repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for t in texts:
            f(t)
        best = min(best, time.perf_counter() - t0)
    return best / len(texts) * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=quality_cases.DEFAULT_DATA)
    args = ap.parse_args()
    texts = [a["text"] for a in quality_cases.load_articles(args.data)]
    fast = [t for t in texts if ascii_equivalent(t) is not None]
    slow = [t for t in texts if ascii_equivalent(t) is None]
    rng = random.Random(1)
    disguised = [quality_cases.disguise(rng, t, 0.2) for t in texts[:300]]
    identity_sketch(fast[0])  # load the compiled kernels
    print("| texts | records | ASCII-equivalent check (us) | NFKC + casefold (us) | fold (us) | identity sketch (us) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, ts in (("ASCII path", fast), ("non-ASCII letters", slow), ("disguised", disguised)):
        check = _cost(ascii_equivalent, ts)
        plain = _cost(lambda t: unicodedata.normalize("NFKC", t).casefold(), ts)
        folded = _cost(fold, ts) if name != "ASCII path" else 0.0
        ident = _cost(identity_sketch, ts)
        print(f"| {name} | {len(ts)} | {check:.1f} | {plain:.1f} | {folded:.1f} | {ident:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
