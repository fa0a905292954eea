"""stream_dedup.fingerprint: pinned values, process independence, kernel path == reference path,
the wire format."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dedup.config import EngineConfig
from stream_dedup.fingerprint import Fingerprint, Fingerprinter
from stream_dedup.html_text import html_to_text
from stream_dedup.identity import identity_sketch
from stream_dedup.record import Article
from stream_dedup.text import COMMON_NON_WORD, ascii_equivalent

PINNED_TEXT = ("Streaming near-duplicate detection: the quick brown fox jumps over the lazy dog, "
               "while 3 reporters file the same story twice. Naïve façade, Straße, ﬁnance!")

# Pinned with the default EngineConfig when the format was fixed: changing any of these values
# silently invalidates every index and every fingerprint in flight (then bump the wire version and
# the folding/tokenizer version the index checks). Wire version 2: Latin diacritics are folded.
PINNED_EXACT = "eaeb5443f127eed78d0b805f1617f087"
PINNED_N_SHINGLES = 22
PINNED_SIMHASH = 15420489987822560892
PINNED_MINHASH_8 = [2841736364, 1521935194, 3595020817, 2105956953, 2294294080, 3845884573, 253936806, 1633456403]
# --fold-diacritics 0 gives the values of wire version 1 (no other folding step touches this text)
PINNED_V1 = ("23a8f62c7c28dc92137ee2f2e9ea1143", 15440789372418459188,
             [2841736364, 1964704811, 1417861517, 2105956953, 1520427696, 3845884573, 253936806, 1633456403])

DEFAULT = Fingerprinter(EngineConfig())


def test_pinned_fingerprint() -> None:
    fp = DEFAULT.fingerprint_text(PINNED_TEXT)
    assert fp.exact.hex() == PINNED_EXACT
    assert fp.n_shingles == PINNED_N_SHINGLES
    assert fp.simhash == PINNED_SIMHASH
    assert fp.minhash[:8].tolist() == PINNED_MINHASH_8
    assert fp.minhash.shape == (128,) and fp.minhash.dtype == np.uint32
    assert DEFAULT.fingerprint_reference(PINNED_TEXT) == fp


def test_pinned_fingerprint_without_diacritic_folding() -> None:
    keep = Fingerprinter(EngineConfig(fold_diacritics=0))
    fp = keep.fingerprint_text(PINNED_TEXT)
    assert (fp.exact.hex(), fp.simhash, fp.minhash[:8].tolist()) == PINNED_V1
    assert keep.fingerprint_reference(PINNED_TEXT) == fp


@pytest.mark.parametrize("hash_seed", ["0", "4242"])
def test_fingerprint_is_the_same_in_another_process(hash_seed: str) -> None:
    script = textwrap.dedent(f"""
        import sys
        from stream_dedup.config import EngineConfig
        from stream_dedup.fingerprint import Fingerprinter
        sys.stdout.write(Fingerprinter(EngineConfig()).fingerprint_text({PINNED_TEXT!r}).to_bytes().hex())
    """)
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert bytes.fromhex(proc.stdout) == DEFAULT.fingerprint_text(PINNED_TEXT).to_bytes()


TEXTS = [
    PINNED_TEXT,
    "Plain ASCII news text. " * 30,
    "Déjà vu: Москва и Санкт-Петербург — Ελληνικά κείμενα, naïve café.",
    "東京都は本日、新しい条例を発表した。市民の反応はさまざまだ。",
    "ข่าววันนี้: รัฐบาลประกาศมาตรการใหม่",
    "mixed 中文 and English words 2024年 with ｆｕｌｌｗｉｄｔｈ",
    "!!! ... --- ,,, ???",
    "",
    "   \n\t ",
    "one",
    "two words",
    "a b c d",
    "emoji 😀 between 🚀 words ✓ and math ∑ x²",
    "zero\u200bwidth and soft\u00adhyphen and nbsp\u00a0here",
    "lone \ud800 surrogate",
    "_under_score_ snake_case CamelCase",
]


@pytest.mark.parametrize("text", TEXTS)
def test_kernel_equals_reference(text: str) -> None:
    assert DEFAULT.fingerprint_text(text) == DEFAULT.fingerprint_reference(text)


@pytest.mark.parametrize("text", TEXTS + ["Straße Łódź café façade", "Ѕ ЅНА Το Υπουργείο", "東京は日本の首都です 2024"])
def test_one_compiled_call_equals_the_chained_kernels(text: str) -> None:
    """Fingerprinter._fused (fingerprint_kernel: one call) gives the fingerprint of the chain of
    kernel calls, or None for text a fold table does not hold (the chain then computes it)."""
    fused = DEFAULT._fused(text)
    assert fused is None or fused == DEFAULT._chained(text)


#: pieces of ASCII text where the identity scan's rules meet: numbers joined across . , : / or not
#: (``3.5x``, ``1,2a``), names after a lower-case letter, digit, comma, colon or semicolon, words
#: holding digits, underscores, separators at run ends, long runs across the 64-byte chunks
_IDENTITY_PIECES = list("aZ90 .,:;/'_-\n") + ["Mr ", "Apple ", "3.5 ", "1,200", "10:30 ", "2017/02/03", "x9", "G20 ",
                                               "said ", ", Smith ", ": Ana ", "; Bob ", "7 Acme ", "3.5x ", "1,2a",
                                               "4/", "5.", "The ", "x" * 70, "1" * 70]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_IDENTITY_PIECES), max_size=120).map("".join))
def test_an_ascii_texts_identity_items_are_its_token_runs(text: str) -> None:
    """The one call reads an ASCII text's identity items from its token runs (no second byte
    scan): the sketch of the byte scan, pair for pair."""
    fused = DEFAULT._fused(text)
    assert fused is not None
    assert np.array_equal(fused.identity, identity_sketch(text))


def test_one_compiled_call_covers_ascii_folded_and_split_text_and_leaves_the_rest() -> None:
    """ASCII, Latin folded by table and CJK (tokens one character each, the identity sketch in
    Python) take the one call; Cyrillic look-alikes and Greek (no fold table) do not."""
    for text in ("Plain news", "Straße Łódź café façade", "東京は日本の首都です 2024"):
        assert DEFAULT._fused(text) is not None, text
    assert DEFAULT._fused("東京は日本の首都です 2024").identity.shape[0] > 0
    assert DEFAULT._fused("Ѕ ЅНА Το Υπουργείο") is None


HTML = [
    "<html><body><nav>Home</nav><article><h1>Title</h1><p>Body text of the story &amp; more.</p></article>"
    "<footer>(c) site</footer><script>x()</script></body></html>",
    "<p>café</p><p>東京</p>",
    "<div>no article here, just <b>text</b></div>",
]


@pytest.mark.parametrize("html", HTML)
def test_html_kernel_equals_reference_and_extracted_text(html: str) -> None:
    fp = DEFAULT.fingerprint_text(html, is_html=True)
    assert fp == DEFAULT.fingerprint_reference(html, is_html=True)
    assert fp == DEFAULT.fingerprint_text(html_to_text(html))


@pytest.mark.parametrize("config", [
    EngineConfig(num_perm=16, shingle_size=1, seed=7),
    EngineConfig(num_perm=64, shingle_size=3, seed=123456),
    EngineConfig(num_perm=200, shingle_size=8),
])
def test_kernel_equals_reference_other_configs(config: EngineConfig) -> None:
    fpr = Fingerprinter(config)
    for text in TEXTS:
        fp = fpr.fingerprint_text(text)
        assert fp.minhash.shape == (config.num_perm,)
        assert fp == fpr.fingerprint_reference(text)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300) | st.lists(st.sampled_from(["the", "news", "Straße", "東", "ไทย", "é", ",", " ", "\n",
                                                          "ﬁ", "Ａ", "42", "_"]), max_size=80).map(" ".join))
def test_property_kernel_equals_reference(text: str) -> None:
    assert DEFAULT.fingerprint_text(text) == DEFAULT.fingerprint_reference(text)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(["The", "news", "A1", "x_y", " ", ".", "\n", "Ab"]) | st.sampled_from(COMMON_NON_WORD)
                | st.characters(), max_size=60).map("".join))
def test_common_punctuation_fast_path_equals_reference(text: str) -> None:
    """Blanking the common non-ASCII punctuation (the ASCII fast path) gives the reference tokens."""
    assert DEFAULT.fingerprint_text(text) == DEFAULT.fingerprint_reference(text)


def test_common_punctuation_set_excludes_characters_with_word_forms() -> None:
    assert "\u2014" in COMMON_NON_WORD and "\u201c" in COMMON_NON_WORD and "\ufffd" in COMMON_NON_WORD
    assert "\u2122" not in COMMON_NON_WORD and "\u00bd" not in COMMON_NON_WORD  # NFKC: "TM", "1/2"
    assert ascii_equivalent("caf\u00e9 \u2014 ok") is None
    assert ascii_equivalent("\u201cQuoted\u201d \u2014 ok\u2026") == b"   quoted        ok   "
    assert ascii_equivalent("Plain ASCII") == b"plain ascii"
    assert ascii_equivalent("\U0001f600 beyond the BMP") is None


def test_fingerprint_of_article() -> None:
    art = Article(id="x", text="<p>Hello there, general reader.</p>", is_html=True)
    assert DEFAULT.fingerprint(art) == DEFAULT.fingerprint_text("Hello there, general reader.")


def test_exact_hash_ignores_case_unicode_form_punctuation_and_spacing() -> None:
    a = DEFAULT.fingerprint_text("Straße ﬁnance: the  QUICK, brown fox!")
    b = DEFAULT.fingerprint_text("strasse finance the quick brown fox")
    assert a == b
    c = DEFAULT.fingerprint_text("strasse finance the quick brown dog")
    assert c.exact != a.exact


def test_empty_text_fingerprint() -> None:
    fp = DEFAULT.fingerprint_text("...")
    assert fp.n_shingles == 0 and fp.simhash == 0
    assert fp.exact == DEFAULT.fingerprint_text("").exact


def test_seed_changes_everything() -> None:
    a = Fingerprinter(EngineConfig(seed=1)).fingerprint_text(PINNED_TEXT)
    b = Fingerprinter(EngineConfig(seed=2)).fingerprint_text(PINNED_TEXT)
    assert a.exact != b.exact and a.simhash != b.simhash and not np.array_equal(a.minhash, b.minhash)
    assert a.n_shingles == b.n_shingles


# ------------------------------------------------------------------------------------ wire format
def test_to_bytes_layout() -> None:
    fp = DEFAULT.fingerprint_text(PINNED_TEXT)
    data = fp.to_bytes()
    k, a = fp.identity.shape[0], fp.anchors.shape[0]
    assert k > 0 and a > 0 and len(data) == 31 + 4 * 128 + 2 + 4 * k + 2 + 8 * a + 2 + 64
    assert data[0] == 4                                     # version
    assert int.from_bytes(data[1:3], "big") == 128          # num_perm
    assert int.from_bytes(data[3:11], "big") == PINNED_SIMHASH
    assert int.from_bytes(data[11:15], "big") == PINNED_N_SHINGLES
    assert data[15:31].hex() == PINNED_EXACT
    assert int.from_bytes(data[31:35], "big") == PINNED_MINHASH_8[0]
    assert int.from_bytes(data[543:545], "big") == k       # identity sketch length, then uint32 BE each
    assert int.from_bytes(data[545:549], "big") == int(fp.identity[0])
    at = 545 + 4 * k                                        # passage anchors: count, then uint64 BE each
    assert int.from_bytes(data[at:at + 2], "big") == a
    assert int.from_bytes(data[at + 2:at + 10], "big") == int(fp.anchors[0])
    at += 2 + 8 * a                                         # content-word bitmap: length, then its bytes
    assert int.from_bytes(data[at:at + 2], "big") == 64 and data[at + 2:] == fp.words


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 300).flatmap(lambda n: st.lists(st.integers(0, 2**32 - 1), min_size=n, max_size=n)),
       st.integers(0, 2**64 - 1), st.binary(min_size=16, max_size=16), st.integers(0, 2**32 - 1),
       st.lists(st.integers(0, 2**32 - 1), max_size=48, unique=True))
def test_round_trip(minhash: list[int], sim: int, exact: bytes, n: int, identity: list[int]) -> None:
    fp = Fingerprint(np.array(minhash, dtype=np.uint32), sim, exact, n, np.array(sorted(identity), dtype=np.uint32),
                     words=bytes(range(n % 65)))
    back = Fingerprint.from_bytes(fp.to_bytes())
    assert back == fp
    assert back.minhash.dtype == np.uint32
    assert back.to_bytes() == fp.to_bytes()


def test_round_trip_real() -> None:
    for text in TEXTS:
        fp = DEFAULT.fingerprint_text(text)
        assert Fingerprint.from_bytes(fp.to_bytes()) == fp
        assert Fingerprint.from_bytes(bytearray(fp.to_bytes())) == fp


GOOD = DEFAULT.fingerprint_text(PINNED_TEXT).to_bytes()


@pytest.mark.parametrize("garbage", [
    b"",
    b"\x01",
    GOOD[:30],                        # shorter than the header
    GOOD[:-1],                        # signature truncated
    GOOD + b"\x00",                   # trailing byte
    b"\x01" + GOOD[1:],               # version 1: other folding, refused
    b"\x02" + GOOD[1:],               # version 2: no passage anchors, refused
    b"\x03" + GOOD[1:],               # version 3: no content-word bitmap, refused
    b"\x05" + GOOD[1:],               # unknown version
    b"\x00" + GOOD[1:],
    GOOD[:1] + b"\x00\x10" + GOOD[3:],  # header says 16 permutations, body holds 128
    b"not a fingerprint at all, clearly garbage",
])
def test_from_bytes_rejects_garbage(garbage: bytes) -> None:
    with pytest.raises(ValueError):
        Fingerprint.from_bytes(garbage)


def test_equality() -> None:
    fp = DEFAULT.fingerprint_text(PINNED_TEXT)
    other = Fingerprint(fp.minhash.copy(), fp.simhash, fp.exact, fp.n_shingles, fp.identity.copy(), fp.anchors.copy(),
                        fp.words)
    assert fp == other
    assert fp != Fingerprint(fp.minhash, fp.simhash, fp.exact, fp.n_shingles, fp.identity, fp.anchors)  # no bitmap
    changed = fp.minhash.copy()
    changed[5] ^= 1
    assert fp != Fingerprint(changed, fp.simhash, fp.exact, fp.n_shingles)
    assert fp != Fingerprint(fp.minhash, fp.simhash ^ 1, fp.exact, fp.n_shingles)
    assert fp != Fingerprint(fp.minhash, fp.simhash, bytes(16), fp.n_shingles)
    assert fp != Fingerprint(fp.minhash, fp.simhash, fp.exact, fp.n_shingles + 1)
    assert fp != Fingerprint(fp.minhash, fp.simhash, fp.exact, fp.n_shingles, fp.identity[1:], fp.anchors)
    assert fp != Fingerprint(fp.minhash, fp.simhash, fp.exact, fp.n_shingles, fp.identity, fp.anchors[1:])
    assert fp != "fingerprint"
    with pytest.raises(TypeError):
        hash(fp)


def test_character_shingles_are_character_kgrams() -> None:
    """--char-shingles k: shingles are the k-grams of the text's word characters joined by single spaces."""
    from stream_dedup.hashing import TokenHasher, shingle_hashes, sorted_unique

    config = EngineConfig(char_shingles=5)
    f = Fingerprinter(config)
    text = "Hello,   World!  Ünïcode — and 日本語 text."
    fp = f.fingerprint_text(text)
    assert fp == f.fingerprint_reference(text)
    normalized = "hello world ünïcode and 日本語 text"
    grams = {normalized[i:i + 5] for i in range(len(normalized) - 4)}
    assert fp.n_shingles == len(grams)
    th = TokenHasher(config.seed).hashes([c.encode() for c in normalized])
    assert fp.n_shingles == sorted_unique(shingle_hashes(th, 5)).shape[0]
    # a typo changes few character 5-grams: still far more similar than under word 4-shingles
    a = "the quick brown fox jumps over the lazy dog near the river bank today"
    b = a.replace("jumps", "jumped")
    char_j = np.mean(f.fingerprint_text(a).minhash == f.fingerprint_text(b).minhash)
    word = Fingerprinter(EngineConfig())
    word_j = np.mean(word.fingerprint_text(a).minhash == word.fingerprint_text(b).minhash)
    assert char_j > word_j


