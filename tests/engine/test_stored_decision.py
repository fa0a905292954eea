"""stream_dedup.stored_decision: the compact stored decision is exact (or falls back to JSON), older
JSON records stay readable, and the article record keeps a root id equal to the article id as length 0."""

from __future__ import annotations

import math
import struct
from itertools import combinations
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dedup import stored_decision
from stream_dedup.config import EngineConfig
from stream_dedup.decision import METHODS, Decision
from stream_dedup.engine import Deduplicator
from stream_dedup.index_record import (
    _LENGTHS,
    _RECORD,
    _SIG_DTYPE,
    _pack_record,
    _record_anchors,
    _record_identity,
    _record_ids,
    _record_words,
    _unpack_record,
)
from stream_dedup.record import Article

TAG = bytes((stored_decision.TAG,))
NEW = Decision(id="news-00007", type="new")
DUPLICATE = Decision(id="news-02002", type="duplicate-of", duplicate_of="news-01321~r1", similarity=0.8281,
                     method="minhash", hamming_distance=7, containment=0.9107, matched_id="news-01321~r1",
                     methods=("minhash", "containment"), candidates=1, direction="earlier_in_new")


def json_form(stored: list) -> list:
    """The stored decision as the JSON path gives it back (tuples become lists)."""
    return orjson.loads(orjson.dumps(stored))


