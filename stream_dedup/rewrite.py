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

import numpy as np

MIN_SHARE = 0.7    # of the smaller identity sketch, shared
MIN_LENGTH = 0.9   # shingle count of the shorter text / of the longer one


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


def passes(j: float, a: np.ndarray, b: np.ndarray, n: int, stored_n: int, low: float, high: float,
           min_pairs: int) -> bool:
    """The rule of the module docstring for a candidate with Jaccard estimate ``j`` (sketches ``a``, ``b``)."""
    if not in_band(j, low, high):
        return False
    shared, share, length = evidence(a, b, n, stored_n)
    return shared >= min_pairs and share >= MIN_SHARE and length >= MIN_LENGTH
