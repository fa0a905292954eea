"""stream_dedup.simhash: the fingerprint, the permuted tables, and the central claim that every
stored fingerprint within k bits is found, checked exhaustively against brute force through the
real RocksDB index."""

from __future__ import annotations

from itertools import combinations
from math import comb
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dedup.config import EngineConfig
from stream_dedup.engine import MAX_PER_BUCKET, Deduplicator
from stream_dedup.fingerprint import Fingerprint
from stream_dedup.index import Index
from stream_dedup.simhash import PermutedTables, hamming, simhash, simhash_numpy

MASK64 = (1 << 64) - 1


# ----------------------------------------------------------------------------------- fingerprint
def simhash_python(features: list[int]) -> int:
    votes = [0] * 64
    for f in features:
        for i in range(64):
            votes[i] += 1 if (f >> i) & 1 else -1
    return sum(1 << i for i in range(64) if votes[i] > 0)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, MASK64) | st.sampled_from([0, MASK64, 1, 1 << 63]), max_size=40))
def test_simhash_kernel_equals_numpy_and_python(features: list[int]) -> None:
    arr = np.array(features, dtype=np.uint64)
    expected = simhash_python(features)
    assert simhash(arr) == expected
    assert simhash_numpy(arr) == expected


def test_simhash_basics() -> None:
    f = 0x0123456789ABCDEF
    assert simhash(np.array([f], np.uint64)) == f
    assert simhash(np.array([], np.uint64)) == 0
    # a tie (one vote each way) gives 0 for that bit
    assert simhash(np.array([0b01, 0b10], np.uint64)) == 0
    # term frequency is a weight: the repeated feature wins
    assert simhash(np.array([0b01, 0b01, 0b10], np.uint64)) == 0b01


def test_similar_feature_sets_give_close_fingerprints() -> None:
    rng = np.random.default_rng(1)
    base = rng.integers(0, 2**64, 400, dtype=np.uint64)
    near = base.copy()
    near[:20] = rng.integers(0, 2**64, 20, dtype=np.uint64)  # 5 % of the features changed
    other = rng.integers(0, 2**64, 400, dtype=np.uint64)
    assert hamming(simhash(base), simhash(near)) <= 8
    assert hamming(simhash(base), simhash(other)) >= 16


def test_hamming() -> None:
    assert hamming(0, 0) == 0
    assert hamming(0, MASK64) == 64
    assert hamming(0b1011, 0b0001) == 2


# ------------------------------------------------------------------------------ permuted tables
LAYOUTS = [(3, 5), (3, 6), (2, 4), (1, 3), (0, 1), (4, 8)]


@pytest.mark.parametrize(("k", "blocks"), LAYOUTS)
def test_table_layout(k: int, blocks: int) -> None:
    t = PermutedTables(k, blocks)
    assert len(t) == comb(blocks, k)
    assert sorted(t.tables) == sorted(combinations(range(blocks), blocks - k))
    assert sum(t.widths) == 64
    assert max(t.widths) - min(t.widths) <= 1
    for table, key_blocks in enumerate(t.tables):
        assert t.key_bits[table] == sum(t.widths[i] for i in key_blocks)
        m = t.key_bits[table]
        assert t.key_masks[table] == ((1 << m) - 1) << (64 - m)


@pytest.mark.parametrize("args", [(3, 3), (5, 4), (-1, 4), (3, 65)])
def test_table_layout_rejects_bad_arguments(args: tuple[int, int]) -> None:
    with pytest.raises(ValueError):
        PermutedTables(*args)


