"""The compiled events of a run (stream_dedup.event_kernel.write_events): the very text of
Decision.event_json for each article it writes, and Python's turn for each it leaves: look-alikes,
values other than k / 10000 or rule bits out of range, ids with a lone surrogate. Made-up runs
(``made_up_run`` of conftest.py: held and in-run matches, exact duplicates, JSON's escapes in ids)
and single duplicates of any ids and values (hypothesis)."""

from __future__ import annotations

import json
from collections.abc import Callable
from types import SimpleNamespace

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dedup import decide_kernel as k
from stream_dedup import event_kernel
from stream_dedup.decision import Decision, exact_copy, verified
from stream_dedup.index_record import _pack_record
from stream_dedup.record_store import RecordStore, store_locate

NUM_PERM = 8


def _events(result: np.ndarray, start: int, n: int, seq0: int, packed: np.ndarray, ends: np.ndarray, sig_size: int,
            buf: np.ndarray, compact: bool = False) -> tuple[list[str | None], list[tuple[int, int]], str]:
    """write_events' events (None: left to Python), root spans and whole text (``compact``: orjson's form)."""
    event_ends, done, roots = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.uint8), np.zeros((n, 2), dtype=np.int64)
    fragments = event_kernel.COMPACT_FRAGMENTS if compact else event_kernel.FRAGMENTS
    raw = event_kernel.write_events(result, start, start + n, seq0, packed, ends, sig_size, buf,
                                    *fragments, event_ends, done, roots).tobytes()
    at = event_ends.tolist()
    events = [raw[a:b].decode("utf-8") if done[i] else None
              for i, (a, b) in enumerate(zip([0, *at[:-1]], at, strict=True))]
    assert all(a == b for (a, b), d in zip(zip([0, *at[:-1]], at, strict=True), done, strict=True) if not d)
    return events, [tuple(r) for r in roots.tolist()], raw


def _plain(s: str) -> bool:
    return not any(0xD800 <= ord(c) <= 0xDFFF for c in s)


def test_columns_are_the_decide_kernels() -> None:
    e = event_kernel
    assert (e._R_CANDIDATES, e._R_BEST, e._R_TEMPLATE, e._R_HITS, e._R_DIRECTION, e._R_HAMMING, e._R_JACCARD,
            e._R_CONTAINMENT, e._R_AT, e._R_EXACT) == (k.R_CANDIDATES, k.R_BEST, k.R_TEMPLATE, k.R_HITS,
                                                       k.R_DIRECTION, k.R_HAMMING, k.R_JACCARD, k.R_CONTAINMENT,
                                                       k.R_AT, k.R_EXACT)


@pytest.mark.parametrize("seed", range(8))
def test_events_are_event_json(seed: int, made_up_run: Callable[[int], SimpleNamespace]) -> None:
    run = made_up_run(seed)
    run.records()
    events, roots, raw = _events(run.result, run.start, run.n, run.seq0, run.packed, run.ends, run.sig_size,
                                 run.store.buf)
    kinds = set()
    for d, event, (a, b) in zip(run.decisions, events, roots, strict=True):
        if d is None or not (_plain(d.id) and _plain(d.duplicate_of or "") and _plain(d.matched_id or "")):
            assert event is None  # (a look-alike; a lone surrogate)
            continue
        assert event == d.event_json()
        json.loads(event)
        kinds.add(d.method)
        if d.is_duplicate and json.dumps(d.duplicate_of, ensure_ascii=False)[1:-1] == d.duplicate_of:
            assert raw[a:b].decode("utf-8") == d.duplicate_of
        else:
            assert a == b == -1
    assert {None, "exact"} <= kinds and len(kinds) > 2
    # the worker's form: orjson's text of the same event
    compact, _, _ = _events(run.result, run.start, run.n, run.seq0, run.packed, run.ends, run.sig_size,
                            run.store.buf, compact=True)
    for d, event, text in zip(run.decisions, events, compact, strict=True):
        assert (text is None) == (event is None)
        if text is not None:
            assert text == orjson.dumps(d.to_event()).decode()


