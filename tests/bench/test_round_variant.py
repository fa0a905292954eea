"""bench/kafka_e2e.py's rounds: every round's records as long as every other's, and never a match."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _kafka_e2e():
    spec = importlib.util.spec_from_file_location("bench_kafka_e2e", ROOT / "bench" / "kafka_e2e.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rounds_have_records_of_one_length_and_no_shared_word() -> None:
    e2e = _kafka_e2e()
    line = json.dumps({"id": "a-1", "title": "Harbour news", "text": "The harbour opened at 9."}).encode()
    assert e2e.round_variant(line, 0) == line
    variants = {r: e2e.round_variant(line, r) for r in (1, 9, 10, 81, 999)}
    assert len({len(v) for v in variants.values()}) == 1  # (r1 against r81 differed by a character a word)
    words = [set(json.loads(v)["text"].split()) for v in variants.values()]
    assert all(a.isdisjoint(b) for i, a in enumerate(words) for b in words[i + 1:])
    assert json.loads(variants[81])["id"] == "a-1~r081"
    with pytest.raises(ValueError, match="1-999"):
        e2e.round_variant(line, 1000)
