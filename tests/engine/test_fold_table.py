"""stream_dedup.fold_table: folding by table gives the bytes of the general fold, a character at a
time, and the fingerprint it feeds equals the reference fingerprint."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dedup.config import EngineConfig
from stream_dedup.fingerprint import Fingerprinter
from stream_dedup.fold_table import (
    RANGES,
    SELF_FOLDING_BLOCKS,
    fold_bytes,
    fold_identity_text,
    fold_tokens,
    tables,
    tables_with_blocks,
)
from stream_dedup.folding import HOMOGLYPHS, fold
from stream_dedup.identity import identity_pairs_reference, identity_sketch
from stream_dedup.text import COMMON_NON_WORD, blank_non_word

#: neighbours each entry is folded beside (those in its table: a text holding any other character
#: is folded in full): ASCII letters of both cases, a digit, spaces and punctuation, accented and
#: special Latin letters, a quote, a soft hyphen, a ligature-like titlecase letter
PROBES = ["a", "Z", "I", "0", " ", ".", "-", "\u00e9", "\u00df", "\u01c5", "\u201c", "\u00ad", "\u00aa", "\u2122",
          "\u4e2d", "\u3002", "\u304b", "\u30ab", "\ud55c", "\uff0c", "\uff21"]


def _fold(kind: str, text: str, diacritics: bool) -> str:
    return blank_non_word(fold(text, diacritics)) if kind == "tokens" else fold(text, diacritics, case=False)


@pytest.mark.parametrize("diacritics", [True, False])
@pytest.mark.parametrize("kind", ["tokens", "identity", "identity_any"])
def test_every_entry_is_its_fold_and_folds_alike_beside_any_neighbour(kind: str, diacritics: bool) -> None:
    """The table's claim: an entry is the fold of its character whatever stands before or after it,
    so the fold of a text of entries is the entries joined."""
    table = tables_with_blocks(diacritics)[kind]
    assert len(table) > (600 if kind != "identity" else 400 if diacritics else 100)  # (é stays é without diacritics)
    rng = random.Random(5)
    blocks = sorted(ch for ch in table if any(lo <= ord(ch) < hi for lo, hi in SELF_FOLDING_BLOCKS))
    in_blocks = set(blocks)
    checked = [ch for ch in table if ch not in in_blocks] + rng.sample(blocks, min(len(blocks), 1500))
    for ch in checked:
        encoded = table[ch]
        alone = _fold(kind, ch, diacritics)
        assert alone.encode("utf-8") == encoded, ch
        for probe in (p for p in PROBES if p.isascii() or p in table):
            assert _fold(kind, probe + ch, diacritics) == _fold(kind, probe, diacritics) + alone, (probe, ch)
            assert _fold(kind, ch + probe, diacritics) == alone + _fold(kind, probe, diacritics), (ch, probe)
    chars = sorted(table)
    for _ in range(3000):  # entries beside each other, three at a time
        text = "".join(rng.choice(chars) for _ in range(3))
        assert fold_bytes(text, diacritics, kind).tobytes() == _fold(kind, text, diacritics).encode("utf-8"), text


def test_the_tables_leave_out_what_depends_on_context() -> None:
    for diacritics in (True, False):
        for table in tables(diacritics).values():
            assert not set(table) & set(HOMOGLYPHS)  # a look-alike maps by the script around it
            assert "\u0301" not in table and "\u0131" not in table  # a combining mark; dotless i (a look-alike)
    assert all(any(lo <= ord(ch) < hi for lo, hi in (*RANGES, *SELF_FOLDING_BLOCKS))
               for ch in tables_with_blocks(True)["tokens"])
    assert "\u4e2d" not in tables(True)["tokens"]  # the blocks come only when a text needs them
    tokens = tables_with_blocks(True)["tokens"]
    assert tokens["\u4e2d"] == "\u4e2d".encode() and tokens["\u3002"] == b" " and tokens["\uff0c"] == b","
    assert not {"\u3131", "\uff76", "\uff9e", "\u3099", "\u309b"} & set(tokens)  # NFKC composes these with neighbours
    assert all(ch in table for ch in COMMON_NON_WORD for table in (*tables(True).values(), *tables(False).values()))
    assert "\u00e9" in tables(True)["identity"] and "\u00e9" not in tables(False)["identity"]  # é stays é: not ASCII
    assert tables(True)["tokens"]["\u00c9"] == b"e" and tables(False)["tokens"]["\u00c9"] == "\u00e9".encode()


@pytest.mark.parametrize("text", ["\u041c\u043e\u0441\u043a\u0432\u0430", "cafe\u0301", "\U0001f600 emoji",
                                  "\uff76\uff9e", "\u3131\u314f", "Z\u00fcrich \u0391\u03b8\u03ae\u03bd\u03b1",
                                  "lone \ud800"])
def test_a_character_outside_the_table_sends_the_text_to_the_general_fold(text: str) -> None:
    assert fold_bytes(text, True) is None


def test_latin_script_text_folds_by_table() -> None:
    text = "Se\u00f1or M\u00fcller\u2019s caf\u00e9 \u2014 na\u00efve \u201cStra\u00dfe\u201d \u2026 \u0141\u00f3d\u017a"
    assert fold_bytes(text, True).tobytes() == blank_non_word(fold(text, True)).encode("utf-8")
    assert fold_bytes(text, True).tobytes() == b"senor muller s cafe   naive  strasse  ... lodz"
    assert fold_bytes(text, True, "identity") is None  # case kept, ß and Ł fold to no ASCII: the reference scan
    text = text.replace("\u00df", "ss").replace("\u0141", "L")
    assert fold_bytes(text, True, "identity").tobytes().decode() == fold(text, True, case=False) \
        == "Senor Muller\u2019s cafe \u2014 naive \u201cStrasse\u201d ... Lodz"


DEFAULT = Fingerprinter(EngineConfig())
KEEP = Fingerprinter(EngineConfig(fold_diacritics=False))
_LATIN = sorted(set(tables(True)["tokens"]) | set(tables(False)["identity"]))
_WORDS = ["The", "news", "Paris", "2024", "3.5", " ", ". ", ", ", "\n", "Mr ", "\u201c", "\u2019", "\u0301", "\u043e",
          "\u6771"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_WORDS) | st.sampled_from(_LATIN) | st.characters(), max_size=80).map("".join),
       st.booleans())
def test_fingerprint_by_table_equals_the_reference(text: str, diacritics: bool) -> None:
    """Tokens and identity sketch by table (or by the general fold when a character is not in it)
    give the reference fingerprint; the identity sketch is that of the folded text's reference scan."""
    f = DEFAULT if diacritics else KEEP
    assert f.fingerprint_text(text) == f.fingerprint_reference(text)
    assert np.array_equal(identity_sketch(text, diacritics),
                          identity_pairs_reference(fold(text, diacritics, case=False)))


