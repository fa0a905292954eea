"""stream_dedup.record: every reject reason, configurable field names, type coercions."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dedup.config import EngineConfig
from stream_dedup.record import REJECT_REASONS, Article, RecordError, article_from_object, parse_record

CONFIG = EngineConfig()


def reason_of(raw: bytes | str, config: EngineConfig = CONFIG) -> str:
    with pytest.raises(RecordError) as err:
        parse_record(raw, config)
    assert isinstance(err.value, ValueError)
    assert err.value.reason in REJECT_REASONS
    assert str(err.value)  # a human message
    return err.value.reason


@pytest.mark.parametrize(("raw", "reason"), [
    (b'{"id": "a", "text": "x"', "invalid_json"),
    (b"not json at all", "invalid_json"),
    (b"", "invalid_json"),
    (b'{"id": "a", "text": "x"} trailing', "invalid_json"),
    (b"[" * 100_000 + b"]" * 100_000, "invalid_json"),          # nested too deeply
    (b'{"id": "a", "text": "caf\xe9"}', "invalid_utf8"),          # Latin-1 byte
    (b'{"id": "a", "text": "\xff\xfe"}', "invalid_utf8"),
    (b'{"id": "a", "text": "\xed\xa0\x80"}', "invalid_utf8"),     # UTF-8 encoded surrogate
    (b'["id", "text"]', "not_an_object"),
    (b'"a string"', "not_an_object"),
    (b"null", "not_an_object"),
    (b"42", "not_an_object"),
    (b'{"text": "body"}', "missing_id"),
    (b'{"id": null, "text": "body"}', "missing_id"),
    (b'{"id": "", "text": "body"}', "missing_id"),
    (b'{"id": "a"}', "missing_text"),
    (b'{"id": "a", "text": null}', "missing_text"),
    (b'{"id": "a", "text": ""}', "missing_text"),
    (b'{"id": "a", "text": "  \\n\\t "}', "missing_text"),
    (b'{"id": "a", "html": "   "}', "missing_text"),
    (b'{"id": ["a"], "text": "body"}', "wrong_type"),
    (b'{"id": {"a": 1}, "text": "body"}', "wrong_type"),
    (b'{"id": true, "text": "body"}', "wrong_type"),
    (b'{"id": 1.5, "text": "body"}', "wrong_type"),
    (b'{"id": "a", "text": 42}', "wrong_type"),
    (b'{"id": "a", "text": ["body"]}', "wrong_type"),
    (b'{"id": "a", "html": {"p": "body"}}', "wrong_type"),
    (b'{"id": "a", "text": "body", "title": {"t": 1}}', "wrong_type"),
    (b'{"id": "a", "text": "body", "url": ["u"]}', "wrong_type"),
    (b'{"id": "a", "text": "body", "source": true}', "wrong_type"),
    (b'{"id": "a", "id": "b", "text": "body"}', "duplicate_field"),     # which article is it?
    (b'{"id": "a", "text": "one", "text": "two"}', "duplicate_field"),
    (b'{"id": "a", "html": "<p>one</p>", "html": "<p>two</p>"}', "duplicate_field"),
])
def test_reject_reasons(raw: bytes, reason: str) -> None:
    assert reason_of(raw) == reason


def test_every_reason_is_reachable() -> None:
    small = EngineConfig(max_text_bytes=10)
    seen = {reason_of(b"{"), reason_of(b"\xff"), reason_of(b"[]"), reason_of(b'{"text": "x"}'),
            reason_of(b'{"id": "a"}'), reason_of(b'{"id": [], "text": "x"}'),
            reason_of(b'{"id": "a", "text": "01234567890"}', small), reason_of(b'{"id": "a", "id": "b", "text": "x"}')}
    assert seen == set(REJECT_REASONS)


def test_too_large_counts_utf8_bytes() -> None:
    config = EngineConfig(max_text_bytes=10)
    assert parse_record(json.dumps({"id": "a", "text": "é" * 5}), config).text == "é" * 5      # 10 bytes
    assert reason_of(json.dumps({"id": "a", "text": "é" * 6}), config) == "too_large"          # 12 bytes
    assert reason_of(json.dumps({"id": "a", "html": "<p>" + "x" * 20 + "</p>"}), config) == "too_large"
    assert parse_record(json.dumps({"id": "a", "text": "x" * 10}), config).text == "x" * 10


def test_too_large_raw_record_rejected_before_decoding() -> None:
    config = EngineConfig(max_text_bytes=100)
    raw = b'{"id": "a", "text": "' + b"\xff" * 70_000 + b'"}'  # not even UTF-8: size is checked first
    assert reason_of(raw, config) == "too_large"


def test_valid_record() -> None:
    raw = json.dumps({"id": "n-1", "text": "Body text", "title": "Title", "url": "http://x", "source": "abc",
                      "published": "2017-02-07", "extra": {"ignored": True}}).encode()
    assert parse_record(raw, CONFIG) == Article(id="n-1", text="Body text", is_html=False, title="Title",
                                                url="http://x", source="abc", published="2017-02-07")


def test_str_and_bytes_input_agree() -> None:
    raw = '{"id": "ü", "text": "Grüße"}'
    assert parse_record(raw, CONFIG) == parse_record(raw.encode(), CONFIG) == Article(id="ü", text="Grüße")
    assert parse_record(bytearray(raw.encode()), CONFIG) == parse_record(memoryview(raw.encode()), CONFIG)


def test_html_records_set_is_html_and_text_wins() -> None:
    art = parse_record(b'{"id": "h", "html": "<p>page</p>"}', CONFIG)
    assert art.is_html and art.text == "<p>page</p>"
    both = parse_record(b'{"id": "h", "text": "plain", "html": "<p>page</p>"}', CONFIG)
    assert not both.is_html and both.text == "plain"
    null_text = parse_record(b'{"id": "h", "text": null, "html": "<p>page</p>"}', CONFIG)
    assert null_text.is_html


@pytest.mark.parametrize(("raw_id", "expected"), [(42, "42"), (0, "0"), (-7, "-7"), (10**20, str(10**20)),
                                                 ("id with spaces", "id with spaces")])
def test_ids_become_strings(raw_id: object, expected: str) -> None:
    assert parse_record(json.dumps({"id": raw_id, "text": "x"}), CONFIG).id == expected


def test_optional_numbers_become_strings_and_null_stays_none() -> None:
    art = parse_record(b'{"id": 1, "text": "x", "title": 2017, "published": 1.5, "url": null}', CONFIG)
    assert (art.title, art.published, art.url, art.source) == ("2017", "1.5", None, None)


def test_configurable_field_names() -> None:
    config = EngineConfig(id_field="doc_id", text_field="body", html_field="page", title_field="headline")
    art = parse_record(b'{"doc_id": 7, "body": "the body", "headline": "H", "id": "ignored", "text": "ignored"}',
                       config)
    assert art == Article(id="7", text="the body", title="H")
    page = parse_record(b'{"doc_id": "p", "page": "<b>x</b>", "html": "ignored"}', config)
    assert page.is_html and page.text == "<b>x</b>"
    assert reason_of(b'{"id": "a", "body": "x"}', config) == "missing_id"
    assert reason_of(b'{"doc_id": "a", "text": "x", "html": "<p>x</p>"}', config) == "missing_text"
    assert reason_of(b'{"doc_id": "a", "body": "x", "headline": ["x"]}', config) == "wrong_type"
    with pytest.raises(RecordError, match="doc_id"):
        parse_record(b'{"body": "x"}', config)


def test_article_from_object_direct() -> None:
    assert article_from_object({"id": "a", "text": "t"}, CONFIG) == Article(id="a", text="t")
    with pytest.raises(RecordError) as err:
        article_from_object(["a"], CONFIG)
    assert err.value.reason == "not_an_object"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=60))
def test_arbitrary_bytes_parse_or_reject(raw: bytes) -> None:
    try:
        art = parse_record(raw, CONFIG)
    except RecordError as err:
        assert err.reason in REJECT_REASONS
    else:
        assert isinstance(art, Article) and art.id and art.text.strip()


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                           lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
                           max_leaves=6)


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries({}, optional={"id": JSON_VALUES, "text": JSON_VALUES, "html": JSON_VALUES,
                                           "title": JSON_VALUES, "url": JSON_VALUES}))
def test_arbitrary_objects_parse_or_reject(obj: dict) -> None:
    try:
        art = parse_record(json.dumps(obj), CONFIG)
    except RecordError as err:
        assert err.reason in REJECT_REASONS
    else:
        assert art.id == str(obj["id"])
        assert art.text in (obj.get("text"), obj.get("html"))


@pytest.mark.parametrize("raw", [
    b'{"id": "a", "text": "body", "meta": {"id": 1, "id": 2}}',        # a nested object's own keys
    b'{"id": "a", "text": "the \\"id\\" and the \\"text\\"", "source": "id"}',  # the names in values
    '{"id": "a", "text": "body", "tags": ["text", "html", "id"]}',     # (a str record)
])
def test_field_names_seen_twice_but_not_as_repeated_keys_are_accepted(raw) -> None:
    article = parse_record(raw, EngineConfig())
    assert article.id == "a" and article.text


def test_a_record_too_deep_to_check_for_repeated_fields_is_refused_cleanly() -> None:
    """orjson reads 1,024 levels, the json module that reads the keys of a suspect record fewer: such
    a record is invalid_json, not an exception out of the parser."""
    deep = b"[" * 1000 + b"]" * 1000
    assert reason_of(b'{"id": "a", "text": "x", "n": ' + deep + b', "id": "b"}') == "invalid_json"
    assert parse_record(b'{"id": "a", "text": "x", "n": ' + deep + b'}', EngineConfig()).id == "a"  # no name twice


def test_a_repeated_field_is_found_with_other_field_names() -> None:
    config = EngineConfig(id_field="uid", text_field="body")
    with pytest.raises(RecordError) as err:
        parse_record(b'{"uid": "a", "body": "x", "uid": "b"}', config)
    assert err.value.reason == "duplicate_field" and "'uid'" in str(err.value)
    assert parse_record(b'{"uid": "a", "body": "x", "id": "b", "id": "c"}', config).id == "a"  # not a field it reads


_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False),
                    st.text(max_size=12), st.sampled_from(["", " ", "\t\n", "é", "a" * 4097, "\ud800"]),
                    st.lists(st.integers(), max_size=2))


def _outcome(obj: object, check, config: EngineConfig = CONFIG):
    try:
        return check(obj, config)
    except RecordError as err:
        return ("refused", err.reason, str(err))


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(["id", "text", "html", "title", "url", "source", "published", "x"]),
                       _VALUES, max_size=8))
def test_the_fast_check_makes_what_the_full_checks_make(obj: dict) -> None:
    """``_plain_article`` (type tests only, for the common record) gives the article the full checks
    give, and leaves every other record to them (None): ``article_from_object`` is the same either way."""
    from stream_dedup.record import _checked_article, _plain_article

    plain = _plain_article(obj, CONFIG)
    full = _outcome(obj, _checked_article)
    if plain is not None:
        assert plain == full
    assert _outcome(obj, article_from_object) == full


def test_the_fast_check_takes_the_common_records_and_leaves_the_rest() -> None:
    from stream_dedup.record import _plain_article

    small = EngineConfig(max_text_bytes=40)
    common = {"id": "a-1", "text": "body text", "title": "T", "url": None, "source": "wire"}
    assert _plain_article(common, CONFIG) == Article("a-1", "body text", False, "T", None, "wire", None)
    for other in ({**common, "id": 7}, {**common, "id": "é"}, {**common, "id": ""}, {**common, "id": "a" * 4097},
                  {**common, "text": " \n"}, {**common, "text": None, "html": "<p>x</p>"}, {**common, "title": 3},
                  {**common, "published": 1.5}):
        assert _plain_article(other, CONFIG) is None
    assert _plain_article({"id": "a", "text": "x" * 10}, small) is not None
    assert _plain_article({"id": "a", "text": "x" * 11}, small) is None   # (4 bytes a character: over a quarter)
    assert article_from_object({"id": "a", "text": "x" * 11}, small).text == "x" * 11
