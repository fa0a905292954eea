"""The ``rewrite`` rule: the same story loosely rewritten, below the Jaccard threshold.

Agency copy re-edited by another desk keeps its facts and reorders and rewords its sentences: its
word 4-shingle Jaccard with the original falls to 0.3-0.5, under ``jaccard_threshold`` (0.5). A
Jaccard estimate alone is not enough there: an agency's follow-up story that repeats the earlier
story's background paragraphs reaches the band too (31 different stories of the dev stream do). So a candidate in the band also needs a second,
finer signal, the **identity pairs** both fingerprints hold already (:mod:`stream_dedup.identity`):
a number or name together with the two words before it. A rewrite keeps most of them (its facts in
their phrases: ``of 1.5 meters``, ``minister Peter Szijjarto``), another story keeps almost none.

The rule, for two texts that are not short and that no other rule matched: estimated Jaccard in
[``rewrite_jaccard``, ``jaccard_threshold``), at least ``rewrite_min_pairs`` identity pairs shared
by the two sketches (each holds at most 48: the 24 smallest pairs of numbers and of names), making
at least :data:`MIN_SHARE` of the smaller sketch, and lengths (shingle counts) within
:data:`MIN_LENGTH` of each other. A rewrite keeps the story's length; a follow-up story that
repeats the background paragraphs of the earlier one adds its own news and its own names. On the
dev stream, 31 pairs of different stories (follow-ups of one agency: TASS, RTE) reach the band
with 8 shared pairs; the share and length conditions leave none of them. The look-alike check
(identity agreement) applies after it as after every text rule. No data is stored for it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from . import kernels
from .hashing import sorted_unique
from .jit import trusted

MIN_SHARE = 0.7    # of the smaller identity sketch, shared
MIN_LENGTH = 0.9   # shingle count of the shorter text / of the longer one
WORD_BITS = 512    # bits of the content-word bitmap (64 bytes per article)
WORD_SHIFT = 64 - 9  # a word's bit: the top 9 bits of its 64-bit token hash
MAX_FILL = 0.75    # a bitmap with more bits set than this share is not used (about 700 words)
NO_WORDS = b""
#: words left out of the bitmap: the commonest English function words (and a few news words)
STOP_WORDS = tuple("""a about above after again against all also am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further had has have having he
her here hers herself him himself his how i if in into is it its itself just me more most my myself no nor not now of
off on once only or other our ours out over own said same says she should so some such than that the their theirs
them themselves then there these they this those through to too under until up very was we were what when where which
while who whom why will with would you your yours year years new one two told""".split())


def stop_hashes(token_hashes) -> np.ndarray:
    """The token hashes of :data:`STOP_WORDS` as :func:`stop_table` lays them out (``token_hashes``:
    text -> uint64 hashes, the fingerprint's own tokeniser and seed)."""
    return stop_table(sorted_unique(token_hashes(" ".join(STOP_WORDS))).astype(np.uint64))


def stop_table(hashes: np.ndarray, slots: int = 1024) -> np.ndarray:
    """An open-addressing table of ``hashes`` (nonzero): slot ``h & (slots - 1)``, linear probing, 0
    = empty; the kernel's stop-word lookup (one probe for most tokens, where a binary search took eight)."""
    while slots < 2 * len(hashes):
        slots *= 2
    table = np.zeros(slots, dtype=np.uint64)
    for h in sorted_unique(hashes).tolist():  # (np.unique would import numpy.ma: ~15 ms a process)
        i = h & (slots - 1)
        while table[i]:
            i = (i + 1) & (slots - 1)
        table[i] = h
    return table


def word_bitmap(token_hashes: np.ndarray, stop: np.ndarray) -> bytes:
    """The content-word bitmap (``WORD_BITS`` / 8 bytes) of a text's token hashes (compiled)."""
    if not token_hashes.shape[0]:
        return NO_WORDS
    return _word_bitmap(token_hashes, stop, WORD_SHIFT).tobytes()


def word_bitmap_reference(token_hashes: np.ndarray, stop: np.ndarray) -> bytes:
    """:func:`word_bitmap` with numpy (the kernel's twin, for tests)."""
    if not token_hashes.shape[0]:
        return NO_WORDS
    kept = token_hashes[~np.isin(token_hashes, stop[stop != 0])]
    bits = np.zeros(WORD_BITS, dtype=np.uint8)
    bits[(kept >> np.uint64(WORD_SHIFT)).astype(np.int64)] = 1
    return np.packbits(bits, bitorder="little").tobytes()


def _count(bits: int, m: int) -> float:
    return -m * math.log(1.0 - min(bits, m - 1) / m)


@functools.cache
def _counts(m: int) -> list[float]:
    """``[_count(bits, m) for bits in 0..m]``: :func:`word_jaccard` reads three per candidate of the
    rewrite band (17k on the short stream) from it instead of computing the logarithms."""
    return [_count(bits, m) for bits in range(m + 1)]


def word_jaccard(a: bytes, b: bytes) -> float | None:
    """Estimated content-word set Jaccard of two bitmaps (linear counting); None when either is
    empty, of another size, or fuller than :data:`MAX_FILL`."""
    if not a or len(a) != len(b):
        return None
    m = 8 * len(a)
    x, y = int.from_bytes(a, "little"), int.from_bytes(b, "little")
    na, nb = x.bit_count(), y.bit_count()
    if not na or not nb or max(na, nb) > MAX_FILL * m:
        return None
    counts = _counts(m)
    ca, cb, cu = counts[na], counts[nb], counts[(x | y).bit_count()]
    return max(0.0, min(1.0, (ca + cb - cu) / cu))


def shared_pairs(a: np.ndarray, b: np.ndarray) -> int:
    """Identity pairs (context and token) held by both sketches (sorted, distinct uint32)."""
    return int(np.intersect1d(a, b, assume_unique=True).shape[0])


def in_band(j: float, low: float, high: float) -> bool:
    """Whether the estimate ``j`` is in the rule's band (``low`` 0: the rule is off)."""
    return 0.0 < low <= j < high


def evidence(a: np.ndarray, b: np.ndarray, n: int, stored_n: int) -> tuple[int, float, float]:
    """(identity pairs shared, their share of the smaller sketch, length ratio) of a pair."""
    shared = shared_pairs(a, b)
    smaller = min(a.shape[0], b.shape[0])
    return shared, shared / smaller if smaller else 0.0, min(n, stored_n) / max(n, stored_n, 1)


def passes(j: float, a: np.ndarray, b: np.ndarray | Callable[[], np.ndarray], n: int, stored_n: int, low: float,
           high: float, min_pairs: int, words_a: bytes = NO_WORDS, words_b: bytes = NO_WORDS,
           min_words: float = 0.0) -> bool:
    """The rule of the module docstring for a candidate with Jaccard estimate ``j`` (identity
    sketches ``a``, ``b``; content-word bitmaps ``words_a``, ``words_b``). ``b`` may be a function
    that returns the stored sketch: it is decoded only when the bitmaps cannot decide."""
    if not in_band(j, low, high) or min(n, stored_n) / max(n, stored_n, 1) < MIN_LENGTH:
        return False
    wj = word_jaccard(words_a, words_b) if min_words > 0 else None
    if wj is not None:
        return wj >= min_words
    shared, share, _ = evidence(a, b() if callable(b) else b, n, stored_n)
    return shared >= min_pairs and share >= MIN_SHARE


_word_bitmap = trusted(kernels.word_bitmap)  # token hashes uint64 (a kernel's), stop: stop_table's uint64 (jit.trusted)
