"""The compiled text rules (stream_dedup.candidate_rules) against their Python reference
(Deduplicator._verify_reference): the same decision and the same matched candidates, on random
records at every threshold and on the streams; Python's round(x, 4) where the kernel can tell it."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from stream_dedup import candidate_rules
from stream_dedup.config import EngineConfig
from stream_dedup.engine import Deduplicator
from stream_dedup.fingerprint import Fingerprint
from stream_dedup.identity import _select
from stream_dedup.index_record import _pack_record, stored_signature
from stream_dedup.passages import PassageLookup
from stream_dedup.record import article_from_object
from stream_dedup.record_store import RecordStore
from stream_dedup.rewrite import WORD_BITS


class Records:
    """The two reads of a verification, from a list of packed records (seq = position)."""

    def __init__(self, index, records: list[bytes | None]) -> None:
        self.index, self.values = index, records

    def records(self, seqs: list[int]) -> list[bytes | None]:
        return [self.values[s] for s in seqs]

    def screen(self, seqs, minhash, simhash, n, jaccard_of, rules):
        return self.index.screen(seqs, minhash, simhash, n, jaccard_of, rules, self.records(seqs))


def _identity(rng: np.random.Generator, base: np.ndarray, keep: float) -> np.ndarray:
    """A sketch sharing about ``keep`` of ``base``'s pairs (contexts 0..30, tokens 0..3, both kinds)."""
    mine = base[rng.random(base.shape[0]) < keep]
    extra = (rng.integers(0, 30, 12).astype(np.uint32) << 16) | (rng.integers(0, 2, 12).astype(np.uint32) << 15) \
        | rng.integers(0, 4, 12).astype(np.uint32)
    return _select(np.concatenate([mine, extra]))


def _words(rng: np.random.Generator, base: np.ndarray, keep: float, fill: int) -> bytes:
    bits = base & (rng.random(WORD_BITS) < keep)
    bits |= rng.random(WORD_BITS) < fill / WORD_BITS
    return np.packbits(bits, bitorder="little").tobytes()