_IDS = st.text(st.characters(), min_size=1, max_size=12)
_FRACTIONS = st.one_of(st.integers(0, 10000).map(lambda v: v / 10000), st.floats(-1, 2), st.just(-0.0),
                       st.just(float("nan")))


@settings(max_examples=1000, deadline=None)
@given(st.sampled_from(["verified", "exact", "new"]), st.integers(0, 16), st.integers(0, 3), st.integers(0, 64),
       _FRACTIONS, _FRACTIONS, st.one_of(st.integers(0, 9), st.integers(0, 2**40)), _IDS, _IDS, _IDS,
       st.booleans())
def test_an_event_is_event_json_or_left(kind: str, hits: int, direction: int, hamming: int, jaccard: float,
                                        containment: float, candidates: int, matched_id: str, article_id: str,
                                        root_id: str, held: bool) -> None:
    """One article, new or a duplicate of a held record or of one filed before it in the run: its
    event is event_json's text, unless a value or an id is one write_events leaves to Python."""
    result = np.zeros((2, k.R_COLUMNS))
    res = result[1]
    res[k.R_CANDIDATES], res[k.R_BEST], res[k.R_TEMPLATE] = candidates, -1, -1
    d: Decision = Decision(id=article_id, type="new", candidates=candidates)
    writable = _plain(article_id)
    if kind != "new":
        res[k.R_BEST], res[k.R_HAMMING] = 0, hamming
        if kind == "exact":
            res[k.R_CANDIDATES], res[k.R_JACCARD], res[k.R_CONTAINMENT], res[k.R_EXACT] = 1, 1.0, 1.0, 1
            d = exact_copy(article_id, hamming, matched_id, root_id)
        else:
            res[k.R_HITS], res[k.R_DIRECTION], res[k.R_JACCARD], res[k.R_CONTAINMENT] = hits, direction, jaccard, \
                containment
            writable = writable and 1 <= hits <= 15 and direction <= 2 and all(
                0 <= v <= 1 and round(v * 10000) / 10000 == v and str(v) != "-0.0" for v in (jaccard, containment))
            if writable:
                d = verified(article_id, hits, direction, hamming, jaccard, containment, matched_id, root_id,
                             candidates)
        writable = writable and _plain(matched_id) and _plain(root_id)
    store = RecordStore(1 << 14, 40)
    matched = _pack_record(1.0, 5, 9, True, bytes(16), np.zeros(NUM_PERM, dtype=np.uint64), matched_id, root_id,
                           b"\x01\x00\x00\x00")
    own = _pack_record(2.0, 5, 9, True, bytes(16), np.zeros(NUM_PERM, dtype=np.uint64), article_id,
                       root_id if kind != "new" else article_id, b"\x01\x00\x00\x00")
    if held:  # (the match in the store, the run of one article)
        assert store.put(0, matched)
        starts, lengths = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
        store_locate(store.buf, store.keys, store.vals, np.zeros(1, dtype=np.int64), starts, lengths)
        res[k.R_AT], res[k.R_LENGTH] = starts[0], lengths[0]
        start, n, records = 1, 1, [own]
    else:  # (the match is the run's first record)
        res[k.R_AT], res[k.R_BEST] = -1, 7 if kind != "new" else -1
        result[0, k.R_BEST] = result[0, k.R_TEMPLATE] = -1
        start, n, records = 0, 2, [matched, own]
    packed = np.frombuffer(b"".join(records), dtype=np.uint8)
    ends = np.cumsum([len(r) for r in records]).astype(np.int64)
    events, _, _ = _events(result, start, n, 7, packed, ends, 2 * NUM_PERM, store.buf)
    compact, _, _ = _events(result, start, n, 7, packed, ends, 2 * NUM_PERM, store.buf, compact=True)
    if writable:
        assert events[-1] == d.event_json()
        assert compact[-1] == orjson.dumps(d.to_event()).decode()
    else:
        assert events[-1] is None and compact[-1] is None
