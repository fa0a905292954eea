"""Fixtures of the engine tests: the shared news stream (skips when absent, fails under CI) and
deterministic synthetic article text."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
STREAM = SHARED_DATA / "news_stream.jsonl"
TRUTH = SHARED_DATA / "news_stream.truth.jsonl"


def require_shared_data() -> Path:
    """The shared data directory; skip when it is absent, except under CI (then fail)."""
    missing = [str(p) for p in (STREAM, TRUTH) if not p.is_file()]
    if missing:
        msg = f"shared data not found: {', '.join(missing)} (expected next to the repository in ../shared/data)"
        if os.environ.get("CI"):
            pytest.fail(f"{msg}; CI is set, so the shared data is required", pytrace=False)
        pytest.skip(msg)
    return SHARED_DATA


def read_jsonl(path: Path, limit: int) -> list[dict]:
    out = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if len(out) >= limit:
                break
            out.append(json.loads(line))
    return out


@pytest.fixture(scope="session")
def shared_stream() -> Callable[[int], tuple[list[dict], list[dict]]]:
    """``shared_stream(n)``: the first ``n`` records of the shared stream and their truth rows."""
    require_shared_data()

    def first(n: int) -> tuple[list[dict], list[dict]]:
        return read_jsonl(STREAM, n), read_jsonl(TRUTH, n)

    return first


def _make_vocabulary(seed: int = 20240601, size: int = 4000) -> list[str]:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab: set[str] = set()
    while len(vocab) < size:
        vocab.add("".join(rng.choice(letters) for _ in range(rng.randint(3, 10))))
    return sorted(vocab)


VOCABULARY = _make_vocabulary()


def random_words(seed: int, n: int) -> list[str]:
    """``n`` words drawn (deterministically for ``seed``) from a 4,000-word synthetic vocabulary."""
    rng = random.Random(seed)
    return [rng.choice(VOCABULARY) for _ in range(n)]


def as_text(words: list[str]) -> str:
    """Words as prose: sentences of 12 words, capitalised, with punctuation."""
    sentences = []
    for i in range(0, len(words), 12):
        chunk = words[i:i + 12]
        sentences.append(chunk[0].capitalize() + " " + " ".join(chunk[1:]) + ".")
    return " ".join(sentences)


def shingle_set(words: list[str], k: int = 4) -> set[tuple[str, ...]]:
    """The exact word k-shingle set (lower-cased words), for computing true Jaccard values."""
    w = [x.lower() for x in words]
    if len(w) < k:
        return {tuple(w)}
    return {tuple(w[i:i + k]) for i in range(len(w) - k + 1)}


def true_jaccard(a: list[str], b: list[str], k: int = 4) -> float:
    sa, sb = shingle_set(a, k), shingle_set(b, k)
    return len(sa & sb) / len(sa | sb)


@pytest.fixture(scope="session")
def textgen() -> SimpleNamespace:
    """Deterministic synthetic articles: ``words(seed, n)``, ``text(words)``, ``jaccard(a, b, k)``."""
    return SimpleNamespace(words=random_words, text=as_text, jaccard=true_jaccard, shingles=shingle_set)


def _made_up_id(rng: random.Random) -> str:
    """An id: ASCII, accented, CJK, a lone surrogate, an emoji, JSON's escapes."""
    return rng.choice(["a", "news-", "é-", "日本-", "\ud800x-", "📰", 'q"', "b\\", "t\t\n", "c\x01\x1f"]) \
        + str(rng.randrange(10 ** rng.randrange(1, 6)))