def _case(rng: np.random.Generator, config: EngineConfig, m: int):
    """A new article and ``m`` packed candidate records around it: every agreement count, sizes
    near the article's and at the short-text and containment limits, SimHash distances around
    ``simhash_k``, identity sketches and word bitmaps from disjoint to equal (empty and overfull too)."""
    n = int(rng.choice([3, 8, 20, 40, 61, 90, 150, 400]))
    query = rng.integers(0, 1 << 16, config.num_perm).astype(np.uint32)
    simhash = int(rng.integers(0, 1 << 62))
    base_ids = _select((rng.integers(0, 30, 40).astype(np.uint32) << 16)
                       | (rng.integers(0, 2, 40).astype(np.uint32) << 15) | rng.integers(0, 4, 40).astype(np.uint32))
    base_words = rng.random(WORD_BITS) < rng.choice([0.05, 0.2, 0.8])
    fp = Fingerprint(minhash=query, simhash=simhash, exact=bytes(16), n_shingles=n,
                     identity=base_ids if rng.random() < 0.9 else _select(np.zeros(0, dtype=np.uint32)),
                     anchors=np.arange(int(rng.integers(0, 30)), dtype=np.uint64),
                     words=_words(rng, base_words, 1.0, 0) if rng.random() < 0.85 else b"")
    records: list[bytes | None] = []
    band = rng.random() < 0.4  # a case of rewrites: estimates in the rewrite band, lengths alike
    for _ in range(m):
        agree = int(rng.choice([int(rng.integers(0, config.num_perm + 1)), 64, 38, 39, 90, 128]))
        if band:
            agree = int(rng.integers(30, 64))
        sig = query.copy()
        sig[agree:] ^= 0x5A5A
        sig = sig[rng.permutation(config.num_perm)] if rng.random() < 0.1 else sig
        stored_n = int(rng.choice([n, max(1, int(n * 0.9)), int(rng.integers(1, 500)), 2, 7, 60, 61]))
        flips = rng.choice(64, int(rng.integers(0, 2 * config.simhash_k + 3)), replace=False)
        if band:
            stored_n, flips = n + int(rng.integers(-n // 12, n // 12 + 1)), rng.choice(64, 20, replace=False)
        sim = simhash ^ sum(1 << int(b) for b in flips)
        words = b"" if rng.random() < 0.1 else _words(rng, base_words, float(rng.random()), int(rng.choice([0, 5, 450])))
        records.append(None if rng.random() < 0.03 else _pack_record(
            1.0, sim, stored_n, True, bytes(16), sig, f"a{len(records)}", "r" if rng.random() < 0.5 else f"a{len(records)}",
            {"type": "new"}, _identity(rng, base_ids, float(rng.random())), int(rng.integers(0, 40)), words))
    return fp, records


CONFIGS = [{}, {"short_text_jaccard": 1.0}, {"rewrite_jaccard": 0.0}, {"containment_both_ways": 0},
           {"rewrite_word_jaccard": 0.0}, {"identity_threshold": 0.0},
           {"jaccard_threshold": 0.7, "simhash_k": 2, "containment_threshold": 0.6, "min_containment_shingles": 5}]


@pytest.mark.parametrize("changes", CONFIGS)
def test_compiled_rules_decide_as_the_python_rules(tmp_path: Path, changes: dict) -> None:
    """400 random verifications of up to 60 candidates (and as many with passage anchors shared,
    boilerplate discounted): the same Decision, field by field, and the same matched candidates,
    with the candidates' records read from a list or where the record store holds them."""
    config = EngineConfig(**changes)
    rng = np.random.default_rng(sorted(CONFIGS, key=str).index(changes) + 41)
    outcomes: set[str] = set()
    with Deduplicator(config, tmp_path / "state") as d:
        for case in range(400):
            fp, records = _case(rng, config, int(rng.choice([1, 2, 3, 5, 20, 60])))
            view = Records(d.index, records)
            seqs = list(range(len(records)))
            sig = stored_signature(fp.minhash)
            passage = None
            if case % 2 and fp.anchors.shape[0]:
                shared = {s: int(rng.integers(1, 30)) for s in seqs if rng.random() < 0.3}
                passage = PassageLookup(fp.anchors, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint32),
                                        shared, int(rng.integers(1, fp.anchors.shape[0] + 1)))
            compiled_matched: set[int] = set()
            python_matched: set[int] = set()
            d.index.record_store = RecordStore(0, 8)  # (nothing held: the records read as a list)
            compiled = d._verify(view, "new", fp, sig, seqs, passage, compiled_matched)
            python = d._verify_reference(view, "new", fp, sig, seqs, passage, python_matched)
            assert compiled == python, (case, compiled, python)
            assert compiled_matched == python_matched, case
            # and read where the record store holds them (all of them: one call; else as above)
            d.index.record_store = store = RecordStore(1 << 20, 8)
            for s, r in zip(seqs, records, strict=True):
                if r is not None:
                    store.put(s, r)
            stored_matched: set[int] = set()
            assert d._verify(view, "new", fp, sig, seqs, passage, stored_matched) == python, case
            assert stored_matched == python_matched, case
            outcomes.add(f"{compiled.type} {compiled.method} {compiled.direction} {compiled.template_of is not None}")
    # the cases reach every rule, both directions, look-alikes and plain misses
    expected = {"new None None False", "duplicate-of minhash None False"}
    if config.identity_threshold > 0:
        expected.add("new None None True")
    if config.rewrite_jaccard > 0:
        expected.add("duplicate-of rewrite None False")
    if config.containment_both_ways:
        expected.add("duplicate-of containment earlier_in_new False")
    assert expected <= outcomes, outcomes


def test_round4_is_pythons_round_or_says_it_cannot_tell() -> None:
    """candidate_rules._round4 (run here as the plain Python it is compiled from: the same float
    operations) gives round(x, 4), or flags the summary where x * 10**4 is within 1e-9 of a half."""
    rng = np.random.default_rng(5)
    values = rng.random(200_000).tolist()
    values += [k / 10_000 for k in range(10_001)] + [(k + 0.5) / 10_000 for k in range(10_000)]
    values += [math.nextafter((k + 0.5) / 10_000, side) for k in range(0, 10_000, 7) for side in (0.0, 2.0)]
    values += [1 / 20_000, 0.0, 1.0]
    flagged = 0
    for x in values:
        summary = np.zeros(4)
        value = candidate_rules._round4(x, summary)
        if summary[candidate_rules.S_UNCERTAIN]:
            flagged += 1
            assert abs(x * 10_000 - math.floor(x * 10_000) - 0.5) < 1e-9, x
        else:
            assert value == round(x, 4), x
    assert 0 < flagged < 30_000  # (the halves listed above; never a random value)


def test_a_rounding_at_a_half_goes_to_the_python_rules(tmp_path: Path) -> None:
    """An anchored containment of 1 / 20,000 (x * 10**4 is 0.5 give or take the product's
    rounding): the kernel cannot round it as Python does and says so; _verify then answers as the
    Python rules do."""
    config = EngineConfig()
    rng = np.random.default_rng(3)
    with Deduplicator(config, tmp_path / "state") as d:
        fp, records = _case(rng, config, 5)
        fp = Fingerprint(fp.minhash, fp.simhash, fp.exact, 200, fp.identity, np.arange(20_000, dtype=np.uint64),
                         fp.words)
        records = [r or records[0] for r in records]
        passage = PassageLookup(fp.anchors, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint32), {2: 1}, 19_999)
        sig = stored_signature(fp.minhash)
        answer = d._compiled.run(records, sig.astype(np.int64), fp.simhash, 200, fp.words, fp.identity,
                                 [passage.shared.get(s, 0) for s in range(5)], passage.usable,
                                 1.0 - passage.usable / fp.anchors.shape[0])
        assert answer is None
        view = Records(d.index, records)
        assert d._verify(view, "new", fp, sig, list(range(5)), passage, set()) \
            == d._verify_reference(view, "new", fp, sig, list(range(5)), passage, set())


@pytest.mark.shared_data
def test_compiled_rules_decide_as_the_python_rules_on_the_streams(tmp_path: Path, shared_stream) -> None:
    """The dev stream's first 2,000 records, and the same cut to short items (title and ~40
    words: ~10 candidates each, most near a threshold): every event equal with the Python rules."""
    config = EngineConfig()
    rows = shared_stream(2000)[0]
    short = [{"id": r["id"], "text": f"{r.get('title', '')}\n\n{' '.join(r.get('text', '').split()[:40])}"}
             for r in rows if r.get("text")]
    for name, stream in (("dev", rows), ("short", short)):
        articles = [article_from_object(r, config) for r in stream]
        events = {}
        for rules in ("compiled", "python"):
            with Deduplicator(config, tmp_path / f"{name}-{rules}") as d:
                if rules == "python":
                    d._verify = d._verify_reference
                events[rules] = [x.to_event() for i in range(0, len(articles), 256)
                                 for x in d.process_batch(articles[i:i + 256], now=1000.0)]
        diff = [(a, b) for a, b in zip(events["compiled"], events["python"], strict=True) if a != b]
        assert not diff, f"{name}: {len(diff)} events differ, first {diff[0]}"
        assert sum(e["type"] == "duplicate-of" for e in events["compiled"]) > len(articles) // 4
