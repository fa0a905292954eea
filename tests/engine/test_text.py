"""stream_dedup.text: NFKC + casefold, tokenisation (ASCII fast path, no-boundary scripts)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dedup import kernels
from stream_dedup.config import EngineConfig
from stream_dedup.fingerprint import Fingerprinter
from stream_dedup.folding import fold
from stream_dedup.hashing import TokenHasher, token_hash
from stream_dedup.text import (
    _NO_BOUNDARY,
    blank_non_word,
    has_no_boundary_script,
    no_boundary_table,
    normalize,
    tokenize,
)

WORD = re.compile(r"\w+")


def regex_tokens(normalized: str) -> list[bytes]:
    return [w.encode("utf-8", "surrogatepass") for w in WORD.findall(normalized)]


@pytest.mark.parametrize(("raw", "expected"), [
    ("ＡＢＣ　ｄｅｆ１２３", "abc def123"),      # full-width letters, digits and space
    ("ﬁnancial ﬂow", "financial flow"),       # ligatures
    ("Straße", "strasse"),                     # German sharp s
    ("ΣΊΣΥΦΟΣ", "σίσυφοσ"),                     # casefold maps every sigma to σ (lower() would give ς)
    ("Ⅻ ①", "xii 1"),                          # roman numeral, circled digit
    ("e\u0301", "é"),                          # decomposed -> composed
    ("HELLO World", "hello world"),
])
def test_normalize(raw: str, expected: str) -> None:
    assert normalize(raw) == expected


def test_normalize_makes_variants_tokenize_alike() -> None:
    assert tokenize(normalize("ＳＴＲＡßＥ ﬁnal")) == tokenize(normalize("strasse final"))


ASCII = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=127), max_size=200)


@settings(max_examples=500, deadline=None)
@given(ASCII)
def test_ascii_fast_path_equals_regex(text: str) -> None:
    assert text.isascii()
    assert tokenize(text) == regex_tokens(text)


def test_ascii_fast_path_examples() -> None:
    assert tokenize("it's 3:45pm -- a_b, c.d\te\nf\x00g") == [b"it", b"s", b"3", b"45pm", b"a_b", b"c", b"d",
                                                              b"e", b"f", b"g"]
    assert tokenize("") == []
    assert tokenize(" ,.;!? ") == []


def boundary_free(text: str) -> bool:
    return not has_no_boundary_script(text)


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=200).map(normalize).filter(boundary_free))
def test_unicode_tokenize_equals_regex_without_no_boundary_scripts(text: str) -> None:
    assert tokenize(text) == regex_tokens(text)


@pytest.mark.parametrize(("text", "expected"), [
    ("我爱北京天安门", ["我", "爱", "北", "京", "天", "安", "门"]),
    ("hello世界abc", ["hello", "世", "界", "abc"]),
    ("東京タワー 2024年", ["東", "京", "タ", "ワ", "ー", "2024", "年"]),
    ("ภาษาไทย", ["ภ", "า", "ษ", "า", "ไ", "ท", "ย"]),
    ("ひらがな、カタカナ。", ["ひ", "ら", "が", "な", "カ", "タ", "カ", "ナ"]),
    # Hangul has spaces, but particles are glued to words (서울에서 = 서울 + 에서): characters too
    ("한국어 텍스트", ["한", "국", "어", "텍", "스", "트"]),
    ("서울에서 iPhone을", ["서", "울", "에", "서", "iphone", "을"]),
])
def test_no_boundary_scripts_become_characters(text: str, expected: list[str]) -> None:
    assert tokenize(normalize(text)) == [t.encode() for t in expected]


def test_has_no_boundary_script() -> None:
    assert has_no_boundary_script("abc 中")
    assert has_no_boundary_script("ไทย")
    assert has_no_boundary_script("한국")  # Korean: character k-grams too
    assert not has_no_boundary_script("abc déjà vu Москва")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=120))
def test_blank_non_word_keeps_exactly_the_tokens(text: str) -> None:
    norm = normalize(text)
    blanked = blank_non_word(norm)
    assert len(blanked) == len(norm)
    assert WORD.findall(blanked) == WORD.findall(norm)
    # every non-ASCII character left is a word character
    assert all(ch.isascii() or WORD.fullmatch(ch) for ch in blanked)


UNICODE_TEXT = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from(list("aZ9_ -,.!é€ßﬁ＠Ａ\u00a0\u2014\u200b\u0301Ωж中ไ") + ["\ud800"]),
    ),
    max_size=150,
)


@settings(max_examples=500, deadline=None)
@given(UNICODE_TEXT.map(normalize).filter(boundary_free))
def test_blank_non_word_and_kernel_equal_tokenize_and_token_hash(norm: str) -> None:
    blanked = blank_non_word(norm)
    buf = np.frombuffer(blanked.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    got = kernels.token_hashes_utf8(buf, kernels.WORD_BYTES, 1)
    assert [int(x) for x in got] == [token_hash(t, 1) for t in tokenize(norm)]


NO_BOUNDARY_TEXT = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from(list("aZ9_ -,.!é€中文東京でをไทยລາວ한국어ㄱᄀ々〡ｦﾞ\u3000") + ["\U00020000", "\U0003134f",
                                                                                  "\U00031350", "\U0001f600"]),
    ),
    max_size=150,
)


@settings(max_examples=500, deadline=None)
@given(NO_BOUNDARY_TEXT.map(normalize))
def test_split_kernel_equals_tokenize_and_token_hash(norm: str) -> None:
    """Scripts written without spaces: the compiled scan splits their characters into tokens of
    their own exactly as :func:`tokenize` does (beyond the BMP too), and hashes them alike."""
    blanked = blank_non_word(norm)
    buf = np.frombuffer(blanked.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    got = kernels.token_hashes_split(buf, kernels.WORD_BYTES, no_boundary_table(), 1)
    assert [int(x) for x in got] == [token_hash(t, 1) for t in tokenize(blanked)]


def test_no_boundary_table_is_the_tokenizer_regex_on_the_bmp() -> None:
    table = no_boundary_table()
    pattern = re.compile(f"[{_NO_BOUNDARY}]")
    assert [cp for cp in range(0x10000) if table[cp]] == \
        [cp for cp in range(0x10000) if 0xD800 > cp or cp > 0xDFFF if pattern.match(chr(cp))]


FINGERPRINTER = Fingerprinter(EngineConfig())


@settings(max_examples=500, deadline=None)
@given(UNICODE_TEXT)
def test_fingerprinter_token_hashes_equal_tokenize(text: str) -> None:
    """All scripts (including no-boundary ones): the production path equals tokenize + TokenHasher."""
    got = FINGERPRINTER.token_hashes(text)
    expected = TokenHasher(1).hashes(tokenize(fold(text)))
    assert np.array_equal(got, expected)


def test_stored_common_non_word_is_what_the_check_gives() -> None:
    """COMMON_NON_WORD is stored (the check cost ~3 ms of every start); re-run the check and compare,
    so a change of the candidates or of Python's Unicode tables shows here."""
    from stream_dedup.text import _COMMON_NON_WORD_CANDIDATES, COMMON_NON_WORD, _blank_equivalent

    assert COMMON_NON_WORD == tuple(ch for ch in _COMMON_NON_WORD_CANDIDATES if _blank_equivalent(ch))