@pytest.mark.parametrize(("k", "blocks"), LAYOUTS)
def test_permute_is_a_bit_permutation(k: int, blocks: int) -> None:
    t = PermutedTables(k, blocks)
    for table in range(len(t)):
        images = [t.permute(1 << i, table) for i in range(64)]
        assert all(x.bit_count() == 1 for x in images)
        assert len(set(images)) == 64
        # the key blocks come first, in block order
        key_blocks = t.tables[table]
        first_key_block = key_blocks[0]
        block_top_bit = t.shifts[first_key_block] + t.widths[first_key_block] - 1
        assert t.permute(1 << block_top_bit, table) == 1 << 63


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(LAYOUTS), st.integers(0, MASK64), st.integers(0, MASK64))
def test_permute_round_trip_and_hamming_preserved(layout: tuple[int, int], a: int, b: int) -> None:
    t = PermutedTables(*layout)
    pa, pb = t.permute_all(a), t.permute_all(b)
    assert pa == [t.permute(a, table) for table in range(len(t))]  # compiled kernel == Python twin
    for table in range(len(t)):
        assert 0 <= pa[table] <= MASK64
        assert t.unpermute(pa[table], table) == a
        assert hamming(pa[table], pb[table]) == hamming(a, b)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(LAYOUTS), st.integers(0, MASK64), st.data())
def test_pigeonhole_some_table_key_agrees(layout: tuple[int, int], a: int, data: st.DataObject) -> None:
    k, blocks = layout
    t = PermutedTables(k, blocks)
    flips = data.draw(st.sets(st.integers(0, 63), max_size=k))
    b = a
    for bit in flips:
        b ^= 1 << bit
    assert any((pa ^ pb) & mask == 0 for pa, pb, mask in zip(t.permute_all(a), t.permute_all(b), t.key_masks,
                                                             strict=True))


# ------------------------------------------------- every fingerprint within k bits, via the index
class SimHashStore:
    """Random fingerprints in a real :class:`Index` (its in-memory tables), written and probed exactly as the engine does."""

    def __init__(self, path: Path, k: int, blocks: int) -> None:
        self.k = k
        self.tables = PermutedTables(k, blocks)
        self.index = Index(path, num_perm=8, settings={"test": "simhash", "k": k, "blocks": blocks},
                           tables=self.tables)
        self.fps: dict[int, int] = {}

    def add(self, fp: int) -> int:
        n = len(self.fps)
        seq = self.index.insert(
            article_id=f"a{n}", first_seen=0.0, simhash=fp, n_shingles=10, exact=n.to_bytes(16, "big"),
            minhash=np.zeros(8, np.uint32), root_id=f"a{n}", decision={}, bucket_keys=np.zeros(0, np.uint64),
            permuted=self.tables.permute_array(fp),
            index_sketches=True, checkpoint=None)
        self.fps[seq] = fp
        return seq

    def finish(self) -> None:
        self.seqs = np.array(list(self.fps), dtype=np.int64)
        self.values = np.array(list(self.fps.values()), dtype=np.uint64)

    def found(self, query: int) -> set[int]:
        hits = self.index.lookup([], self.tables.permute_array(query), MAX_PER_BUCKET).simhash
        assert hits <= self.fps.keys()
        return {s for s in hits if hamming(self.fps[s], query) <= self.k}

    def brute_force(self, query: int) -> set[int]:
        dist = np.bitwise_count(self.values ^ np.uint64(query))
        return set(self.seqs[dist <= self.k].tolist())

    def close(self) -> None:
        self.index.close()


def flip(fp: int, rng: np.random.Generator, bits: int) -> int:
    for bit in rng.choice(64, size=bits, replace=False):
        fp ^= 1 << int(bit)
    return fp


def build_store(path: Path, k: int, blocks: int, seed: int, n_random: int = 2000,
                n_clusters: int = 150) -> tuple[SimHashStore, list[int]]:
    rng = np.random.default_rng(seed)
    store = SimHashStore(path, k, blocks)
    randoms = [int(x) for x in rng.integers(0, 2**64, n_random, dtype=np.uint64)]
    for fp in randoms:
        store.add(fp)
    bases = randoms[:n_clusters]
    for base in bases:  # near copies at every distance 0 .. k+2
        for d in range(k + 3):
            store.add(flip(base, rng, d))
    store.finish()
    return store, bases