def test_character_shingles_change_the_index_settings(tmp_path) -> None:
    from stream_dedup.engine import Deduplicator

    Deduplicator(EngineConfig(), tmp_path).close()
    with pytest.raises(ValueError, match="different settings"):
        Deduplicator(EngineConfig(char_shingles=5), tmp_path)


def test_a_version_1_fingerprint_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown fingerprint version 1 .*same release"):
        Fingerprint.from_bytes(b"\x01" + GOOD[1:])
    with pytest.raises(ValueError, match="unknown fingerprint version 2 .*same release"):  # before passage anchors
        Fingerprint.from_bytes(b"\x02" + GOOD[1:])
    with pytest.raises(ValueError, match="unknown fingerprint version 3 .*same release"):  # before word bitmaps
        Fingerprint.from_bytes(b"\x03" + GOOD[1:])


def _same(a: Fingerprint, b: Fingerprint) -> bool:
    """Equal values of the same types and dtypes (what a stored record or the wire form keeps)."""
    return a == b and type(a.simhash) is type(b.simhash) is int and type(a.n_shingles) is type(b.n_shingles) is int \
        and all(getattr(a, f).dtype == getattr(b, f).dtype for f in ("minhash", "identity", "anchors")) \
        and a.to_bytes() == b.to_bytes()


