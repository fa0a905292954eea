"""The compiled records of a run (stream_dedup.record_kernel.pack_run): byte for byte the records
Python packs (index_record._pack_parts) with the stored decisions Python encodes
(stored_decision.encode_decision), on made-up runs that take every branch: matches
held in the record store and filed earlier in the run, roots that are and are not the article,
matched ids that are the root, the article or neither, ids in UTF-8 with surrogates, candidates
past the header's 7, stored decisions Python made, bitmaps and anchors' counts past 65,535."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dedup import decide_kernel as k
from stream_dedup import record_kernel, stored_decision
from stream_dedup.decision import Decision, verified
from stream_dedup.index_record import _pack_parts, _pack_record
from stream_dedup.record_store import RecordStore, store_locate

NUM_PERM = 8
SIG = 2 * NUM_PERM


def test_columns_are_the_decide_kernels() -> None:
    """The result columns pack_run reads are decide_kernel's."""
    rk = record_kernel
    assert (rk._R_CANDIDATES, rk._R_BEST, rk._R_HITS, rk._R_DIRECTION, rk._R_HAMMING, rk._R_JACCARD,
            rk._R_CONTAINMENT, rk._R_INDEXED, rk._R_AT) == (k.R_CANDIDATES, k.R_BEST, k.R_HITS, k.R_DIRECTION,
                                                            k.R_HAMMING, k.R_JACCARD, k.R_CONTAINMENT, k.R_INDEXED,
                                                            k.R_AT)


def _id(rng: random.Random) -> str:
    return rng.choice(["a", "news-", "é-", "日本-", "\ud800x-", "📰"]) + str(rng.randrange(10 ** rng.randrange(1, 6)))