@pytest.mark.parametrize(("k", "blocks"), [(3, 5), (3, 6), (2, 4), (1, 3)])
def test_every_fingerprint_within_k_is_found(tmp_path: Path, k: int, blocks: int) -> None:
    store, bases = build_store(tmp_path / "idx", k, blocks, seed=k * 100 + blocks)
    rng = np.random.default_rng(blocks)
    stored = list(store.fps.values())
    queries: list[int] = []
    queries += [flip(stored[int(i)], rng, int(rng.integers(0, k + 1))) for i in rng.integers(0, len(stored), 700)]
    queries += bases + [flip(b, rng, k) for b in bases]                   # dense neighbourhoods
    queries += [flip(stored[int(i)], rng, k + 1) for i in rng.integers(0, len(stored), 200)]
    queries += [int(x) for x in rng.integers(0, 2**64, 300, dtype=np.uint64)]
    nonempty = 0
    try:
        for q in queries:
            expected = store.brute_force(q)
            assert store.found(q) == expected, f"query {q:#018x}: brute force {expected}"
            nonempty += bool(expected)
    finally:
        store.close()
    # the comparison was not vacuous: most queries had neighbours, the dense ones several
    assert nonempty >= 700 + 2 * len(bases)


@pytest.fixture(scope="module")
def store_3_5(tmp_path_factory: pytest.TempPathFactory):
    store, _ = build_store(tmp_path_factory.mktemp("simhash") / "idx", 3, 5, seed=99, n_clusters=100)
    yield store
    store.close()


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_property_flipped_stored_fingerprint_is_found(store_3_5: SimHashStore, data: st.DataObject) -> None:
    seq = data.draw(st.sampled_from(sorted(store_3_5.fps)))
    bits = data.draw(st.sets(st.integers(0, 63), max_size=3))
    query = store_3_5.fps[seq]
    for bit in bits:
        query ^= 1 << bit
    found = store_3_5.found(query)
    assert seq in found
    assert found == store_3_5.brute_force(query)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, MASK64))
def test_property_random_query_equals_brute_force(store_3_5: SimHashStore, query: int) -> None:
    assert store_3_5.found(query) == store_3_5.brute_force(query)


def test_engine_decides_simhash_duplicates_exactly_as_brute_force(tmp_path: Path) -> None:
    """Through Deduplicator.decide: with MinHash out of play (random signatures, Jaccard threshold 1,
    no containment, no Jaccard guard, no short-text rule), an article is a SimHash duplicate iff brute force finds an
    earlier fingerprint within k bits."""
    config = EngineConfig(num_perm=8, lsh_bands=1, lsh_rows=8, jaccard_threshold=1.0, containment_threshold=1.0,
                          simhash_min_jaccard=0.0, simhash_k=3, simhash_blocks=5, short_text_words=0)
    rng = np.random.default_rng(7)
    earlier: list[int] = []
    roots: dict[str, str] = {}
    duplicates = 0
    with Deduplicator(config, tmp_path / "state") as dedup:
        for n in range(700):
            if earlier and rng.random() < 0.5:
                fp = flip(earlier[int(rng.integers(0, len(earlier)))], rng, int(rng.integers(0, 6)))
            else:
                fp = int(rng.integers(0, 2**64, dtype=np.uint64))
            fingerprint = Fingerprint(minhash=rng.integers(0, 2**32, 8, dtype=np.uint64).astype(np.uint32),
                                      simhash=fp, exact=n.to_bytes(16, "big"), n_shingles=5)
            decision = dedup.decide(f"d{n}", fingerprint, now=1000.0 + n)
            within = [i for i, e in enumerate(earlier) if hamming(e, fp) <= 3]
            assert decision.is_duplicate == bool(within), (n, decision)
            if within:
                duplicates += 1
                assert decision.method == "simhash" and decision.methods == ("simhash",)
                assert decision.hamming_distance <= 3
                matched = int(decision.matched_id[1:])
                assert matched in within
                # the best candidate is the earliest on equal (zero) scores ... unless a random
                # signature happens to agree somewhere; either way the root is the matched one's root
                assert decision.duplicate_of == roots[decision.matched_id]
                assert decision.candidates >= len(within)
                roots[f"d{n}"] = decision.duplicate_of
            else:
                roots[f"d{n}"] = f"d{n}"
            earlier.append(fp)
    assert duplicates > 200