@pytest.mark.parametrize("config", [EngineConfig(), EngineConfig(num_perm=64, shingle_size=3, seed=9),
                                    EngineConfig(identity_threshold=0, rewrite_jaccard=0),
                                    EngineConfig(char_shingles=True)])
def test_a_batch_in_one_call_equals_each_text_alone(config: EngineConfig) -> None:
    """Fingerprinter.fingerprint_many (fingerprint_kernel.fingerprint_many: every text the fold tables
    hold in one call) gives each text the fingerprint of fingerprint_text: ASCII, Latin folded by
    table, CJK split per character, HTML, empty text, and the texts left to the chain (Cyrillic
    look-alikes, Greek: no fold table) in their places."""
    fpr = Fingerprinter(config)
    items = [(t, False) for t in TEXTS] + [(h, True) for h in HTML] + [
        ("Straße Łódź café façade", False), ("Ѕ ЅНА Το Υπουργείο", False), ("東京は日本の首都です 2024", False),
        ("", False), ("BREAKING: Markets close higher", False), (PINNED_TEXT, False), ("Plain news", False)]
    many = fpr.fingerprint_many(items)
    assert len(many) == len(items)
    for (text, is_html), fp in zip(items, many, strict=True):
        assert _same(fp, fpr.fingerprint_text(text, is_html)), text


