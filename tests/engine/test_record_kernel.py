"""The compiled records of a run (stream_dedup.record_kernel.pack_run): byte for byte the records
Python packs (index_record._pack_parts) with the stored decisions Python encodes
(stored_decision.encode_decision), on made-up runs that take every branch: matches
held in the record store and filed earlier in the run (verified and exact duplicates), roots that
are and are not the article, matched ids that are the root, the article or neither, ids in UTF-8
with surrogates, candidates past the header's 7, stored decisions Python made, bitmaps and anchors'
counts past 65,535 (the runs: ``made_up_run`` of conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dedup import decide_kernel as k
from stream_dedup import record_kernel, stored_decision
from stream_dedup.decision import verified
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


@pytest.mark.parametrize("seed", range(6))
def test_records_are_pythons(seed: int, made_up_run: Callable[[int], SimpleNamespace]) -> None:
    run = made_up_run(seed)
    assert run.records() == run.expected_records
    assert record_kernel.loose_rows(run.result, run.start, run.start + run.n).shape == (0,)


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
                                     stored_decision.EXACT_HEAD, stored_decision.NEW_HEAD, store.buf, ends)
        rid = root_id.encode("utf-8", "surrogatepass") if root_id != article_id else b""
        assert out.tobytes() == _pack_parts(2.0, 1, 1, True, bytes(16), bytes(SIG), aid, rid, b"", 0, b"", expected)
