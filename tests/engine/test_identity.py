"""stream_dedup.identity: identity tokens in context, the compiled scan equal to the reference,
agreement on both sides of the look-alike rule, and the engine's template_of decision."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dedup.config import EngineConfig
from stream_dedup.engine import Deduplicator
from stream_dedup.fold_table import fold_bytes, tables
from stream_dedup.folding import fold
from stream_dedup.identity import (
    _WORD,
    _bmp_tables,
    agreement,
    identity_items,
    identity_pairs_reference,
    identity_pairs_unicode,
    identity_sketch,
)
from stream_dedup.record import Article
from stream_dedup.text import COMMON_NON_WORD

REPORT = ("Shares of Apple rose 3.2 percent to 145.50 dollars on Tuesday, after the company reported revenue of "
          "78.4 billion dollars for the quarter ending December 31, up from 75.9 billion a year earlier. "
          "Analysts at Morgan Stanley had expected 77.3 billion. The company said iPhone sales reached 78.3 "
          "million units, while services revenue grew to 7.2 billion, and it forecast 51.5 billion to 53.5 "
          "billion for the March quarter. Chief executive Tim Cook said demand in China was strong, and "
          "shares of Apple closed at 146.20 in New York, giving the company a value of 765 billion dollars.")
TEMPLATE = (" The results were published after the close of regular trading, and the company will hold a "
            "conference call with analysts and investors later in the day to discuss the outlook for the rest of "
            "the fiscal year, including the expected impact of currency movements, component costs and new "
            "product launches on its margins, which the market watches closely as a sign of how well the "
            "business is doing against its competitors in the smartphone and computer markets. Investors will "
            "also look for any update on the plans to return cash to shareholders through dividends and share "
            "buybacks, and for comments on how the supply chain is coping with demand for the newest models.")
REPORT += TEMPLATE
# the same template, another company and other figures
OTHER = ("Shares of Cisco rose 1.7 percent to 32.10 dollars on Tuesday, after the company reported revenue of "
         "11.6 billion dollars for the quarter ending January 28, up from 11.1 billion a year earlier. "
         "Analysts at Goldman Sachs had expected 11.3 billion. The company said router sales reached 12.4 "
         "million units, while services revenue grew to 3.1 billion, and it forecast 11.4 billion to 11.9 "
         "billion for the April quarter. Chief executive Chuck Robbins said demand in Europe was strong, and "
         "shares of Cisco closed at 32.40 in New York, giving the company a value of 161 billion dollars."
         + TEMPLATE)
# the same company's next report: its names kept, other figures
NEXT = REPORT
for old, new in (("3.2", "1.1"), ("145.50", "151.20"), ("78.4", "52.9"), ("31", "30"), ("75.9", "50.6"),
                 ("77.3", "53.1"), ("78.3", "41.0"), ("7.2", "7.9"), ("51.5", "43.5"), ("53.5", "45.5"),
                 ("146.20", "152.00"), ("765", "801")):
    NEXT = NEXT.replace(old, new)
CORRECTED = REPORT.replace("78.3 million", "78.29 million")   # one figure corrected


def test_items() -> None:
    items = [(fold(t), kind) for t, kind in
             identity_items("He said 1,200 people, and Mr Smith met Ana in Zürich on 10:30. The 20th G20")]
    assert ("1,200", 2) in items and ("10:30", 2) in items
    assert ("smith", 1) in items and ("ana", 1) in items and ("zurich", 1) in items   # folded
    assert ("he", 0) in items and ("the", 0) in items                              # sentence starts
    assert ("mr", 1) in items                                                      # inside a sentence: a name
    assert ("20th", 0) in items and ("g20", 1) in items                            # words holding digits


def test_code_point_tables_are_the_regex_and_isupper() -> None:
    """The tables of the compiled Unicode scan, built from ``str.isalnum``, say what the reference's
    ``\\w`` regex and ``str.isupper`` say of every code point of the Basic Multilingual Plane."""
    is_word, is_upper = _bmp_tables()
    chars = [chr(cp) for cp in range(0x10000)]
    assert is_word.tolist() == [_WORD.fullmatch(ch) is not None for ch in chars]
    assert is_upper.tolist() == [ch.isupper() for ch in chars]


def test_code_point_tables_read_from_their_cache_file_are_the_tables_built(tmp_path, monkeypatch) -> None:
    """The tables are written beside the fold tables by the process that built them and read by the
    next; a file cut short or of another stamp is built again, and a directory that cannot be
    written leaves them built in memory."""
    from stream_dedup import fold_table, identity

    monkeypatch.setattr(fold_table, "CACHE_DIR", tmp_path / "cache")
    built = identity._build_bmp_tables()
    identity._bmp_tables.cache_clear()
    try:
        first = identity._bmp_tables()  # built, and written
        path = fold_table.cache_path("bmp")
        whole = path.read_bytes()
        identity._bmp_tables.cache_clear()
        read = identity._bmp_tables()  # read from the file
        for a, b, c in zip(built, first, read, strict=True):
            assert a.dtype == c.dtype == np.bool_ and a.shape == c.shape == (0x10000,)
            assert np.array_equal(a, b) and np.array_equal(a, c)
            assert c.flags.c_contiguous  # (the kernel's exported signature)
        assert identity_pairs_unicode("Москва: Путин встретился с Си 3 марта").tolist() \
            == identity_pairs_reference("Москва: Путин встретился с Си 3 марта").tolist()
        for spoilt in (whole[:-1], whole[:8] + bytes(8) + whole[16:]):  # cut short, another stamp
            path.write_bytes(spoilt)
            identity._bmp_tables.cache_clear()
            again = identity._bmp_tables()
            assert all(np.array_equal(a, b) for a, b in zip(built, again, strict=True))
            assert path.read_bytes() == whole  # written again
        path.unlink()
        (tmp_path / "cache").rmdir()
        (tmp_path / "cache").write_text("a file where the directory would be")
        identity._bmp_tables.cache_clear()
        assert all(np.array_equal(a, b) for a, b in zip(built, identity._bmp_tables(), strict=True))
    finally:
        identity._bmp_tables.cache_clear()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(list("aZ9 0.,:;/'_-\n") + ["Mr ", "Apple ", "3.5 ", "x", "\u2019"]), max_size=80)
       .map("".join))
def test_compiled_scan_equals_reference(text: str) -> None:
    assert np.array_equal(identity_sketch(text), identity_pairs_reference(text))


_PUNCT = sorted(COMMON_NON_WORD)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(list("aZ9 0.,:;'_-\n") + ["Mr ", "Apple ", "3.5 ", "Zürich ", "\u200b"] + _PUNCT),
                max_size=60).map("".join), st.booleans())
def test_common_punctuation_folds_without_the_general_fold(text: str, diacritics: bool) -> None:
    """Text that is ASCII but for common punctuation is folded by table: the same pairs as folding
    first; each handled character folds alone, even inside a word."""
    folded = fold(text, diacritics, case=False)
    assert np.array_equal(identity_sketch(text, diacritics), identity_sketch(folded, diacritics))
    table = tables(diacritics)["identity"]
    if all(ch.isascii() or ch in table for ch in text):
        assert fold_bytes(text, diacritics, "identity").tobytes() == folded.encode("utf-8")


def test_the_identity_table_keeps_quotes_and_dashes_and_replaces_spaces_and_ellipsis() -> None:
    table = tables(True)["identity"]
    assert all(table[ch] == ch.encode() for ch in "\u2018\u2019\u201c\u201d\u2013\u2014\u2022")
    assert table["\xa0"] == b" " and table["\u2026"] == b"..." and table["\u200b"] == b""
    assert table["\xe9"] == b"e" and "\xe9" not in tables(False)["identity"]  # an accent folds to ASCII, or is kept


def test_fast_path_gives_the_folded_sketch_on_the_shared_stream(shared_stream) -> None:
    records, _ = shared_stream(3000)
    texts = [r.get("text") or "" for r in records if not (r.get("text") or "").isascii()]
    assert len(texts) > 500
    for text in texts:
        assert np.array_equal(identity_sketch(text), identity_sketch(fold(text, True, case=False)))


def test_agreement_on_both_sides() -> None:
    report = identity_sketch(REPORT)
    assert agreement(report, identity_sketch(OTHER), 4) < 0.5             # another company's report
    assert agreement(report, identity_sketch(NEXT), 4) < 0.5              # same names, other figures
    assert agreement(report, identity_sketch(CORRECTED), 4) >= 0.9        # one figure corrected
    trimmed = REPORT[: REPORT.index(" Chief")]
    republished = "By Maria Lopez, Associated Press\n\nNEW YORK (AP) — " + trimmed + " Copyright 2017 AP."
    assert agreement(report, identity_sketch(republished), 4) == 1.0      # new contexts are not compared
    assert agreement(report, identity_sketch("no names or figures here at all"), 4) is None


@pytest.mark.parametrize(("text", "duplicate"), [(OTHER, False), (NEXT, False), (CORRECTED, True)])
def test_engine_template_rule(tmp_path, text: str, duplicate: bool) -> None:
    with Deduplicator(EngineConfig(), tmp_path / "on") as dedup:
        dedup.process(Article(id="report", text=REPORT))
        d = dedup.process(Article(id="b", text=text))
        again = dedup.process(Article(id="b", text=text))   # a replay keeps every field
        assert again.seen_before and {**again.to_event(), "seen_before": False} == d.to_event()
    assert d.is_duplicate == duplicate
    if not duplicate:
        assert d.template_of == "report" and d.identity_overlap < 0.5
        assert d.to_event()["template_of"] == "report"
        # the text rules alone call it a duplicate: the identity check decides
        with Deduplicator(EngineConfig(identity_threshold=0), tmp_path / "off") as dedup:
            dedup.process(Article(id="report", text=REPORT))
            assert dedup.process(Article(id="b", text=text)).is_duplicate


def _brute_agreement(a: np.ndarray, b: np.ndarray, min_contexts: int) -> float | None:
    from stream_dedup.identity import IDENTITY_K, MIN_NUMBER_CONTEXTS
    counts = []
    for flag in (0x8000, 0):
        fa = sorted(int(x) for x in a if int(x) & 0x8000 == flag)
        fb = sorted(int(x) for x in b if int(x) & 0x8000 == flag)
        tau = min([1 << 16] + [f[-1] >> 16 for f in (fa, fb) if len(f) >= IDENTITY_K])
        common = {x >> 16 for x in fa if x >> 16 < tau} & {x >> 16 for x in fb if x >> 16 < tau}
        same = {x >> 16 for x in set(fa) & set(fb) if x >> 16 < tau}
        counts.append((len(common), len(same)))
    (cn, sn), (cw, sw) = counts
    shares = ([(sn + sw) / (cn + cw)] if cn + cw >= min_contexts else []) + ([sn / cn] if cn >= MIN_NUMBER_CONTEXTS else [])
    return min(shares) if shares else None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 40), max_size=80), st.lists(st.integers(0, 40), max_size=80), st.integers(0, 1))
def test_agreement_equals_brute_force(xs: list[int], ys: list[int], fold_kind: int) -> None:
    """Small context and token ranges, so contexts collide and both samples fill up."""
    from stream_dedup.identity import _select

    def pairs(vals: list[int]) -> np.ndarray:
        return _select(np.array([((v % 7) << 16) | ((v % 2) << 15) * fold_kind | (v // 7) for v in vals], dtype=np.uint32))
    a, b = pairs(xs), pairs(ys)
    if a.shape[0] and b.shape[0]:
        assert agreement(a, b, 1) == _brute_agreement(a, b, 1)


def test_no_identity_sketch_when_the_check_is_off() -> None:
    from stream_dedup.fingerprint import Fingerprinter
    on = Fingerprinter(EngineConfig()).fingerprint_text(REPORT)
    off = Fingerprinter(EngineConfig(identity_threshold=0)).fingerprint_text(REPORT)
    assert on.identity.shape[0] > 4 and off.identity.shape[0] == 0
    assert (on.exact, on.simhash, on.minhash.tolist()) == (off.exact, off.simhash, off.minhash.tolist())
    assert Fingerprinter(EngineConfig(identity_threshold=0)).fingerprint_reference(REPORT) == off


_SCRIPTS = ["Москве ", "Эльвира ", "председатель ", "0,5 ", "16 ", "7.4 ", "Ω ", "Αθήνα ", "東京", "で", "iPhone ", "Mr ",
            "a ", "b, ", "3/4 ", "\u00c9cole ", "\u0130stanbul ", "\u01c5 ", "\ud800", "_x "]


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=200) | st.lists(st.sampled_from(_SCRIPTS) | st.characters(), max_size=60).map("".join))
def test_compiled_unicode_items_give_the_reference_pairs(text: str) -> None:
    """Text that does not fold to ASCII: the items found by the compiled span scan give the pairs
    of the reference scan, whatever the script (a character beyond the BMP: the reference itself)."""
    assert np.array_equal(identity_pairs_unicode(text), identity_pairs_reference(text))


def test_a_cyrillic_article_takes_the_compiled_scan() -> None:
    ru = ("Центральный банк России в пятницу повысил ключевую ставку на 0,5 процентного пункта до 16 процентов, "
          "сообщила Эльвира Набиуллина на пресс-конференции в Москве, а 3 Мая, Сбербанк снизил ставки. ") * 3
    folded = fold(ru, True, case=False)
    assert fold_bytes(ru, True, "identity") is None and not folded.isascii()
    sketch = identity_sketch(ru)
    assert np.array_equal(sketch, identity_pairs_reference(folded)) and sketch.shape[0] >= 4
    assert any(p & 0x8000 for p in sketch.tolist()) and any(not p & 0x8000 for p in sketch.tolist())  # numbers, names