def test_a_batch_in_one_call_equals_each_text_alone_on_the_shared_stream(shared_stream) -> None:
    records, _ = shared_stream(600)
    items = [(r["text"], False) if r.get("text") is not None else (r["html"], True) for r in records]
    assert any(html for _, html in items) and any(not t.isascii() for t, _ in items)
    many = [fp for i in range(0, len(items), 256) for fp in DEFAULT.fingerprint_many(items[i:i + 256])]
    assert all(_same(a, DEFAULT.fingerprint_text(*item)) for a, item in zip(many, items, strict=True))


def test_a_batch_crosses_a_process_boundary_in_one_pickle() -> None:
    """What a dedup fingerprint process sends back (fingerprint_pool): the batch's arrays in one
    pickle, the texts left to the chain whole; unpickled, each text's fingerprint."""
    import pickle

    from stream_dedup.fingerprint_batch import FingerprintBatch

    items = [(t, False) for t in TEXTS] + [("Ѕ ЅНА Το Υπουργείο", False), ("東京は日本の首都です 2024", False), ("", False)]
    batch = FingerprintBatch.of(DEFAULT, items)
    assert batch.whole and len(batch.whole) < len(items)  # (some texts whole, most as rows of the arrays)
    back = pickle.loads(pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL))
    assert len(back) == len(items)
    for (text, is_html), fp in zip(items, back.fingerprints(), strict=True):
        assert _same(fp, DEFAULT.fingerprint_text(text, is_html)), text
    assert FingerprintBatch.of(DEFAULT, []).fingerprints() == []


