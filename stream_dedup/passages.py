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

**Index.** One key per anchor in the ``passages`` column family: the anchor (6 bytes) -> the seqs
of the articles holding it (4 bytes each, oldest first), at most ``common_docs`` of them. The
anchors an article added are kept under ``D`` + seq in the points family, so that removing or
evicting it can take it out of those lists again (nothing else reads them).

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

import numpy as np

from .jit import kernel
from .kernels import shingle_hashes

ANCHOR_BYTES = 6   # anchors are the top 48 bits of a shingle hash (key of a posting list)
_SEQ_BYTES = 4
NO_ANCHORS = np.zeros(0, dtype=np.uint64)
MAX_ANCHORS = 8192  # the smallest anchors kept of a huge text (a 2 MB text has ~20,000 at w = 32)
PASSAGES = "passages"   # the column family of the posting lists
DELETE_PREFIX = b"D"    # points family: D + seq(8) -> the anchors the article added (6 bytes each)


@kernel
def winnow(token_hashes, k, w):
    """Distinct anchors (sorted uint64, 48-bit values) of a token-hash sequence: the rightmost
    smallest word k-shingle hash of every window of ``w`` shingles, shifted right by 16 bits.
    The shingles are those of :func:`stream_dedup.kernels.sketch`."""
    n = token_hashes.shape[0]
    if n == 0 or w <= 0:
        return np.zeros(0, dtype=np.uint64)
    sh = shingle_hashes(token_hashes, k)
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
    return np.unique(out[:c] >> np.uint64(64 - 8 * ANCHOR_BYTES))


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


def anchor_keys(anchors: np.ndarray) -> list[bytes]:
    """The posting-list key of each anchor: its 6 bytes, big-endian."""
    if anchors.shape[0] == 0:
        return []
    raw = anchors.astype(">u8").view(np.uint8).reshape(-1, 8)[:, 8 - ANCHOR_BYTES:]
    return np.ascontiguousarray(raw).view(f"V{ANCHOR_BYTES}").ravel().tolist()


@dataclass(slots=True)
class PassageLookup:
    keys: list[bytes]                 # posting-list key of each anchor of the new article
    values: list[bytes | None]        # the lists as read (appended to by :func:`posting_writes`)
    shared: dict[int, int]            # candidate seq -> usable anchors it shares (>= min_shared)
    usable: int                       # anchors of the new article whose lists are not common


def lookup(family, anchors: np.ndarray, common_docs: int, min_shared: int) -> PassageLookup:
    """Read the posting lists of ``anchors`` (one multi-get) and count the shared usable anchors."""
    keys = anchor_keys(anchors)
    if not keys:
        return PassageLookup(keys, [], {}, 0)
    values = family.get(keys)
    full = common_docs * _SEQ_BYTES
    members = [v for v in values if v is not None and len(v) < full]
    usable = len(members) + values.count(None)
    shared: dict[int, int] = {}
    if members:
        counts = Counter(np.frombuffer(b"".join(members), dtype=">u4").tolist())
        shared = {s: n for s, n in counts.items() if n >= min_shared}
    return PassageLookup(keys, values, shared, usable)


def posting_writes(found: PassageLookup, seq: int, common_docs: int,
                   matched: set[int]) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """The posting lists to write for the new article ``seq`` and its deletion record.

    Lists that are common are left alone, and so are lists holding one of ``matched`` (the
    articles the new one was verified a duplicate of: their passages are already indexed).
    """
    full = common_docs * _SEQ_BYTES
    s4 = seq.to_bytes(_SEQ_BYTES, "big")
    if matched:
        matched4 = [s.to_bytes(_SEQ_BYTES, "big") for s in matched]
        puts = [(k, v + s4 if v else s4) for k, v in zip(found.keys, found.values, strict=True)
                if v is None or (len(v) < full and not any(_holds(v, m) for m in matched4))]
    else:
        puts = [(k, v + s4 if v else s4) for k, v in zip(found.keys, found.values, strict=True)
                if v is None or len(v) < full]
    return puts, b"".join([k for k, _ in puts])


def _holds(value: bytes, s4: bytes) -> bool:
    """Whether the posting list ``value`` has the member ``s4`` (at a 4-byte boundary)."""
    i = value.find(s4)
    while i >= 0:
        if i % _SEQ_BYTES == 0:
            return True
        i = value.find(s4, i + 1)
    return False


def removal_writes(family, seq: int, added: bytes | None) -> list[tuple[bytes, bytes | None]]:
    """The posting lists without ``seq`` (``None``: delete the key), for the anchors it ``added``."""
    if not added:
        return []
    keys = [added[i:i + ANCHOR_BYTES] for i in range(0, len(added), ANCHOR_BYTES)]
    s4 = seq.to_bytes(_SEQ_BYTES, "big")
    out: list[tuple[bytes, bytes | None]] = []
    for key, v in zip(keys, family.get(keys), strict=True):
        if not v:
            continue
        kept = b"".join(v[i:i + _SEQ_BYTES] for i in range(0, len(v), _SEQ_BYTES) if v[i:i + _SEQ_BYTES] != s4)
        out.append((key, kept or None))
    return out


def anchor_containment(shared: int, usable: int, stored_anchors: int) -> tuple[float, float]:
    """(new inside stored, stored inside new) measured on anchors, 4 decimals as reported.

    One anchor's worth of doubt: ``shared / (n + 1)``, so a few anchors cannot make a containment
    on their own (7 of 8 shared gives 0.78: a 132-shingle story whose true containment is 0.74
    was otherwise called a copy on the dev stream), while 9 of 9 gives 0.9.
    """
    return (round(shared / (usable + 1), 4) if usable else 0.0,
            round(min(1.0, shared / (stored_anchors + 1)), 4) if stored_anchors else 0.0)
