"""One peer detector over a JSONL stream, as a whole process (run by ``bench/throughput.py``).

    python bench/peers.py {datasketch,rensa,gaoya} INPUT.jsonl --out EVENTS.jsonl \\
        --k 4 --num-perm 128 --bands 37 --rows 3 --threshold 0.3 --jaccard 0.5 [--seed 1]

Every peer does the same work per record, in input order: parse the JSON line (orjson, the
parser stream-dedup uses, when it is installed), take ``text`` (or the raw ``html``: the peers
have no HTML extraction), lowercase, split into ``\\w+`` words and build the set of word
k-shingles; sketch it; query the LSH index for candidates; verify each candidate by its
estimated Jaccard (signature agreement) >= ``--jaccard`` and call the record a duplicate of the
best one; insert the record; write one decision line (``{"id", "type": "new" | "duplicate-of",
"duplicate_of", "similarity", "method"}``, the fields ``bench/quality.py`` scores).

* datasketch: ``MinHash(num_perm)`` + ``update_batch``, ``MinHashLSH(params=(bands, rows))``,
  candidates verified with ``MinHash.jaccard``;
* rensa: ``RMinHash`` + ``RMinHashLSH`` (Rust); its LSH needs num_perm = bands x rows, so it
  sketches ``bands * rows`` permutations; candidates verified with ``RMinHash.jaccard``;
* gaoya: ``MinHashStringIndex`` (Rust) with ``bands`` x ``rows`` hashes and the same shingles
  (fed as tokens); its query returns the candidates whose estimated Jaccard is >= ``--jaccard``.

Exit status 3 (and one line on stderr) when the peer's package is not installed.
"""

from __future__ import annotations

import argparse
import re
import sys

try:
    from orjson import loads
except ImportError:  # pragma: no cover - orjson is a dependency of stream-dedup
    from json import loads
from json import dumps

WORD = re.compile(r"\w+")
TOOLS = ("datasketch", "rensa", "gaoya")


def shingles(rec: dict, k: int) -> set[str]:
    words = WORD.findall((rec.get("text") or rec.get("html") or "").lower())
    return {" ".join(words[i:i + k]) for i in range(max(1, len(words) - k + 1))}


def event(rid: str, best: object, sim: float) -> str:
    if best is None:
        return dumps({"id": rid, "type": "new"})
    return dumps({"id": rid, "type": "duplicate-of", "duplicate_of": best, "similarity": round(sim, 4),
                  "method": "minhash"})


def run_datasketch(src, out, a: argparse.Namespace) -> None:
    from datasketch import MinHash, MinHashLSH

    lsh = MinHashLSH(num_perm=a.num_perm, params=(a.bands, a.rows))
    sigs: dict[str, MinHash] = {}
    for line in src:
        if not line.strip():
            continue
        rec = loads(line)
        rid = rec["id"]
        m = MinHash(num_perm=a.num_perm, seed=a.seed)
        m.update_batch([s.encode() for s in shingles(rec, a.k)])
        best, sim = None, -1.0
        for key in lsh.query(m):
            j = m.jaccard(sigs[key])
            if j >= a.jaccard and j > sim:
                best, sim = key, j
        lsh.insert(rid, m, check_duplication=False)
        sigs[rid] = m
        out.write(event(rid, best, sim) + "\n")


def run_rensa(src, out, a: argparse.Namespace) -> None:
    from rensa import RMinHash, RMinHashLSH

    num_perm = a.bands * a.rows
    lsh = RMinHashLSH(a.threshold, num_perm, a.bands)
    sigs: list = []
    ids: list[str] = []
    for line in src:
        if not line.strip():
            continue
        rec = loads(line)
        rid = rec["id"]
        m = RMinHash(num_perm, a.seed)
        m.update(list(shingles(rec, a.k)))
        best, sim = None, -1.0
        for key in lsh.query(m):
            j = m.jaccard(sigs[key])
            if j >= a.jaccard and j > sim:
                best, sim = key, j
        lsh.insert(len(sigs), m)
        sigs.append(m)
        ids.append(rid)
        out.write(event(rid, None if best is None else ids[best], sim) + "\n")


def run_gaoya(src, out, a: argparse.Namespace) -> None:
    from gaoya.minhash import MinHashStringIndex

    # the shingles are computed once per record and fed to the Rust index as tokens (the Python
    # wrapper's insert_document/query would run the analyzer twice)
    index = MinHashStringIndex(hash_size=32, jaccard_threshold=a.jaccard, num_bands=a.bands, band_size=a.rows,
                               analyzer=lambda doc: doc, id_container="vec").minhash_index
    ids: list[str] = []
    for line in src:
        if not line.strip():
            continue
        rec = loads(line)
        rid = rec["id"]
        tokens = list(shingles(rec, a.k))
        found = index.query_tokens_return_similarity(tokens)  # [(id, jaccard)], best first, >= threshold
        best, sim = (ids[found[0][0]], found[0][1]) if found else (None, -1.0)
        index.insert_tokens(len(ids), tokens)
        ids.append(rid)
        out.write(event(rid, best, sim) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tool", choices=TOOLS)
    ap.add_argument("input")
    ap.add_argument("--out", required=True)
    ap.add_argument("--k", type=int, required=True, help="word shingle length")
    ap.add_argument("--num-perm", type=int, required=True)
    ap.add_argument("--bands", type=int, required=True)
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--threshold", type=float, required=True, help="the LSH threshold (rensa's RMinHashLSH takes it)")
    ap.add_argument("--jaccard", type=float, required=True, help="estimated Jaccard of a duplicate")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    run = {"datasketch": run_datasketch, "rensa": run_rensa, "gaoya": run_gaoya}[a.tool]
    try:
        with open(a.input, "rb") as src, open(a.out, "w", encoding="utf-8") as out:
            run(src, out, a)
    except ImportError as exc:
        print(f"{a.tool} is not installed: {exc}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
