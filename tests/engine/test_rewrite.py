"""stream_dedup.rewrite: the content-word bitmap (kernel against its numpy twin), its Jaccard estimate."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dedup import rewrite
from stream_dedup.config import EngineConfig
from stream_dedup.fingerprint import Fingerprinter

FP = Fingerprinter(EngineConfig())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), max_size=400), st.lists(st.integers(0, 2**64 - 1), max_size=20))
def test_word_bitmap_equals_reference(hashes: list[int], stop: list[int]) -> None:
    th = np.array(hashes, dtype=np.uint64)
    sw = rewrite.stop_table(np.array([h for h in stop + hashes[:5] if h], dtype=np.uint64))
    got = rewrite.word_bitmap(th, sw)
    assert got == rewrite.word_bitmap_reference(th, sw)
    assert len(got) == (rewrite.WORD_BITS // 8 if hashes else 0)


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 40), st.integers(0, 1023), st.lists(st.integers(0, 2**54 - 1), min_size=1, max_size=60))
def test_word_bitmap_along_long_probe_runs(crowd: int, home: int, more: list[int]) -> None:
    """Stop words that share a home slot (runs longer than the four slots compared at once, at the
    table's end and wrapping around it) and tokens 0, in the run, just past it and elsewhere: the
    kernel's bitmap is the reference's."""
    stop = [(k << 55) | home for k in range(1, crowd + 1)]  # (all in slot `home` of the 1,024; bit k each)
    table = rewrite.stop_table(np.array(stop, dtype=np.uint64))
    assert table.shape[0] == 1024
    near = [(k << 55) | home for k in range(crowd + 1, crowd + 5)]  # (not stop words: probed along the run)
    tokens = stop + [0, 0] + near + [(m << 10) | home for m in more]
    th = np.array(tokens, dtype=np.uint64)
    assert rewrite.word_bitmap(th, table) == rewrite.word_bitmap_reference(th, table)


def test_stop_words_are_left_out() -> None:
    a = FP.fingerprint_text("the harbour of the town and a ferry to the island")
    b = FP.fingerprint_text("harbour town ferry island")
    assert a.words == b.words and len(a.words) == 64


def _bitmap(words: list[str]) -> bytes:
    return rewrite.word_bitmap(FP.token_hashes(" ".join(words)), FP.stop)


def test_word_jaccard_estimates_the_set_jaccard() -> None:
    rng = np.random.default_rng(3)
    vocab = [f"w{i}x" for i in range(5000)]
    for size, shared in ((100, 90), (300, 200), (500, 400), (600, 300)):
        pick = rng.choice(len(vocab), 2 * size - shared, replace=False)
        a = [vocab[i] for i in pick[:size]]
        b = [vocab[i] for i in pick[size - shared:]]
        exact = shared / (2 * size - shared)
        est = rewrite.word_jaccard(_bitmap(a), _bitmap(b))
        assert est is not None and abs(est - exact) < 0.05, (size, shared, est, exact)


def test_word_jaccard_is_none_when_it_cannot_be_read() -> None:
    small = _bitmap(["harbour", "ferry"])
    assert rewrite.word_jaccard(small, small) == 1.0
    assert rewrite.word_jaccard(b"", small) is None and rewrite.word_jaccard(small, b"") is None
    assert rewrite.word_jaccard(small, small[:32]) is None
    full = _bitmap([f"w{i}x" for i in range(2000)])  # about 98 % of the bits set
    assert rewrite.word_jaccard(full, small) is None


def test_the_rule_reads_words_when_it_can_else_identity_pairs() -> None:
    ids = np.arange(10, dtype=np.uint32)
    close, far = _bitmap([f"w{i}x" for i in range(100)]), _bitmap([f"w{i}x" for i in range(40, 140)])
    args = (0.4, ids, ids, 100, 100, 0.3, 0.5, 8)
    assert rewrite.passes(*args, close, close, 0.75)
    assert not rewrite.passes(*args, close, far, 0.75)      # identity pairs all shared: the words decide
    assert rewrite.passes(*args, close, far, 0.0)           # words off: the identity pairs
    assert rewrite.passes(*args, b"", far, 0.75)            # no bitmap (an older record): the identity pairs
    assert not rewrite.passes(0.4, ids, ids, 100, 80, 0.3, 0.5, 8, close, close, 0.75)  # lengths differ
    assert not rewrite.passes(0.5, ids, ids, 100, 100, 0.3, 0.5, 8, close, close, 0.75)  # above the band


def test_word_jaccard_counts_table_is_the_formula() -> None:
    """The linear-counting table word_jaccard reads is the formula, value for value."""
    for m in (8, 512):
        assert rewrite._counts(m) == [rewrite._count(bits, m) for bits in range(m + 1)]
