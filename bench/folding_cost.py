"""Per-record cost of text folding (stream_dedup.folding.fold) against plain NFKC + casefold and
folding by table (stream_dedup.fold_table), and of the identity sketch (stream_dedup.identity.identity_sketch).

    python bench/folding_cost.py [--data ../shared/data]

Sets of texts: the shared articles that are ASCII (folding is never called for them), the
non-ASCII ones that fold by table (Latin letters, common punctuation), those that need the general
fold (other characters), the articles with one word in seven spelled with accents (as
bench/throughput.py's ``accented`` stream), and articles disguised by bench/quality_cases.py
(diacritics, look-alike letters, full-width forms, invisible characters), and a Russian and a
Chinese article (:data:`RUSSIAN`, :data:`CHINESE`). The last column is the whole fingerprint.
Runs on an older checkout too (``PYTHONPATH=<tree>``: no folding by table there).
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
from throughput import accented  # noqa: E402

from stream_dedup.config import EngineConfig  # noqa: E402
from stream_dedup.fingerprint import Fingerprinter  # noqa: E402
from stream_dedup.folding import fold  # noqa: E402
from stream_dedup.identity import identity_sketch  # noqa: E402

try:  # an older checkout (PYTHONPATH=<tree>, for a before/after) has no folding by table
    from stream_dedup.fold_table import fold_bytes  # noqa: E402
except ImportError:
    def fold_bytes(text: str, diacritics: bool, kind: str = "tokens") -> None:
        return None

#: articles in other scripts (written for this bench: the shared data is English), each a paragraph repeated
RUSSIAN = ("Центральный банк России в пятницу повысил ключевую ставку на 0,5 процентного пункта до 16 процентов "
           "годовых, сообщила председатель Эльвира Набиуллина на пресс-конференции в Москве. Инфляция в октябре "
           "составила 7,4 процента. ") * 12
CHINESE = ("中国人民银行周五宣布将一年期贷款市场报价利率下调0.1个百分点至3.35%，这是今年以来的第二次降息。"
           "央行行长潘功胜在北京表示，经济复苏仍面临挑战。") * 20


def _cost(f, texts: list[str]) -> float:
    """Best of several rounds over ``texts`` (at least 5, and ~200 calls), µs a text."""
    f(texts[0])  # tables built, kernels loaded
    best = float("inf")
    for _ in range(max(5, 200 // len(texts))):
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
    by_table = [t for t in texts if not t.isascii() and fold_bytes(t, True) is not None]
    general = [t for t in texts if not t.isascii() and fold_bytes(t, True) is None]
    accents = [accented(t) for t in texts[:300]]
    rng = random.Random(1)
    disguised = [quality_cases.disguise(rng, t, 0.2) for t in texts[:300]]
    identity_sketch(RUSSIAN)  # load the compiled kernels
    fingerprint = Fingerprinter(EngineConfig()).fingerprint_text
    print("| texts | records | by table | NFKC + casefold | fold | fold by table | identity sketch | fingerprint |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    sets = (("ASCII", [t for t in texts if t.isascii()]), ("non-ASCII, Latin letters and punctuation", by_table),
            ("non-ASCII, other characters", general), ("accented (one word in seven)", accents),
            ("disguised", disguised), ("Russian article (2.7 KB)", [RUSSIAN]), ("Chinese article (1.5 K characters)", [CHINESE]))
    for name, ts in sets:
        if not ts:
            continue
        table = sum(fold_bytes(t, True) is not None for t in ts if not t.isascii())
        plain = _cost(lambda t: unicodedata.normalize("NFKC", t).casefold(), ts)
        folded = _cost(fold, ts) if name != "ASCII" else 0.0
        tabled = _cost(lambda t: fold_bytes(t, True), ts) if name != "ASCII" else 0.0
        ident = _cost(identity_sketch, ts)
        whole = _cost(fingerprint, ts)
        print(f"| {name} | {len(ts)} | {table} | {plain:.1f} | {folded:.1f} | {tabled:.1f} | {ident:.1f} | {whole:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