@pytest.mark.parametrize("seed", range(6))
def test_records_are_pythons(seed: int) -> None:
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    # held records: their ids and roots are what a match in the store gives
    store = RecordStore(1 << 16, 40)
    held = []
    for s in range(12):
        aid = _id(rng)
        root = rng.choice([aid, _id(rng), "root-" + aid])
        rec = _pack_record(1.5e9 + s, rng.getrandbits(64), rng.randrange(1, 500), True, bytes(16),
                           nrng.integers(0, 1 << 63, NUM_PERM, dtype=np.uint64), aid, root, b"\x01\x00\x00\x00")
        assert store.put(s, rec)
        held.append((aid, root))
    starts, lengths = np.zeros(12, dtype=np.int64), np.zeros(12, dtype=np.int64)
    assert store_locate(store.buf, store.keys, store.vals, np.arange(12, dtype=np.int64), starts, lengths) == 0
    at_of, len_of = starts.tolist(), lengths.tolist()
    n = 40
    seq0 = 1000
    start = 3  # (the run starts inside the batch: rows and result are the batch's)
    total = start + n
    rows = np.full(total, -1, dtype=np.int64)
    rows[start:] = nrng.permutation(n)  # (a batch article's row is not its position)
    simhashes = nrng.integers(0, 1 << 63, n, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    sizes = nrng.integers(1, 1 << 31, n, dtype=np.int64)
    exacts = nrng.integers(0, 256, (n, 16), dtype=np.uint8)
    signatures = nrng.integers(0, 1 << 16, (n, NUM_PERM), dtype=np.uint16)
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
    ids = [_id(rng) for _ in range(n)]
    if n > 5:
        ids[5] = held[2][1]  # (an article whose id is a held match's root)
    nows = [1.7e9 + rng.random() for _ in range(n)]
    given = [b""] * n
    expected = []
    roots: list[str] = []
    for j in range(n):
        res = result[start + j]
        r = int(rows[start + j])
        res[k.R_CANDIDATES] = rng.choice([0, 1, 6, 7, 8, 200, 100_000])
        res[k.R_INDEXED] = rng.random() < 0.8
        res[k.R_BEST] = res[k.R_TEMPLATE] = -1
        kind = rng.choice(["new", "held", "run", "given"] if j else ["new", "held", "given"])
        article_id, root_id = ids[j], ids[j]
        if kind in ("held", "run"):
            if kind == "held":
                h = rng.randrange(12) if j != 5 else 2
                res[k.R_BEST], res[k.R_AT], res[k.R_LENGTH] = h, at_of[h], len_of[h]
                matched_id, root_id = held[h]
            else:
                m = rng.randrange(j)
                res[k.R_BEST], res[k.R_AT] = seq0 + m, -1
                matched_id, root_id = ids[m], roots[m]
            res[k.R_HITS], res[k.R_DIRECTION] = rng.randrange(1, 16), rng.randrange(3)
            res[k.R_HAMMING] = rng.choice([0, 3, 127, 128, 64])
            res[k.R_JACCARD], res[k.R_CONTAINMENT] = rng.randrange(10001) / 10000, rng.randrange(10001) / 10000
            d = verified(article_id, res[k.R_HITS], res[k.R_DIRECTION], res[k.R_HAMMING], float(res[k.R_JACCARD]),
                         float(res[k.R_CONTAINMENT]), matched_id, root_id, int(res[k.R_CANDIDATES]))
            stored = stored_decision.encode_decision(d, article_id, root_id)
        elif kind == "given":
            given[j] = stored = rng.choice([b'{"x": 1}', b"\x01\x02\x03\x04\x05"])
        else:
            stored = stored_decision.encode_decision(Decision(id=article_id, type="new",
                                                              candidates=int(res[k.R_CANDIDATES])),
                                                     article_id, root_id)
        rid = root_id.encode("utf-8", "surrogatepass") if root_id != article_id else b""
        indexed = bool(res[k.R_INDEXED])
        expected.append(_pack_parts(nows[j], int(simhashes[r]), int(sizes[r]), indexed, exacts[r].tobytes(),
                                    signature_bytes[r * SIG:(r + 1) * SIG], article_id.encode("utf-8", "surrogatepass"),
                                    rid, identity_bytes[4 * identity_at[r]:4 * identity_at[r + 1]],
                                    int(anchor_counts[r]), words[r].tobytes() if indexed and has_words[r] else b"",
                                    stored))
        roots.append(root_id)
    encoded = [i.encode("utf-8", "surrogatepass") for i in ids]
    id_at = np.zeros(n + 1, dtype=np.int64)
    id_at[1:] = np.cumsum([len(e) for e in encoded])
    given_at = np.zeros(n + 1, dtype=np.int64)
    given_at[1:] = np.cumsum([len(g) for g in given])
    ends = np.zeros(n, dtype=np.int64)
    out = record_kernel.pack_run(result, start, start + n, seq0, rows, np.array(nows).view(np.uint64), simhashes,
                                 sizes, exacts, np.frombuffer(signature_bytes, dtype=np.uint8), SIG,
                                 np.frombuffer(identity_bytes, dtype=np.uint8), identity_at, anchors_at, words,
                                 has_words, np.frombuffer(b"".join(encoded), dtype=np.uint8), id_at,
                                 np.frombuffer(b"".join(given), dtype=np.uint8), given_at,
                                 stored_decision.VERIFIED_HEADS, stored_decision.NEW_HEAD, store.buf, ends)
    data = out.tobytes()
    got = [data[a:b] for a, b in zip([0, *ends.tolist()[:-1]], ends.tolist(), strict=True)]
    assert got == expected
    assert record_kernel.loose_rows(result, start, start + n).shape == (0,)


def testloose_rows_finds_the_duplicates_stored_as_json() -> None:
    """The verified duplicates whose stored form Python makes (``loose_rows``) are exactly those
    whose decision encode_decision cannot store compactly: its output is then JSON, not the tag."""
    rows = []
    values = [0.5, 0.12345, 1.0, 0.0, -0.0, 1.0001, float("nan"), 0.1 + 0.2, 0.3]
    for jaccard in values:
        for containment in (0.25, *values[:3]):
            for hits, direction in ((1, 0), (15, 2), (0, 1), (16, 0)):
                row = np.zeros(k.R_COLUMNS)
                row[k.R_BEST], row[k.R_HITS], row[k.R_DIRECTION] = 7, hits, direction
                row[k.R_JACCARD], row[k.R_CONTAINMENT], row[k.R_CANDIDATES] = jaccard, containment, 3
                rows.append(row)
    result = np.array(rows)
    flagged = set(record_kernel.loose_rows(result, 0, len(rows)).tolist())
    for i, row in enumerate(result):
        hits, direction = int(row[k.R_HITS]), int(row[k.R_DIRECTION])
        if not 0 < hits < 16:
            assert i in flagged
            continue
        stored = stored_decision.encode_decision(
            verified("a", hits, direction, 0, float(row[k.R_JACCARD]), float(row[k.R_CONTAINMENT]), "m", "m", 3), "a", "m")
        assert (stored[0] != stored_decision.TAG) == (i in flagged), (row[k.R_JACCARD], row[k.R_CONTAINMENT])


_IDS = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)