@pytest.fixture
def made_up_run() -> Callable[[int], SimpleNamespace]:
    """``made_up_run(seed)``: a made-up run of a batch's articles as decide_run leaves it, through
    every branch of stream_dedup.record_kernel.pack_run and stream_dedup.event_kernel.write_events:
    new articles, verified and exact duplicates of records held in a record store and of articles
    filed earlier in the run, look-alikes (their stored decisions given, as Python makes them),
    roots that are and are not the article, odd ids; with the records and decisions Python makes
    of it (``expected_records``, ``decisions``: None for a look-alike) and ``records()``, pack_run's."""
    from stream_dedup import decide_kernel as k
    from stream_dedup import record_kernel, stored_decision
    from stream_dedup.decision import Decision, exact_copy, verified
    from stream_dedup.index_record import _pack_parts, _pack_record
    from stream_dedup.record_store import RecordStore, store_locate

    num_perm = 8
    sig = 2 * num_perm

    def make(seed: int) -> SimpleNamespace:
        rng = random.Random(seed)
        nrng = np.random.default_rng(seed)
        # held records: their ids and roots are what a match in the store gives
        store = RecordStore(1 << 16, 40)
        held = []
        for s in range(12):
            aid = _made_up_id(rng)
            root = rng.choice([aid, _made_up_id(rng), "root-" + aid])
            rec = _pack_record(1.5e9 + s, rng.getrandbits(64), rng.randrange(1, 500), True, bytes(16),
                               nrng.integers(0, 1 << 63, num_perm, dtype=np.uint64), aid, root, b"\x01\x00\x00\x00")
            assert store.put(s, rec)
            held.append((aid, root))
        starts, lengths = np.zeros(12, dtype=np.int64), np.zeros(12, dtype=np.int64)
        assert store_locate(store.buf, store.keys, store.vals, np.arange(12, dtype=np.int64), starts, lengths) == 0
        at_of, len_of = starts.tolist(), lengths.tolist()
        n, seq0, start = 40, 1000, 3  # (the run starts inside the batch: rows and result are the batch's)
        total = start + n
        rows = np.full(total, -1, dtype=np.int64)
        rows[start:] = nrng.permutation(n)  # (a batch article's row is not its position)
        simhashes = nrng.integers(0, 1 << 63, n, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        sizes = nrng.integers(1, 1 << 31, n, dtype=np.int64)
        exacts = nrng.integers(0, 256, (n, 16), dtype=np.uint8)
        signatures = nrng.integers(0, 1 << 16, (n, num_perm), dtype=np.uint16)
        signature_bytes = signatures.astype(">u2").tobytes()
        k_ids = nrng.integers(0, 6, n)
        identity_at = np.zeros(n + 1, dtype=np.int64)
        identity_at[1:] = np.cumsum(k_ids)
        identity = np.sort(nrng.integers(0, 1 << 32, int(identity_at[-1]), dtype=np.uint32))
        identity_bytes = identity.astype(">u4").tobytes()
        anchor_counts = nrng.choice([0, 1, 7, 70_000], n)
        anchors_at = np.zeros(n + 1, dtype=np.int64)
        anchors_at[1:] = np.cumsum(anchor_counts)
        has_words = nrng.random(n) < 0.7
        words = nrng.integers(0, 256, (n, 64), dtype=np.uint8)
        result = np.zeros((total, k.R_COLUMNS), dtype=np.float64)
        ids = [_made_up_id(rng) for _ in range(n)]
        ids[5] = held[2][1]  # (an article whose id is a held match's root)
        nows = [1.7e9 + rng.random() for _ in range(n)]
        given = [b""] * n
        expected: list[bytes] = []
        decisions: list[Decision | None] = []
        roots: list[str] = []
        for j in range(n):
            res = result[start + j]
            r = int(rows[start + j])
            res[k.R_CANDIDATES] = rng.choice([0, 1, 6, 7, 8, 200, 100_000])
            res[k.R_INDEXED] = rng.random() < 0.8
            res[k.R_BEST] = res[k.R_TEMPLATE] = -1
            kind = rng.choice(["new", "held", "run", "exact", "look-alike"] if j else ["new", "held", "look-alike"])
            article_id, root_id = ids[j], ids[j]
            d: Decision | None = None
            if kind in ("held", "run", "exact"):
                if kind == "held" or (kind == "exact" and rng.random() < 0.5):
                    h = rng.randrange(12) if j != 5 else 2
                    res[k.R_BEST], res[k.R_AT], res[k.R_LENGTH] = h, at_of[h], len_of[h]
                    matched_id, root_id = held[h]
                else:
                    m = rng.randrange(j)
                    res[k.R_BEST], res[k.R_AT] = seq0 + m, -1
                    matched_id, root_id = ids[m], roots[m]
                res[k.R_HAMMING] = rng.choice([0, 3, 127, 128, 64])
                if kind == "exact":  # (decide_kernel._exact_duplicate's row)
                    res[k.R_CANDIDATES], res[k.R_JACCARD], res[k.R_CONTAINMENT], res[k.R_EXACT] = 1, 1.0, 1.0, 1
                    res[k.R_INDEXED] = 0
                    d = exact_copy(article_id, int(res[k.R_HAMMING]), matched_id, root_id)
                else:
                    res[k.R_HITS], res[k.R_DIRECTION] = rng.randrange(1, 16), rng.randrange(3)
                    res[k.R_JACCARD], res[k.R_CONTAINMENT] = rng.randrange(10001) / 10000, rng.randrange(10001) / 10000
                    d = verified(article_id, res[k.R_HITS], res[k.R_DIRECTION], res[k.R_HAMMING],
                                 float(res[k.R_JACCARD]), float(res[k.R_CONTAINMENT]), matched_id, root_id,
                                 int(res[k.R_CANDIDATES]))
                stored = stored_decision.encode_decision(d, article_id, root_id)
            elif kind == "look-alike":  # (its stored decision made by Python: given)
                res[k.R_TEMPLATE], res[k.R_AT] = seq0 + j - 1 if j else 0, -1 if j else at_of[0]
                given[j] = stored = rng.choice([b'{"x": 1}', b"\x01\x02\x03\x04\x05"])
            else:
                d = Decision(id=article_id, type="new", candidates=int(res[k.R_CANDIDATES]))
                stored = stored_decision.encode_decision(d, article_id, root_id)
            rid = root_id.encode("utf-8", "surrogatepass") if root_id != article_id else b""
            indexed = bool(res[k.R_INDEXED])
            expected.append(_pack_parts(nows[j], int(simhashes[r]), int(sizes[r]), indexed, exacts[r].tobytes(),
                                        signature_bytes[r * sig:(r + 1) * sig],
                                        article_id.encode("utf-8", "surrogatepass"), rid,
                                        identity_bytes[4 * identity_at[r]:4 * identity_at[r + 1]],
                                        int(anchor_counts[r]),
                                        words[r].tobytes() if indexed and has_words[r] else b"", stored))
            decisions.append(d)
            roots.append(root_id)
        encoded = [i.encode("utf-8", "surrogatepass") for i in ids]
        id_at = np.zeros(n + 1, dtype=np.int64)
        id_at[1:] = np.cumsum([len(e) for e in encoded])
        given_at = np.zeros(n + 1, dtype=np.int64)
        given_at[1:] = np.cumsum([len(g) for g in given])
        run = SimpleNamespace(result=result, start=start, n=n, seq0=seq0, store=store, ids=ids, sig_size=sig,
                              expected_records=expected, decisions=decisions)

        def records() -> list[bytes]:
            """pack_run's records of the run (``run.packed``, ``run.ends``: as it returns them)."""
            ends = np.zeros(n, dtype=np.int64)
            out = record_kernel.pack_run(
                result, start, start + n, seq0, rows, np.array(nows).view(np.uint64), simhashes, sizes, exacts,
                np.frombuffer(signature_bytes, dtype=np.uint8), sig, np.frombuffer(identity_bytes, dtype=np.uint8),
                identity_at, anchors_at, words, has_words, np.frombuffer(b"".join(encoded), dtype=np.uint8), id_at,
                np.frombuffer(b"".join(given), dtype=np.uint8), given_at, stored_decision.VERIFIED_HEADS,
                stored_decision.EXACT_HEAD, stored_decision.NEW_HEAD, store.buf, ends)
            run.packed, run.ends = out, ends
            data = out.tobytes()
            return [data[a:b] for a, b in zip([0, *ends.tolist()[:-1]], ends.tolist(), strict=True)]

        run.records = records
        return run

    return make
