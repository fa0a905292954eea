"""Fixtures of the engine tests: the shared news stream (skips when absent, fails under CI) and
deterministic synthetic article text."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

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