def test_byte_forms_decoded_as_one_batch_are_each_forms_fingerprint(shared_stream) -> None:
    """FingerprintBatch.from_wire (the worker's decision stage: a run's signature records at once)
    gives row i = Fingerprint.from_bytes(forms[i]), dtypes included: the shared stream's texts (HTML,
    non-ASCII), texts without shingles, a text left to the chain of kernels."""
    from stream_dedup.fingerprint_batch import FingerprintBatch

    records, _ = shared_stream(300)
    items = [(r["text"], False) if r.get("text") is not None else (r["html"], True) for r in records]
    items += [("", False), ("x", False), ("Ѕ ЅНА Το Υπουργείο", False), (PINNED_TEXT, False)]
    forms = [DEFAULT.fingerprint_text(text, is_html).to_bytes() for text, is_html in items]
    batch = FingerprintBatch.from_wire(forms)
    assert len(batch) == len(forms) and not batch.whole
    for form, fp in zip(forms, batch.fingerprints(), strict=True):
        assert _same(fp, Fingerprint.from_bytes(form))
    assert batch.exacts() == [Fingerprint.from_bytes(f).exact for f in forms]
    assert FingerprintBatch.from_wire([]).fingerprints() == []


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, 2**32 - 1), min_size=8, max_size=8), st.integers(0, 2**64 - 1),
                          st.binary(min_size=16, max_size=16), st.integers(0, 2**32 - 1),
                          st.lists(st.integers(0, 2**32 - 1), max_size=20), st.lists(st.integers(0, 2**64 - 1),
                                                                                     max_size=20),
                          st.binary(max_size=70)), min_size=1, max_size=12))