@settings(max_examples=1000, deadline=None)
@given(st.integers(1, 15), st.integers(0, 2), st.integers(0, 64), st.one_of(
    st.integers(0, 10000).map(lambda k: k / 10000), st.floats(-1, 2)), st.one_of(
    st.integers(0, 10000).map(lambda k: k / 10000), st.floats(allow_nan=True)),
    st.one_of(st.integers(0, 9), st.integers(0, 2**40)), _IDS, _IDS, _IDS)
def test_a_verified_duplicates_record_keeps_its_decision_encoded(
        hits: int, direction: int, hamming: int, jaccard: float, containment: float, candidates: int,
        matched: str, article_id: str, root_id: str) -> None:
    """The record pack_run makes of a verified duplicate of a held record is the one Python packs with
    ``encode_decision`` of the decision ``verified`` makes of the same numbers, the matched article
    being the root, the article or another; a value the compact form does not hold exactly is one
    ``loose_rows`` leaves to Python (whose stored form is then JSON)."""
    for matched_id in (matched, root_id, article_id):
        d = verified(article_id, float(hits), float(direction), float(hamming), jaccard, containment, matched_id,
                     root_id, candidates)
        expected = stored_decision.encode_decision(d, article_id, root_id)
        result = np.zeros((1, k.R_COLUMNS))
        result[0, k.R_HITS], result[0, k.R_DIRECTION], result[0, k.R_HAMMING] = hits, direction, hamming
        result[0, k.R_JACCARD], result[0, k.R_CONTAINMENT], result[0, k.R_CANDIDATES] = jaccard, containment, candidates
        result[0, k.R_BEST], result[0, k.R_INDEXED] = 0, 1
        if record_kernel.loose_rows(result, 0, 1).shape[0]:
            assert expected[0] != stored_decision.TAG
            continue
        store = RecordStore(1 << 14, 40)
        assert store.put(0, _pack_record(1.0, 5, 9, True, bytes(16), np.zeros(NUM_PERM, dtype=np.uint64), matched_id,
                                         root_id, b"\x01\x00\x00\x00"))
        starts, lengths = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
        store_locate(store.buf, store.keys, store.vals, np.zeros(1, dtype=np.int64), starts, lengths)
        result[0, k.R_AT], result[0, k.R_LENGTH] = starts[0], lengths[0]
        aid = article_id.encode("utf-8", "surrogatepass")
        ends = np.zeros(1, dtype=np.int64)
        out = record_kernel.pack_run(result, 0, 1, 7, np.zeros(1, dtype=np.int64), np.array([2.0]).view(np.uint64),
                                     np.ones(1, dtype=np.uint64), np.ones(1, dtype=np.int64),
                                     np.zeros((1, 16), dtype=np.uint8), np.zeros(SIG, dtype=np.uint8), SIG,
                                     np.zeros(0, dtype=np.uint8), np.zeros(2, dtype=np.int64),
                                     np.zeros(2, dtype=np.int64), np.zeros((1, 64), dtype=np.uint8),
                                     np.zeros(1, dtype=np.bool_), np.frombuffer(aid, dtype=np.uint8),
                                     np.array([0, len(aid)], dtype=np.int64), np.zeros(0, dtype=np.uint8),
                                     np.zeros(2, dtype=np.int64), stored_decision.VERIFIED_HEADS,
                                     stored_decision.NEW_HEAD, store.buf, ends)
        rid = root_id.encode("utf-8", "surrogatepass") if root_id != article_id else b""
        assert out.tobytes() == _pack_parts(2.0, 1, 1, True, bytes(16), bytes(SIG), aid, rid, b"", 0, b"", expected)
