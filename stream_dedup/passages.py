"""Passage anchors: candidates for containment (an excerpt inside its original, the original
inside a longer page), found by shared passages instead of by overall similarity.

Banding LSH proposes pairs by Jaccard similarity, and a 20 % excerpt of a story, or a story inside
a page three times its length, has a Jaccard of 0.2-0.33 with it: too low for the S-curve. Shared
*passages* find them whatever the lengths.

**Winnowing** (Schleimer, Wilkerson and Aiken, SIGMOD 2003, the MOSS fingerprints): from the
sequence of word k-shingle hashes (the same shingles as the MinHash), keep the smallest hash of
every window of ``w`` consecutive shingles (the rightmost one on ties, "robust winnowing"). Anchors
are those kept hashes, distinct, as 48-bit values. Properties:

* any run of at least ``w + k - 1`` words that two texts share gives them at least one common
  anchor (a window inside the run picks the same minimum in both);
* every window of a verbatim excerpt is a window of its original, so *all* anchors of an excerpt
  are anchors of the original, and all anchors of an article are anchors of a page that holds it:
  containment measured on anchors is 1 for verbatim copies, with no sampling noise;
* about 2 / (w + 1) of the shingles become anchors (w = 32: 6 %, 33 for a 537-word article).

**Index.** One posting list per anchor: the anchor (48 bits) -> the seqs of the articles holding
it, at most ``common_docs`` of them, in memory (a :class:`~stream_dedup.list_table.MemberLists`).
The anchors an article added are stored under ``D`` + seq in RocksDB's points family (6 bytes
each): the lists are rebuilt from them when the index opens (a list is exactly the articles that
added themselves to it and are still indexed), and removing or evicting an article takes it out
of those lists again.

**Boilerplate.** A posting list that has reached ``common_docs`` members is *common*: the passage
recurs in that many indexed documents (site navigation, cookie banner, newsletter blurb, author
bio, a stock phrase). It is no longer appended to and is ignored, neither evidence of sameness nor
counted in a containment: this is the line-frequency rule of web-scale dedup pipelines, bounded by
construction. Only articles whose lists the engine read add themselves: new articles, and copies
found by containment, and those only to lists that do not already hold an article they were
matched with. Copies found by Jaccard or SimHash read no lists and add nothing (their passages
are their match's), so a story copied many times does not make its own passages look common.

**Candidates and verification.** A stored article sharing at least ``min_shared`` usable anchors
with the new one is a candidate. Its anchor containment is, in the two directions,
``shared / (usable anchors of the new article + 1)`` (the new article inside the stored one) and
``shared / (anchors of the stored article + 1)`` (the stored one inside the new), and the engine applies
its containment rule to the larger of this and the MinHash estimate.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .jit import inline, kernel
from .kernels import shingle_hashes
from .list_table import list_sizes

ANCHOR_BYTES = 6   # anchors are the top 48 bits of a shingle hash (key of a posting list)
NO_ANCHORS = np.zeros(0, dtype=np.uint64)
MAX_ANCHORS = 8192  # the smallest anchors kept of a huge text (a 2 MB text has ~20,000 at w = 32)
PASSAGES = "passages"   # the column family that held the posting lists up to index format 8 (empty since)
DELETE_PREFIX = b"D"    # points family: D + seq(8) -> the anchors the article added (6 bytes each)


class PostingLists(Protocol):
    """What :func:`lookup` reads: the members of the lists of some anchors, list after list."""

    def lookup(self, keys: np.ndarray, ends: np.ndarray | None = None) -> np.ndarray: ...


@kernel
def winnow(token_hashes, k, w):
    """Distinct anchors (sorted uint64, 48-bit values) of a token-hash sequence: the rightmost
    smallest word k-shingle hash of every window of ``w`` shingles, shifted right by 16 bits.
    The shingles are those of :func:`stream_dedup.kernels.sketch`."""
    if token_hashes.shape[0] == 0 or w <= 0:
        return np.zeros(0, dtype=np.uint64)
    return winnow_shingles(shingle_hashes(token_hashes, k), w)


@inline
def winnow_shingles(sh, w):
    """:func:`winnow` from the shingle hashes ``sh`` (not empty) of its token hashes, ``w`` > 0."""
    m = sh.shape[0]
    ww = min(w, m)
    out = np.empty(m, dtype=np.uint64)
    c = 0
    pos = -1
    for start in range(m - ww + 1):
        end = start + ww
        if pos < start:  # the minimum left the window: scan it again
            pos = start
            for i in range(start + 1, end):
                if sh[i] <= sh[pos]:
                    pos = i
            out[c] = sh[pos]
            c += 1
        elif sh[end - 1] <= sh[pos]:
            pos = end - 1
            out[c] = sh[pos]
            c += 1
    # their top ANCHOR_BYTES, sorted, each once (np.unique's result, made in ``out`` itself)
    kept = out[:c]
    for i in range(c):
        kept[i] >>= np.uint64(64 - 8 * ANCHOR_BYTES)
    kept.sort()
    k = 0
    for i in range(c):
        if k == 0 or kept[i] != kept[k - 1]:
            kept[k] = kept[i]
            k += 1
    return out[:k]


def winnow_reference(shingles: np.ndarray, w: int) -> np.ndarray:
    """:func:`winnow` from the shingle hashes, window by window (slow; for tests)."""
    m = shingles.shape[0]
    if m == 0 or w <= 0:
        return NO_ANCHORS.copy()
    ww = min(w, m)
    kept = set()
    for start in range(m - ww + 1):
        window = shingles[start:start + ww].tolist()
        low = min(window)
        kept.add(low)
    return np.array(sorted(v >> (64 - 8 * ANCHOR_BYTES) for v in kept), dtype=np.uint64)


def anchor_bytes(anchors: np.ndarray) -> bytes:
    """The anchors as stored under ``D``: 6 bytes each, big-endian."""
    raw = anchors.astype(">u8").view(np.uint8).reshape(-1, 8)[:, 8 - ANCHOR_BYTES:]
    return np.ascontiguousarray(raw).tobytes()


def anchors_of(stored: bytes | None) -> np.ndarray:
    """The anchors (uint64) of a ``D`` value (:func:`anchor_bytes`)."""
    if not stored:
        return NO_ANCHORS
    raw = np.zeros((len(stored) // ANCHOR_BYTES, 8), dtype=np.uint8)
    raw[:, 8 - ANCHOR_BYTES:] = np.frombuffer(stored, dtype=np.uint8).reshape(-1, ANCHOR_BYTES)
    return raw.view(">u8").ravel().astype(np.uint64)


@dataclass(slots=True)
class PassageLookup:
    anchors: np.ndarray               # the new article's anchors (uint64)
    counts: np.ndarray                # members of each anchor's list (int64)
    members: np.ndarray               # the lists' members, list after list (uint32)
    shared: dict[int, int]            # candidate seq -> usable anchors it shares (>= min_shared)
    usable: int                       # anchors of the new article whose lists are not common


def lookup(lists: PostingLists, anchors: np.ndarray, common_docs: int, min_shared: int) -> PassageLookup:
    """Read the posting lists of ``anchors`` and count the shared usable anchors."""
    if anchors.shape[0] == 0:
        return PassageLookup(anchors, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint32), {}, 0)
    ends = np.empty(anchors.shape[0], dtype=np.int64)
    members = lists.lookup(anchors, ends)
    if not members.shape[0]:  # every list empty (most new articles): ends are the sizes, all 0
        return PassageLookup(anchors, ends, members, {}, anchors.shape[0] if common_docs > 0 else 0)
    counts = list_sizes(ends)
    usable_lists = counts < common_docs
    usable = int(usable_lists.sum())
    shared: dict[int, int] = {}
    if members.shape[0]:
        kept = members[np.repeat(usable_lists, counts)]
        if kept.shape[0]:
            shared = {s: n for s, n in Counter(kept.tolist()).items() if n >= min_shared}
    return PassageLookup(anchors, counts, members, shared, usable)


def posting_writes(found: PassageLookup, common_docs: int, matched: set[int],
                   all_bytes: bytes | None = None) -> tuple[np.ndarray, bytes]:
    """The anchors whose lists the new article joins, and its ``D`` value (those anchors' bytes,
    :func:`anchor_bytes`; ``all_bytes``, if given, are those of all its anchors).

    Lists that are common are left alone, and so are lists holding one of ``matched`` (the
    articles the new one was verified a duplicate of: their passages are already indexed).
    """
    if all_bytes is not None and not found.members.shape[0] and common_docs > 0:
        return found.anchors, all_bytes  # every list empty (most new articles): it joins them all
    joins = found.counts < common_docs
    if matched and found.members.shape[0]:
        holds = np.isin(found.members, np.fromiter(matched, dtype=np.uint32, count=len(matched)))
        if holds.any():
            lists = np.repeat(np.arange(found.counts.shape[0]), found.counts)
            joins[lists[holds]] = False
    adds = found.anchors[joins]
    return adds, anchor_bytes(adds) if adds.shape[0] else b""


def anchor_containment(shared: int, usable: int, stored_anchors: int) -> tuple[float, float]:
    """(new inside stored, stored inside new) measured on anchors, 4 decimals as reported.

    One anchor's worth of doubt: ``shared / (n + 1)``, so a few anchors cannot make a containment
    on their own (7 of 8 shared gives 0.78: a 132-shingle story whose true containment is 0.74
    was otherwise called a copy on the dev stream), while 9 of 9 gives 0.9.
    """
    return (round(shared / (usable + 1), 4) if usable else 0.0,
            round(min(1.0, shared / (stored_anchors + 1)), 4) if stored_anchors else 0.0)