def test_any_byte_forms_decoded_as_one_batch(fields: list) -> None:
    from stream_dedup.fingerprint_batch import FingerprintBatch

    fps = [Fingerprint(np.array(m, dtype=np.uint32), sim, exact, n, np.array(sorted(i), dtype=np.uint32),
                       np.array(sorted(a), dtype=np.uint64), words) for m, sim, exact, n, i, a, words in fields]
    forms = [fp.to_bytes() for fp in fps]
    for fp, back in zip(fps, FingerprintBatch.from_wire(forms).fingerprints(), strict=True):
        assert back == fp and back.to_bytes() == fp.to_bytes()


def test_a_bad_byte_form_in_a_batch_raises_as_alone() -> None:
    from stream_dedup.fingerprint_batch import FingerprintBatch

    for bad in (GOOD[:-1], b"\x05" + GOOD[1:], b"", GOOD + b"\x00"):
        with pytest.raises(ValueError) as alone:
            Fingerprint.from_bytes(bad)
        with pytest.raises(ValueError) as batched:
            FingerprintBatch.from_wire([GOOD, bad, GOOD])
        assert str(batched.value) == str(alone.value)
    other = Fingerprinter(EngineConfig(num_perm=64)).fingerprint_text(PINNED_TEXT).to_bytes()
    with pytest.raises(ValueError, match="128 and 64 signature values"):
        FingerprintBatch.from_wire([GOOD, other])