def same(a: object, b: object) -> bool:
    """Equal, with the same types all the way down (1 vs 1.0 vs True, 0.0 vs -0.0, tuple vs list)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    return a == b


def round_trip(stored: list, article_id: str, root_id: str) -> tuple[bytes, list]:
    data = stored_decision.encode(stored, article_id, root_id)
    return data, stored_decision.decode(data, article_id, root_id)


# ------------------------------------------------------------------------------ the two typical ones
def test_typical_decisions_are_small() -> None:
    new = NEW.to_stored()
    assert orjson.dumps(new) == b'["new",null,null,null,null,null,null,[],0]'
    data, back = round_trip(new, NEW.id, NEW.id)
    assert data[:1] == TAG and len(data) <= 4 and same(back, json_form(new))
    dup = DUPLICATE.to_stored()
    data, back = round_trip(dup, DUPLICATE.id, "news-01321~r1")
    assert data[:1] == TAG and len(data) <= 12 < len(orjson.dumps(dup)) // 9
    assert same(back, json_form(dup))
    assert Decision.from_stored(back, DUPLICATE.id).to_event() == {**DUPLICATE.to_event(), "seen_before": True}
    # a new article with many candidates, a look-alike of a template
    many = Decision(id="n", type="new", candidates=10**6).to_stored()
    data, back = round_trip(many, "n", "n")
    assert data[:1] == TAG and len(data) == 4 + 3 and same(back, json_form(many))
    alike = Decision(id="z", type="new", similarity=0.9, candidates=2, template_of="news-0099",
                     identity_overlap=0.2).to_stored()
    data, back = round_trip(alike, "z", "z")
    assert data[:1] == TAG and len(data) == 4 + 2 + 1 + len("news-0099") + 2 and same(back, json_form(alike))


def test_every_four_decimal_value_is_compact() -> None:
    for k in range(10001):
        v = round(k / 10000, 4)
        stored = ["duplicate-of", "r", v, "minhash", 0, v, "r", ["minhash"], 1, None, None, v]
        data, back = round_trip(stored, "x", "r")
        assert data[:1] == TAG and len(data) == 4 + 1 + 2 + 1 + 2 + 1 + 2, k
        assert same(back, stored), k


# ------------------------------------------------------------------------------------- fallbacks
@pytest.mark.parametrize("stored", [
    ["new", None, 0.1 + 0.2],                                   # not a 4-decimal value
    ["new", None, 1e-9], ["new", None, -0.0], ["new", None, 1.0001], ["new", None, -0.5],
    ["new", None, float("inf")], ["new", None, 1],              # an int where a float is expected
    ["new", None, None, None, -1], ["new", None, None, None, -(2**63)], ["new", None, None, None, True],
    ["new", None, None, None, 2.0],
    ["old-type"], ["new", None, None, "cosine"], [None], [], ["new", None],   # trailing None kept
    ["new", None, None, None, None, None, None, ["containment", "minhash"], 0],  # out of METHODS order
    ["new", None, None, None, None, None, None, ["minhash", "minhash"], 0],
    ["new", None, None, None, None, None, None, ["minhash", 3], 0],
    ["new", None, None, None, None, None, None, "minhash", 0],
    ["new", None, None, None, None, None, None, [["minhash"]], 0],  # unhashable
    ["new", None, None, None, None, None, None, [], 0, "sideways"],
    ["new", 5], ["new", None, None, None, None, None, {"id": "m"}],
    ["new", None, None, None, None, None, None, [], 0, None, None, 0.5, "a 13th value"],
    [{"nested": [1, 2]}],
])
def test_what_does_not_fit_is_json(stored: list) -> None:
    data, back = round_trip(stored, "x", "r")
    assert data == orjson.dumps(stored)
    assert same(back, json_form(stored))


def test_beyond_64_bits_fails_as_json_did() -> None:
    with pytest.raises(orjson.JSONEncodeError):
        stored_decision.encode(["new", None, None, None, None, None, None, [], 2**64], "x", "r")


def test_not_a_list_is_json() -> None:
    event = DUPLICATE.to_event()
    assert stored_decision.encode(event, "x", "r") == orjson.dumps(event)
    assert stored_decision.decode(orjson.dumps(event), "x", "r") == event


def test_older_json_records_still_decode() -> None:
    for stored in (NEW.to_stored(), DUPLICATE.to_stored(), ["new"], DUPLICATE.to_event()):
        assert same(stored_decision.decode(orjson.dumps(stored), "x", "r"), json_form(stored))
    raw = b'["duplicate-of","news-01321~r1",0.8281,"minhash",7,0.9107,"news-01321~r1",["minhash","containment"],1,' \
          b'"earlier_in_new"]'
    assert stored_decision.decode(raw, "news-02002", "news-01321~r1") == json_form(DUPLICATE.to_stored())


def test_corrupt_compact_bytes_raise() -> None:
    good = stored_decision.encode(DUPLICATE.to_stored(), DUPLICATE.id, "news-01321~r1")
    for bad in (good[:-1], good + b"\x00", good[:3], TAG + b"\x00\x00\xe0"):
        with pytest.raises(ValueError):
            stored_decision.decode(bad, DUPLICATE.id, "news-01321~r1")


# -------------------------------------------------------------------------- generated decisions
IDS = st.one_of(
    st.text(min_size=1, max_size=20),
    st.text(st.characters(codec="utf-8"), min_size=1, max_size=300),             # unicode, long
    st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=3),  # lone surrogates
    st.sampled_from(["news-01321~r1", "a", "東京-\U0001f600"]),
)
FLOATS = st.one_of(
    st.integers(0, 10000).map(lambda k: round(k / 10000, 4)),
    st.sampled_from([0.1 + 0.2, 1e-9, -0.0, 0.0, 1.0, 1.00001, 0.12345, 5e-324, 2.0, -1.0, 0.8281, 1e300]),
    st.floats(allow_nan=False, allow_infinity=False),  # JSON writes inf as null: a case of its own above
)
IN_ORDER = [tuple(sub) for r in range(len(METHODS) + 1) for sub in combinations(METHODS, r)]
METHOD_SETS = st.one_of(st.sampled_from(IN_ORDER), st.permutations(METHODS).flatmap(
    lambda p: st.integers(0, len(p)).map(lambda n: tuple(p[:n]))))
COUNTS = st.one_of(st.integers(0, 8), st.integers(0, 10**12), st.sampled_from([2**63 - 1, 2**63, 2**64 - 1]))


@st.composite
def decisions(draw: st.DrawFn) -> tuple[Decision, str]:
    """A decision with random fields, and the root id its record would have."""
    article_id = draw(IDS)
    root = draw(st.one_of(st.just(article_id), IDS))
    ref = st.one_of(st.none(), st.just(article_id), st.just(root), IDS)
    d = Decision(id=article_id, type=draw(st.sampled_from(["new", "duplicate-of"])),
                 duplicate_of=draw(ref), similarity=draw(st.none() | FLOATS),
                 method=draw(st.none() | st.sampled_from(METHODS)),
                 hamming_distance=draw(st.none() | st.integers(0, 64) | COUNTS),
                 containment=draw(st.none() | FLOATS), matched_id=draw(ref), methods=draw(METHOD_SETS),
                 candidates=draw(COUNTS), direction=draw(st.none() | st.sampled_from(["new_in_earlier",
                                                                                      "earlier_in_new"])),
                 template_of=draw(ref), identity_overlap=draw(st.none() | FLOATS))
    return d, root


def fits(d: Decision) -> bool:
    """Whether the compact form holds ``d`` (by the rules of the module docstring)."""
    return all(v is None or (0.0 <= v <= 1.0 and round(v * 10000) / 10000 == v and math.copysign(1, v) > 0)
               for v in (d.similarity, d.containment, d.identity_overlap)) \
        and (d.hamming_distance is None or d.hamming_distance < 2**64) and d.candidates < 2**64 \
        and d.methods in IN_ORDER


def has_surrogate(stored: list) -> bool:
    return any(isinstance(v, str) and any(0xD800 <= ord(c) <= 0xDFFF for c in v) for v in stored)


@settings(max_examples=1500, deadline=None)
@given(decisions())
def test_round_trip_of_generated_decisions(case: tuple[Decision, str]) -> None:
    d, root = case
    stored = d.to_stored()
    if has_surrogate(stored) and not fits(d):  # JSON, which cannot write a lone surrogate (nor could it before)
        with pytest.raises(orjson.JSONEncodeError):
            stored_decision.encode(stored, d.id, root)
        return
    data, back = round_trip(stored, d.id, root)
    if data[:1] == TAG:  # compact: only for values it holds exactly
        assert same(back, [list(v) if isinstance(v, tuple) else v for v in stored])
    if not has_surrogate(stored):  # the same as the JSON path (which writes inf as null, for one)
        assert same(back, json_form(stored))
    event = Decision.from_stored(back, d.id).to_event()
    assert event == {**d.to_event(), "seen_before": True}
    if not has_surrogate(stored):  # orjson writes no lone surrogate: the JSON path could not store it
        assert data[:1] == TAG or data == orjson.dumps(stored)
        json_event = Decision.from_stored(orjson.loads(orjson.dumps(stored)), d.id).to_event()
        assert event.keys() == json_event.keys() and all(same(event[k], json_event[k]) for k in event)
        assert len(data) <= len(orjson.dumps(stored))


@settings(max_examples=300, deadline=None)
@given(decisions())
def test_compact_when_the_values_fit(case: tuple[Decision, str]) -> None:
    d, root = case
    if has_surrogate(d.to_stored()) and not fits(d):
        return
    assert (stored_decision.encode(d.to_stored(), d.id, root)[:1] == TAG) == fits(d)


@settings(max_examples=1500, deadline=None)
@given(decisions())
def test_the_decision_encoded_from_its_fields_is_its_stored_list_encoded(case: tuple[Decision, str]) -> None:
    """``encode_decision`` (the engine's: from the decision's fields) writes the bytes of ``encode``
    on ``to_stored()``, compact or JSON, and raises where it raises."""
    d, root = case
    try:
        expected = stored_decision.encode(d.to_stored(), d.id, root)
    except orjson.JSONEncodeError:
        with pytest.raises(orjson.JSONEncodeError):
            stored_decision.encode_decision(d, d.id, root)
        return
    assert stored_decision.encode_decision(d, d.id, root) == expected


_IDS = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)


def test_a_record_keeps_an_encoded_decision_as_it_is() -> None:
    """``_pack_record`` takes the decision's bytes from ``encode_decision`` (the engine's insert) or
    its stored list (encoded there): the same record."""
    assert pack(DUPLICATE.id, "news-01321~r1", stored_decision.encode_decision(DUPLICATE, DUPLICATE.id,
                                                                                "news-01321~r1")) \
        == pack(DUPLICATE.id, "news-01321~r1", DUPLICATE.to_stored())


# ----------------------------------------------------------------------------------- the record
NUM_PERM = 8
SIG = np.arange(NUM_PERM, dtype=np.uint32) * 977
IDENTITY = np.array([3, 9, 2**32 - 1], dtype=np.uint32)
WORDS = bytes(range(64))


def pack(article_id: str, root_id: str, decision: list | dict) -> bytes:
    return _pack_record(1234.5, 2**64 - 1, 77, True, b"\x05" * 16, SIG, article_id, root_id, decision,
                        IDENTITY, 70000, WORDS)


def old_record(article_id: str, root_id: str, decision: list | dict) -> bytes:
    """A record as versions before the compact decision wrote it: the root id spelled out, JSON."""
    aid = article_id.encode("utf-8")
    rid = root_id.encode("utf-8")
    return b"".join((_RECORD.pack(1234.5, 2**64 - 1, 77, 1, b"\x05" * 16), SIG.astype(_SIG_DTYPE).tobytes(),
                     _LENGTHS.pack(len(aid), len(rid), IDENTITY.shape[0], 0xFFFF, len(WORDS)), aid, rid,
                     IDENTITY.astype(">u4").tobytes(), WORDS, orjson.dumps(decision)))


def check_record(value: bytes, article_id: str, root_id: str, decision: list | dict) -> None:
    art = _unpack_record(3, value, NUM_PERM)
    assert (art.seq, art.article_id, art.root_id, art.first_seen, art.simhash, art.n_shingles, art.exact,
            art.indexed) == (3, article_id, root_id, 1234.5, 2**64 - 1, 77, b"\x05" * 16, True)
    assert np.array_equal(art.minhash, SIG & 0xFFFF)
    assert same(art.decision, json_form(decision)) if isinstance(decision, list) else art.decision == decision
    assert _record_ids(value, NUM_PERM)[:2] == (article_id, root_id)
    assert np.array_equal(_record_identity(value, NUM_PERM), IDENTITY)
    assert _record_words(value, NUM_PERM) == WORDS
    assert _record_anchors(value, NUM_PERM) == 0xFFFF


def test_record_of_a_new_article_keeps_no_root() -> None:
    aid = "news-ü-00007"
    value = pack(aid, aid, NEW.to_stored())
    explicit = pack(aid, "another-root", NEW.to_stored())
    assert len(explicit) - len(value) == len("another-root")
    assert aid.encode() in value and value.count(aid.encode()) == 1
    check_record(value, aid, aid, NEW.to_stored())
    check_record(explicit, aid, "another-root", NEW.to_stored())
    assert value.endswith(stored_decision.encode(NEW.to_stored(), aid, aid))


def test_record_of_a_duplicate() -> None:
    stored = DUPLICATE.to_stored()
    value = pack(DUPLICATE.id, "news-01321~r1", stored)
    assert value.count(b"news-01321~r1") == 1  # the root id once; the decision refers to it
    check_record(value, DUPLICATE.id, "news-01321~r1", stored)
    assert len(value) < len(old_record(DUPLICATE.id, "news-01321~r1", stored)) - 100


def test_record_with_a_dict_decision_is_json() -> None:
    value = pack("a", "r", {"n": 1})
    assert value.endswith(b'{"n":1}')
    check_record(value, "a", "r", {"n": 1})


def test_older_records_still_unpack() -> None:
    for aid, root, decision in [("news-00007", "news-00007", NEW.to_stored()),
                                (DUPLICATE.id, "news-01321~r1", DUPLICATE.to_stored()),
                                ("a-東京", "a-東京", {"n": 2})]:
        check_record(old_record(aid, root, decision), aid, root, decision)


def test_an_empty_root_other_than_the_id_is_refused() -> None:
    with pytest.raises(ValueError, match="empty cluster root"):
        pack("a", "", NEW.to_stored())


# ------------------------------------------------------------------------------- through the engine
def test_replays_give_the_first_events(tmp_path: Path, textgen: SimpleNamespace) -> None:
    words = textgen.words(5, 300)
    edited = list(words)
    for i in (20, 90, 150, 230, 280):
        edited[i] = "changed"
    articles = [Article(id="a", text=textgen.text(words)), Article(id="b", text=textgen.text(words) + " !"),
                Article(id="c", text=textgen.text(edited)), Article(id="d", text=textgen.text(textgen.words(6, 200)))]
    with Deduplicator(EngineConfig(), tmp_path / "state") as d:
        first = [d.process(a, now=1000.0 + i).to_event() for i, a in enumerate(articles)]
    assert [e["type"] for e in first] == ["new", "duplicate-of", "duplicate-of", "new"]
    with Deduplicator(EngineConfig(), tmp_path / "state") as d:
        again = [d.process(a, now=2000.0).to_event() for a in articles]
        for a in articles:
            seq = d.index.seq_of(a.id)
            art = d.index.article(seq)
            assert art.decision_json[:1] == TAG and len(art.decision_json) <= 12
            assert art.root_id == ("a" if a.id in "abc" else a.id)
    assert again == [{**e, "seen_before": True} for e in first]


@settings(max_examples=1500, deadline=None)
@given(decisions(), st.booleans(), st.sampled_from([None, {"extra": [1, 2.5, None]}]))
def test_event_json_is_json_dumps_of_the_event(case: tuple[Decision, str], seen: bool, extra: dict | None) -> None:
    """``Decision.event_json`` (the ``dedup`` command's events) writes what ``json.dumps`` writes."""
    import json

    d, _ = case
    d.seen_before = seen
    if extra:
        d.extra = extra
    assert d.event_json() == json.dumps(d.to_event(), ensure_ascii=False)


@pytest.mark.parametrize("fields", [
    {"similarity": float("nan")}, {"containment": float("inf")}, {"similarity": np.float64(0.25)},
    {"hamming_distance": True}, {"candidates": np.int64(3)}, {"seen_before": 1}, {"methods": ["minhash"]},
    {"duplicate_of": "\ud800\n\"\\\x00é"}, {"identity_overlap": 0.5},
])
def test_event_json_of_other_values(fields: dict) -> None:
    import json

    d = Decision(id="a", type="new", **fields)
    try:
        expected = json.dumps(d.to_event(), ensure_ascii=False)
    except TypeError:  # json.dumps refuses it (a numpy int): so does event_json
        with pytest.raises(TypeError):
            d.event_json()
        return
    assert d.event_json() == expected