def test_fingerprint_by_table_on_accented_news(shared_stream) -> None:
    """The shared articles with their vowels given accents (as French or Portuguese text has them):
    every one folds by table, and the fingerprints equal the reference's."""
    records, _ = shared_stream(200)
    accents = str.maketrans({"a": "\u00e0", "e": "\u00e9", "o": "\u00f4", "u": "\u00fc", "E": "\u00c9", "c": "\u00e7"})
    rng = random.Random(3)
    by_table = 0
    for record in records:
        text = record.get("text") or ""
        accented = " ".join(w.translate(accents) if rng.random() < 0.1 else w for w in text.split(" "))
        by_table += fold_bytes(accented, True) is not None
        assert DEFAULT.fingerprint_text(accented) == DEFAULT.fingerprint_reference(accented)
    assert by_table >= 0.9 * len(records)


_CJK = ["\u4e2d\u56fd", "\u6771\u4eac", "\u3002", "\u3001", "\uff0c", "\uff1a", "\u304b", "\u30ab", "\u3099",
        "\u309b", "\uff76", "\uff9e", "\ud55c\uad6d", "\u3131", "\u314f", "\u1100", "\u11a8", "\u3005",
        "\uff21", "0.1", "3.35%", "iPhone", " ", "\U00020000", "\u0e44\u0e17\u0e22"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_CJK) | st.sampled_from(_LATIN) | st.characters(), max_size=60).map("".join),
       st.booleans())
