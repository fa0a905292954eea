"""The text rules of a verification, compiled: every candidate of an article checked in one call.

:meth:`Deduplicator._verify <stream_dedup.engine.Deduplicator._verify>` asks, for each candidate
the LSH buckets, SimHash tables and passage lists found, which rule of the engine's docstring
passes it (``minhash``, ``containment`` either way, ``simhash``, ``rewrite``, the short-text
rule), orders those that pass by their score (the higher of the Jaccard and the containment that
passed, earliest article on ties) and takes the first that is not a look-alike (identity tokens
overlapping less than ``identity_threshold``; the first look-alike is the template). On short
items that is ~10 candidates an article, most of them near a threshold, and done in Python it was
a third of a decision. :func:`verify_candidates` does all of it in one pass over the candidates'
whole records (:mod:`stream_dedup.index_record`: the SimHash, set size, signature, identity
sketch, content-word bitmap and passage-anchor count are read where the record keeps them).

Its reference is the Python loop, :meth:`PythonRules._verify_reference
<stream_dedup.python_rules.PythonRules._verify_reference>`: the kernel does the same float operations
in the same order, so it returns the same floats, and ``tests/engine/test_candidate_rules.py``
compares the two candidate by candidate (random records at every threshold) and decision by
decision on the streams. One operation has no exact twin in numba: Python's ``round(x, 4)``,
which rounds the exact binary value of ``x`` correctly. The kernel computes ``x * 10**4`` (off by
at most ~1e-12 for ``x <= 1``), so it rounds the same way except within that distance of a half;
there it says so (``UNCERTAIN``) and the caller runs the Python loop for that article instead.
``k / 10**4`` is then the same float as Python's (IEEE division is correctly rounded).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from . import rewrite
from .config import EngineConfig
from .identity import IDENTITY_K, MIN_NUMBER_CONTEXTS
from .jit import compiling, inline, kernel, trusted

if TYPE_CHECKING:
    from .record_store import RecordStore

if compiling():
    from .identity import _kind_counts  # (numba calls the kernel itself: compiled into this one)
    from .kernels import may_pass, popcount, record_head
    from .record_store import locate

# params: the configuration's thresholds, as :func:`rule_params` lays them out
P_JACCARD, P_SIMHASH_K, P_SIMHASH_JACCARD, P_SHORT_JACCARD, P_REWRITE_LOW, P_REWRITE_PAIRS, P_REWRITE_WORDS, \
    P_CONTAINED, P_MIN_CONTAINMENT, P_MIN_EARLIER, P_BOTH_WAYS, P_IDENTITY, P_IDENTITY_TOKENS, P_SHORT_LOW, \
    P_SHORT_HIGH, P_MIN_LENGTH, P_MIN_SHARE, P_MAX_FILL, P_NUMBER_CONTEXTS, P_IDENTITY_K = range(20)
# per candidate (rows of the caller's float64 output array: O_START and O_KEY the kernel's own)
O_HITS, O_DIRECTION, O_HAMMING, O_JACCARD, O_CONTAINMENT, O_START, O_KEY = range(7)
HIT_MINHASH, HIT_CONTAINMENT, HIT_SIMHASH, HIT_REWRITE = 1, 2, 4, 8  # (METHODS[1:] in order)
NEW_IN_EARLIER, EARLIER_IN_NEW = 1, 2
# the summary (float64[4])
S_BEST, S_TEMPLATE, S_AGREED, S_UNCERTAIN = range(4)
UNCERTAIN = 1.0
_HEAD = 37  # bytes before the signature: first seen, SimHash, set size, flags, exact hash (index_record._RECORD)


@inline
def _round4(x, summary):
    """``round(x, 4)`` for ``0 <= x <= 1`` as Python gives it; within 1e-9 of a half (where the
    product's rounding error could decide) flags ``summary`` uncertain (see the module doc)."""
    y = x * 10000.0
    k = np.floor(y)
    frac = y - k
    if abs(frac - 0.5) < 1e-9:
        summary[S_UNCERTAIN] = UNCERTAIN
    if frac > 0.5:
        k += 1.0
    return k / 10000.0


@inline
def _u16(buf, at):
    return (np.int64(buf[at]) << 8) | np.int64(buf[at + 1])


@inline
def _stored_identity(recs, at, k):
    """The identity sketch (big-endian uint32 in the record) at ``at``, as native uint32."""
    out = np.empty(k, dtype=np.uint32)
    for t in range(k):
        p = at + 4 * t
        out[t] = (np.uint32(recs[p]) << np.uint32(24)) | (np.uint32(recs[p + 1]) << np.uint32(16)) \
            | (np.uint32(recs[p + 2]) << np.uint32(8)) | np.uint32(recs[p + 3])
    return out


@inline
def _agreement(a, b, min_contexts, number_contexts, k):
    """:func:`stream_dedup.identity.agreement`; -1.0 where it gives None."""
    cn, sn = _kind_counts(a, b, 0x8000, k)
    cw, sw = _kind_counts(a, b, 0, k)
    share = -1.0
    if cn + cw >= min_contexts:
        share = (sn + sw) / (cn + cw)
    if cn >= number_contexts:
        numbers = sn / cn
        if share < 0.0 or numbers < share:
            share = numbers
    return share


@inline
def _shared_pairs(a, b):
    """Values held by both sorted, distinct uint32 arrays (:func:`stream_dedup.rewrite.shared_pairs`)."""
    i = j = shared = 0
    while i < a.shape[0] and j < b.shape[0]:
        if a[i] == b[j]:
            shared += 1
            i += 1
            j += 1
        elif a[i] < b[j]:
            i += 1
        else:
            j += 1
    return shared


@inline
def _word_jaccard(words_a, recs, at, w, counts, max_fill):
    """:func:`stream_dedup.rewrite.word_jaccard` of ``words_a`` and the ``w`` bytes at ``at``; -1.0 for None."""
    if words_a.shape[0] == 0 or words_a.shape[0] != w:
        return -1.0
    m = 8 * w
    na = nb = nu = 0
    t = 0
    while t < w:  # 8 bytes at a time (the order of the bytes in a word does not change a count)
        x = y = np.uint64(0)
        for b in range(min(8, w - t)):
            x = (x << np.uint64(8)) | np.uint64(words_a[t + b])
            y = (y << np.uint64(8)) | np.uint64(recs[at + t + b])
        na += np.int64(popcount(x))
        nb += np.int64(popcount(y))
        nu += np.int64(popcount(x | y))
        t += 8
    if na == 0 or nb == 0 or max(na, nb) > max_fill * m:
        return -1.0
    ca, cb, cu = counts[na], counts[nb], counts[nu]
    return max(0.0, min(1.0, (ca + cb - cu) / cu))


@kernel
def verify_candidates(recs, starts, lengths, query, simhash, n, jaccard_of, jaccard4_of, rules, params,
                      shared, usable, common, words_a, counts, identity_a, out, summary, passed):
    """The rules of the engine on the ``m`` candidates whose whole records are in ``recs`` (record
    ``i`` at ``starts[i]``, ``lengths[i]`` bytes; in ascending seq order) for the new article: its stored
    signature's rows ``query`` (int64), SimHash ``simhash``, set size ``n``, content-word bitmap
    ``words_a`` (uint8, may be empty) and identity sketch ``identity_a`` (sorted uint32).
    ``jaccard_of`` / ``jaccard4_of``: the estimate of each count of agreeing rows, raw and rounded;
    ``rules``: the screen's thresholds (:meth:`Deduplicator._rules`); ``params``:
    :func:`rule_params`; ``counts``: the linear-counting table of :func:`stream_dedup.rewrite._counts`;
    ``shared``: the passage anchors each candidate shares with the article (empty: none),
    ``usable`` the article's usable anchors and ``common`` the share of them that are boilerplate.

    Writes, per candidate ``i``, ``out[O_*, i]`` (the rules passed as ``HIT_*`` bits, 0 for none; the
    containment direction; the Hamming distance; the rounded Jaccard and containment, as
    reported), and ``summary`` (the best candidate's index or -1, the template's or -1, the
    template's identity agreement, ``UNCERTAIN`` or 0), and the indices of the candidates that
    pass a rule (look-alikes too), ascending, in ``passed`` (int64): all the caller's, kept from
    call to call (no array is made per call). Returns how many pass.
    """
    m = lengths.shape[0]
    summary[S_BEST] = -1.0
    summary[S_TEMPLATE] = -1.0
    summary[S_AGREED] = 0.0
    summary[S_UNCERTAIN] = 0.0
    rows = query.shape[0]
    jaccard_threshold, simhash_k, simhash_min = params[P_JACCARD], params[P_SIMHASH_K], params[P_SIMHASH_JACCARD]
    short_jaccard, rewrite_low = params[P_SHORT_JACCARD], params[P_REWRITE_LOW]
    threshold = params[P_CONTAINED]
    min_containment, min_earlier = params[P_MIN_CONTAINMENT], params[P_MIN_EARLIER]
    short_low, short_high = params[P_SHORT_LOW], params[P_SHORT_HIGH]
    new_short = short_low < n < short_high
    anchors = shared.shape[0] > 0
    passing = 0
    for i in range(m):
        here = starts[i]
        out[O_START, i] = here
        out[O_KEY, i] = -1.0  # the sort key's score of a passing candidate
        out[O_HITS, i] = 0.0
        s, stored_n = record_head(recs, here)
        ham = np.int64(popcount(s ^ simhash))
        c = 0
        p = here + _HEAD
        for r in range(rows):  # (big-endian rows: no branch)
            c += ((np.int64(recs[p]) << 8) | np.int64(recs[p + 1])) == query[r]
            p += 2
        j_raw = jaccard_of[c]
        shared_i = shared[i] if anchors else 0
        # the screen: no rule can pass the others (nor anchors shared)
        if shared_i == 0 and not may_pass(j_raw, ham, n, stored_n, rules):
            continue
        j = jaccard4_of[c]
        hits = np.int64(0)
        direction = np.int64(0)
        inter = j_raw * float(n + stored_n) / (1.0 + j_raw)
        if new_short or short_low < stored_n < short_high:  # short texts: a MinHash match of its own threshold
            cont = _round4(min(1.0, inter / n), summary) if n > 0 else 0.0
            if j >= short_jaccard:
                hits = np.int64(HIT_MINHASH)
        else:
            lens_at = here + _HEAD + 2 * rows
            id_len, root_len, k_id = _u16(recs, lens_at), _u16(recs, lens_at + 2), _u16(recs, lens_at + 4)
            stored_anchors, w = _u16(recs, lens_at + 6), np.int64(recs[lens_at + 8])
            anchored = shared_i > 0
            a_new = a_old = 0.0
            if anchored:  # passages.anchor_containment
                a_new = _round4(shared_i / (usable + 1), summary) if usable else 0.0
                a_old = _round4(min(1.0, shared_i / (stored_anchors + 1)), summary) if stored_anchors else 0.0
            # Deduplicator._containment
            new_in_earlier = min(1.0, inter / n) if n > 0 else 0.0
            if common > 0.0:
                new_in_earlier = max(0.0, new_in_earlier - common) / (1.0 - common) if common < 1.0 else 0.0
            new_in_earlier = _round4(new_in_earlier, summary)
            if anchored:
                new_in_earlier = max(new_in_earlier, a_new)
            cont = new_in_earlier
            if n >= min_containment and new_in_earlier >= threshold:
                direction = np.int64(NEW_IN_EARLIER)
            if params[P_BOTH_WAYS] != 0.0 and stored_n >= min_containment and stored_n >= min_earlier:
                earlier_in_new = _round4(min(1.0, inter / stored_n), summary) if stored_n > 0 else 0.0
                if anchored:
                    earlier_in_new = max(earlier_in_new, a_old)
                if earlier_in_new >= threshold and (direction == 0 or earlier_in_new > cont):
                    cont, direction = earlier_in_new, np.int64(EARLIER_IN_NEW)
            if j >= jaccard_threshold:
                hits |= HIT_MINHASH
            if direction != 0:
                hits |= HIT_CONTAINMENT
            if ham <= simhash_k and j >= simhash_min:
                hits |= HIT_SIMHASH
            if hits == 0 and 0.0 < rewrite_low <= j < jaccard_threshold \
                    and min(n, stored_n) / max(n, stored_n, 1) >= params[P_MIN_LENGTH]:  # rewrite.passes
                identity_at = lens_at + 9 + id_len + root_len
                wj = -1.0
                if params[P_REWRITE_WORDS] > 0.0:
                    wj = _word_jaccard(words_a, recs, identity_at + 4 * k_id, w, counts, params[P_MAX_FILL])
                if wj >= 0.0:
                    rewritten = wj >= params[P_REWRITE_WORDS]
                else:
                    stored_ids = _stored_identity(recs, identity_at, k_id)
                    both = _shared_pairs(identity_a, stored_ids)
                    smaller = min(identity_a.shape[0], k_id)
                    share = both / smaller if smaller else 0.0
                    rewritten = both >= params[P_REWRITE_PAIRS] and share >= params[P_MIN_SHARE]
                if rewritten:
                    hits = np.int64(HIT_REWRITE)
        if hits == 0:
            continue
        out[O_HITS, i], out[O_DIRECTION, i], out[O_HAMMING, i] = hits, direction, ham
        out[O_JACCARD, i], out[O_CONTAINMENT, i] = j, cont
        out[O_KEY, i] = max(j, cont if hits & HIT_CONTAINMENT else 0.0)
        passed[passing] = i
        passing += 1
    # the passing candidates by score, earliest first on ties: the first that is not a look-alike
    check_identity = params[P_IDENTITY] > 0.0 and identity_a.shape[0] >= params[P_IDENTITY_TOKENS]
    for _ in range(passing):
        top = -1
        for i in range(m):  # (seqs ascend: the first of equal scores is the earliest)
            if out[O_KEY, i] >= 0.0 and (top < 0 or out[O_KEY, i] > out[O_KEY, top]):
                top = i
        out[O_KEY, top] = -1.0
        if check_identity:
            lens_at = np.int64(out[O_START, top]) + _HEAD + 2 * rows
            k_id = _u16(recs, lens_at + 4)
            stored_ids = _stored_identity(recs, lens_at + 9 + _u16(recs, lens_at) + _u16(recs, lens_at + 2), k_id)
            agreed = _agreement(identity_a, stored_ids, params[P_IDENTITY_TOKENS], params[P_NUMBER_CONTEXTS],
                                np.int64(params[P_IDENTITY_K]))
            if agreed >= 0.0 and agreed < params[P_IDENTITY]:  # a look-alike: other figures, names
                if summary[S_TEMPLATE] < 0.0:
                    summary[S_TEMPLATE] = top
                    summary[S_AGREED] = agreed
                continue
        summary[S_BEST] = top
        break
    return passing


@kernel
def verify_stored(buf, keys, vals, seqs, starts, lengths, query, simhash, n, jaccard_of, jaccard4_of, rules, params,
                  shared, usable, common, words_a, counts, identity_a, out, summary, passed):
    """:func:`verify_candidates` on the candidates ``seqs`` whose records a
    :class:`~stream_dedup.record_store.RecordStore` holds (``buf``, ``keys``, ``vals``: its arrays;
    ``starts``, ``lengths``: the caller's, at least as long as ``seqs``): the records read where
    they are, in one call. Returns ``-1 - k`` if ``k`` of them are not held (nothing verified:
    ``starts[i] = -1`` says which), else what :func:`verify_candidates` returns."""
    m = seqs.shape[0]
    missing = locate(buf, keys, vals, seqs, starts, lengths)
    if missing:
        return -1 - missing
    return verify_candidates(buf, starts[:m], lengths[:m], query, simhash, n, jaccard_of, jaccard4_of, rules, params,
                             shared, usable, common, words_a, counts, identity_a, out, summary, passed)


def rule_params(c: EngineConfig, short_range: tuple[int, int]) -> np.ndarray:
    """The configuration's thresholds as :func:`verify_candidates` reads them (``P_*``);
    ``short_range``: :attr:`Deduplicator._short_range`."""
    values = {P_JACCARD: c.jaccard_threshold, P_SIMHASH_K: c.simhash_k, P_SIMHASH_JACCARD: c.simhash_min_jaccard,
              P_SHORT_JACCARD: c.short_text_jaccard if c.short_text_jaccard < 1.0 else 2.0,  # 2: no estimate reaches it
              P_REWRITE_LOW: c.rewrite_jaccard, P_REWRITE_PAIRS: c.rewrite_min_pairs,
              P_REWRITE_WORDS: c.rewrite_word_jaccard, P_CONTAINED: c.containment_threshold,
              P_MIN_CONTAINMENT: c.min_containment_shingles, P_MIN_EARLIER: c.min_contained_earlier_shingles,
              P_BOTH_WAYS: 1.0 if c.containment_both_ways else 0.0, P_IDENTITY: c.identity_threshold,
              P_IDENTITY_TOKENS: c.identity_min_tokens, P_SHORT_LOW: short_range[0], P_SHORT_HIGH: short_range[1],
              P_MIN_LENGTH: rewrite.MIN_LENGTH, P_MIN_SHARE: rewrite.MIN_SHARE, P_MAX_FILL: rewrite.MAX_FILL,
              P_NUMBER_CONTEXTS: MIN_NUMBER_CONTEXTS, P_IDENTITY_K: IDENTITY_K}
    return np.array([float(values[i]) for i in range(len(values))], dtype=np.float64)


class CompiledRules:
    """:func:`verify_candidates` with the arrays fixed by the configuration made once, and its
    output arrays kept (one engine decides one article at a time)."""

    def __init__(self, c: EngineConfig, short_range: tuple[int, int], jaccard_of: np.ndarray,
                 jaccard4_of: list[float], rules: np.ndarray) -> None:
        self.params = rule_params(c, short_range)
        self.jaccard_of = jaccard_of  # (the engine's float64 array, as the screen reads it)
        self.jaccard4_of = np.array(jaccard4_of, dtype=np.float64)
        self.rules = rules
        self.counts = np.array(rewrite._counts(rewrite.WORD_BITS), dtype=np.float64)
        self.out = np.zeros((7, 2048), dtype=np.float64)
        self.summary = np.zeros(4, dtype=np.float64)
        self.passed = np.zeros(2048, dtype=np.int64)
        self.passing = 0  # how many of the last call's candidates pass (their indices: passed[:passing])
        self._none = np.zeros(0, dtype=np.int64)
        self._no_words = np.zeros(0, dtype=np.uint8)
        self.starts = np.zeros(2048, dtype=np.int64)  # where run_stored found each candidate's record
        self.lengths = np.zeros(2048, dtype=np.int64)

    def _inputs(self, m: int, words: bytes, shared: list[int] | None) -> tuple[np.ndarray, np.ndarray] | None:
        """The article's passage anchors shared by each candidate and its content-word bitmap as the
        kernel reads them, the output arrays made to hold ``m`` candidates; None where only the
        Python rules can answer (a bitmap of another size)."""
        if words and len(words) != rewrite.WORD_BITS // 8:
            return None
        if m > self.out.shape[1]:
            self.out = np.zeros((7, 2 * m), dtype=np.float64)
            self.passed = np.zeros(2 * m, dtype=np.int64)
        return (np.array(shared, dtype=np.int64) if shared else self._none,
                np.frombuffer(words, dtype=np.uint8) if words else self._no_words)

    def run(self, raw: list[bytes], query: np.ndarray, simhash: int, n: int, words: bytes, identity: np.ndarray,
            shared: list[int] | None = None, usable: int = 0, common: float = 0.0) -> np.ndarray | None:
        """The kernel on the candidates whose raw records are ``raw`` (ascending seqs) for an
        article (its signature's rows ``query``, int64): its per-candidate output (``O_*`` rows,
        ``m`` columns: read before the next call), :attr:`summary` and :attr:`passed`; None where
        only the Python rules can answer (a rounding at a half, a content-word bitmap of another size).
        ``shared``: the passage anchors each candidate shares, if looked up."""
        m = len(raw)
        inputs = self._inputs(m, words, shared)
        if inputs is None:
            return None
        anchors, words_a = inputs
        recs = np.frombuffer(b"".join(raw), dtype=np.uint8)
        lengths = np.fromiter(map(len, raw), np.int64, m)
        starts = np.zeros(m, dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        self.passing = _verify(recs, starts, lengths, query, np.uint64(simhash), n, self.jaccard_of, self.jaccard4_of,
                               self.rules, self.params, anchors, usable, float(common), words_a, self.counts,
                               identity, self.out, self.summary, self.passed)
        return None if self.summary[S_UNCERTAIN] else self.out

    def run_stored(self, store: RecordStore, seqs: np.ndarray, query: np.ndarray, simhash: int, n: int, words: bytes,
                   identity: np.ndarray, shared: list[int] | None = None, usable: int = 0,
                   common: float = 0.0) -> np.ndarray | int | None:
        """:meth:`run` on the candidates ``seqs`` (uint32, ascending) with their records read where
        ``store`` holds them (:func:`verify_stored`): the output as :meth:`run` gives it, or the
        number of candidates ``store`` does not hold (an int: nothing verified; :attr:`starts`
        ``[i] = -1`` for those)."""
        m = seqs.shape[0]
        inputs = self._inputs(m, words, shared)
        if inputs is None:
            return None
        anchors, words_a = inputs
        if m > self.starts.shape[0]:
            self.starts = np.zeros(2 * m, dtype=np.int64)
            self.lengths = np.zeros(2 * m, dtype=np.int64)
        passing = _verify_stored(store.buf, store.keys, store.vals, seqs, self.starts, self.lengths, query,
                                 np.uint64(simhash), n, self.jaccard_of, self.jaccard4_of, self.rules, self.params,
                                 anchors, usable, float(common), words_a, self.counts, identity, self.out, self.summary,
                                 self.passed)
        if passing < 0:
            self.passing = 0
            return -1 - passing
        self.passing = passing
        return None if self.summary[S_UNCERTAIN] else self.out

    def record(self, store: RecordStore, i: int) -> memoryview:
        """The record of candidate ``i`` of the last :meth:`run_stored`: a view of where ``store``
        holds it (read before the store's next put)."""
        at = int(self.starts[i])
        return store.view[at:at + int(self.lengths[i])]


_verify = trusted(verify_candidates)  # every array made above (jit.trusted)
_verify_stored = trusted(verify_stored)