def test_cjk_and_hangul_by_table_equal_the_reference(text: str, diacritics: bool) -> None:
    """Chinese, Japanese and Korean text folds by table (its characters tokenised one each), and
    jamo, half-width Katakana and combining voiced marks, which NFKC composes, send it to the
    general fold: the fingerprint is the reference's either way."""
    f = DEFAULT if diacritics else KEEP
    assert f.fingerprint_text(text) == f.fingerprint_reference(text)
    assert np.array_equal(identity_sketch(text, diacritics),
                          identity_pairs_reference(fold(text, diacritics, case=False)))
    by_table = fold_identity_text(text, diacritics)
    assert by_table is None or by_table == fold(text, diacritics, case=False)


def test_cjk_text_folds_by_table_and_splits() -> None:
    for text in ("\u4e2d\u56fd\u4eba\u6c11\u94f6\u884c\u5468\u4e94\u5ba3\u5e03\uff0c\u5229\u7387 3.35%\u3002",
                 "\u6771\u4eac\u306f\u65e5\u672c\u306e\u9996\u90fd\u3067\u3059\u3002iPhone",
                 "\ud55c\uad6d\uc740\ud589\uc740 \uae30\uc900\uae08\ub9ac\ub97c 3.5%\ub85c"):
        buf, split = fold_tokens(text, True)
        assert split and buf.tobytes().decode() == blank_non_word(fold(text, True))
        assert DEFAULT.fingerprint_text(text) == DEFAULT.fingerprint_reference(text)
    assert fold_tokens("caf\u00e9 \u2014 ok", True)[1] is False


@pytest.fixture
def fold_cache(tmp_path, monkeypatch):
    """fold_table's cache directory in ``tmp_path``, the process's arrays forgotten before and after."""
    from stream_dedup import fold_table

    monkeypatch.setattr(fold_table, "CACHE_DIR", tmp_path / "cache")
    fold_table._arrays.cache_clear()
    yield fold_table
    fold_table._arrays.cache_clear()


@pytest.mark.parametrize("kind, blocks", [("tokens", False), ("identity", False), ("identity_any", True)])
def test_the_tables_read_from_their_cache_file_are_the_tables_built(fold_cache, kind: str, blocks: bool) -> None:
    built = fold_cache._build_arrays(True, kind, blocks)
    first = fold_cache._arrays(True, kind, blocks)  # built, and written
    path = fold_cache.cache_file(True, kind, blocks)
    assert path.exists()
    fold_cache._arrays.cache_clear()
    read = fold_cache._read_cached(path)
    assert read is not None
    for a, b, c in zip(built, first, read, strict=True):
        assert a.dtype == c.dtype and a.shape == c.shape and np.array_equal(a, b) and np.array_equal(a, c)
        assert c.flags.writeable and c.flags.c_contiguous  # (the kernels' exported signatures)
    text = "Él añadió: «¡Qué día!» — 5 ½ km, 東京 und Straße"
    if kind == "tokens":
        assert fold_cache.fold_tokens(text, True)[0].tobytes() == blank_non_word(fold(text, True)).encode("utf-8")


def test_a_stale_or_cut_cache_file_is_built_again(fold_cache) -> None:
    path = fold_cache.cache_file(False, "tokens", False)
    fold_cache._arrays(False, "tokens", False)
    whole = path.read_bytes()
    path.write_bytes(whole[:-1])  # cut short
    assert fold_cache._read_cached(path) is None
    path.write_bytes(whole[:8] + bytes(8) + whole[16:])  # another stamp
    assert fold_cache._read_cached(path) is None
    fold_cache._arrays.cache_clear()
    fold_cache._arrays(False, "tokens", False)  # built again, and the file written again
    assert path.read_bytes() == whole
    other = path.parent / "0123456789abcdef-0-tokens-0.bin"  # a file of another stamp is removed
    other.write_bytes(b"old")
    fold_cache._write_cached(path, fold_cache._build_arrays(False, "tokens", False))
    assert not other.exists() and path.exists()


def test_an_unwritable_cache_directory_still_folds(fold_cache, tmp_path) -> None:
    (tmp_path / "cache").write_text("a file where the directory would be")
    arrays = fold_cache._arrays(True, "tokens", False)
    assert np.array_equal(arrays[1], fold_cache._build_arrays(True, "tokens", False)[1])
    assert fold_cache.fold_tokens("Café crème", True)[0].tobytes() == b"cafe creme"
