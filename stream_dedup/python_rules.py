"""The text rules of a verification in Python: the reference of the compiled rules.

:meth:`Deduplicator._verify <stream_dedup.engine.Deduplicator._verify>` runs the rules of the
engine's docstring in one kernel (:mod:`stream_dedup.candidate_rules`). This is the same
verification written out in Python, step by step: the candidates screened in one compiled pass
over their record heads (:meth:`_screen`, whose own reference is :meth:`_may_pass`), then each
rule applied to the candidates that may pass, the containment of :meth:`_containment` with its
rounding as reported, and the look-alike check in the order of the candidates' scores. The
engine runs it where the kernel cannot answer exactly (a rounding at a half), and the tests
compare the two on random records at every threshold and on the streams.

:class:`PythonRules` is a part of :class:`~stream_dedup.engine.Deduplicator` (it reads the
engine's configuration, index and tables), kept apart so that the engine holds the decision's
flow and this module the rules' reference.
"""

from __future__ import annotations

from functools import partial
from operator import itemgetter
from typing import TYPE_CHECKING

import numpy as np

from . import passages, rewrite
from .decision import METHODS, Decision
from .identity import agreement
from .index_record import _record_anchors
from .minhash import containment

if TYPE_CHECKING:
    from .batch import BatchView
    from .config import EngineConfig
    from .fingerprint import Fingerprint
    from .index import Index


class PythonRules:
    """The verification in Python (see the module doc); mixed into the engine."""

    config: EngineConfig
    index: Index
    _short_range: tuple[int, int]
    _jaccard_of: list[float]
    _jaccard4_of: list[float]
    _jaccard_array: np.ndarray
    _screen_rules: np.ndarray  # (and is_short_text: the engine's)

    def _verify_reference(self, view: BatchView, article_id: str, fp: Fingerprint, sig: np.ndarray, seqs: list[int],
                          passage: passages.PassageLookup | None = None, matched: set[int] | None = None,
                          seq_array: np.ndarray | None = None) -> Decision:
        """:meth:`_verify` in Python (the compiled rules' reference; see :mod:`stream_dedup.candidate_rules`;
        ``seq_array``, the candidates as an array, is not used).

        Short items have ~10 candidates each, most of them far from every threshold (a shared stock
        lead): the text rules run only on the candidates :meth:`_may_pass` keeps, and the identity
        check only on the passing candidates in order of their keys until one is not a look-alike.
        The result is the same as checking every candidate: the best is the highest key of the
        candidates that pass and are not look-alikes, the template the highest key of the
        look-alikes, and the template counts only when there is no best."""
        if not seqs:
            return Decision(id=article_id, type="new")
        c = self.config
        n = fp.n_shingles
        found, raw, agree_list, stored_ns, hams, may_pass = self._screen(view, seqs, sig, fp.simhash, n)
        if not found:
            return Decision(id=article_id, type="new", candidates=len(seqs))
        new_short = self.is_short_text(n)
        short_low, short_high = self._short_range  # is_short_text(stored_n) is short_low < stored_n < short_high
        check_identity = c.identity_threshold > 0 and fp.identity.shape[0] >= c.identity_min_tokens
        # decisions compare the estimates as they are reported (4 decimals): the b-bit correction
        # (1.5e-5 at 16 bits) then leaves an estimate of exactly 64/128 at 0.5, as it was with 32 bits
        jaccard_of = self._jaccard_of  # bbit_jaccard(agree, c.num_perm, SIGNATURE_BITS), looked up
        shared_of = passage.shared if passage is not None else {}
        if shared_of:  # and the candidates sharing anchors (containment measured on them can be anything)
            may_pass = sorted(set(may_pass).union(i for i, s in enumerate(found) if shared_of.get(s, 0)))
        # the share of the new article's passages that are boilerplate (anchors held by many articles)
        common = 1.0 - passage.usable / fp.anchors.shape[0] if passage is not None else 0.0
        # The loop below runs ~10 times a verification on short items (33k times on the short stream,
        # most candidates in the rewrite band or above the Jaccard threshold): the config values are
        # locals, the rounded estimate a table lookup, and the hits tuple built once per passing
        # candidate, |A∩B| computed once for both containments (short stream, in process: _verify 239 -> 219 ms).
        jaccard4_of = self._jaccard4_of
        jaccard_threshold, simhash_k, simhash_min_jaccard = c.jaccard_threshold, c.simhash_k, c.simhash_min_jaccard
        short_jaccard = c.short_text_jaccard if c.short_text_jaccard < 1.0 else None
        rewrite_low = c.rewrite_jaccard
        words, identity_of, words_of = fp.words, self.index.identity, self.index.words
        containment_of = self._containment
        passing: list[tuple] = []  # (key, i, j, cont, ham, hits, direction) of the candidates that pass
        for i in may_pass:
            j_raw, stored_n, ham = jaccard_of[agree_list[i]], stored_ns[i], hams[i]
            j = jaccard4_of[agree_list[i]]  # round(j_raw, 4)
            if new_short or short_low < stored_n < short_high:  # short texts: a MinHash match of its own threshold only
                hits, cont, direction = (short_jaccard is not None and j >= short_jaccard, False, False, False), \
                    round(containment(j_raw, n, stored_n), 4), None
                if not hits[0]:
                    continue
            else:
                shared = shared_of.get(found[i], 0) if shared_of else 0
                anchored = passages.anchor_containment(shared, passage.usable, _record_anchors(raw[i], c.num_perm)) \
                    if shared else None
                cont, direction = containment_of(j_raw, n, stored_n, anchored, common)
                by_jaccard = j >= jaccard_threshold
                by_simhash = ham <= simhash_k and j >= simhash_min_jaccard
                if by_jaccard or direction is not None or by_simhash:  # minhash, containment, simhash
                    hits = (by_jaccard, direction is not None, by_simhash, False)
                elif rewrite.in_band(j, rewrite_low, jaccard_threshold) \
                        and rewrite.passes(j, fp.identity, partial(identity_of, raw[i]), n, stored_n,
                                           rewrite_low, jaccard_threshold, c.rewrite_min_pairs,
                                           words, words_of(raw[i]), c.rewrite_word_jaccard):
                    hits = (False, False, False, True)
                else:
                    continue
            key = (max(j, cont if hits[1] else 0.0), -found[i])  # best score, then the earliest
            passing.append((key, i, j, cont, ham, hits, direction))
        if matched is not None:
            matched.update(found[p[1]] for p in passing)
        passing.sort(key=itemgetter(0), reverse=True)  # keys differ (the seq is in them)
        best: tuple | None = None
        template: tuple | None = None
        for candidate in passing:
            if check_identity:
                i = candidate[1]
                agreed = agreement(fp.identity, self.index.identity(raw[i]), c.identity_min_tokens)
                if agreed is not None and agreed < c.identity_threshold:  # a look-alike: other figures, names
                    if template is None:
                        template = (i, candidate[2], agreed)
                    continue
            best = candidate
            break
        if best is None:
            if template is not None:
                i, j, agreed = template
                return Decision(id=article_id, type="new", similarity=round(j, 4), candidates=len(found),
                                template_of=self.index.ids(raw[i])[0], identity_overlap=round(agreed, 4))
            return Decision(id=article_id, type="new", candidates=len(found))
        _, i, j, cont, ham, hits, direction = best
        methods = tuple(m for m, hit in zip(METHODS[1:], hits, strict=True) if hit)
        matched_id, root_id = self.index.ids(raw[i])
        return Decision(id=article_id, type="duplicate-of", duplicate_of=root_id, similarity=j,
                        method=methods[0], hamming_distance=ham, containment=cont,
                        matched_id=matched_id, methods=methods, candidates=len(found), direction=direction)


    def _screen(self, view: BatchView, seqs: list[int], sig: np.ndarray, simhash: int, n: int
                ) -> tuple[list[int], list[bytes], list[int], list[int], list[int], list[int]]:
        """The candidates ``seqs`` screened in one compiled pass (:meth:`BatchView.screen`): the seqs
        still indexed, their raw records, per candidate the agreeing signature rows, shingle count and
        SimHash distance, and the indices :meth:`_may_pass` keeps (the kernel computes the same)."""
        return view.screen(seqs, sig, simhash, n, self._jaccard_array, self._screen_rules)


    def _may_pass(self, jaccards: list[float], n: int, stored_ns: list[int], hams: list[int]) -> list[int]:
        """The candidates (indices) a text rule of :meth:`_verify` may pass: a superset of those it
        passes, so that the rules themselves run on these only.

        Each rule's necessary condition on the raw Jaccard estimate, the shingle counts and the
        Hamming distance, with a margin of :data:`MAY_PASS_MARGIN` (the rules compare estimates
        rounded to 4 decimals): the Jaccard of the minhash, short-text and SimHash rules; the
        rewrite rule's Jaccard band and lengths within ``rewrite.MIN_LENGTH``; for containment,
        ``|A∩B| / min(|A|, |B|)`` (the larger of the two directions; discounting boilerplate only
        lowers it) at least the threshold. Candidates sharing passage anchors (containment measured
        on anchors) are the caller's to add.

        The reference of the compiled screen (:func:`~stream_dedup.kernels.screen_candidates`, the
        thresholds of :meth:`_rules`), which :meth:`_verify` uses: the kernel does these float
        operations in the same order, and ``tests/engine/test_engine.py`` compares the two.
        """
        any_rule, simhash_rule, k, contained, rewrite_rule, length = self._screen_rules.tolist()  # (_rules)
        may = []
        for i, (j, stored_n, ham) in enumerate(zip(jaccards, stored_ns, hams, strict=True)):
            if j >= any_rule or (ham <= k and j >= simhash_rule):
                may.append(i)
                continue
            shorter, longer = (n, stored_n) if n <= stored_n else (stored_n, n)
            # |A∩B| = j (|A| + |B|) / (1 + j) (minhash.containment), over the shorter side, multiplied out
            # (x or 1: max(x, 1) of a count, without the call)
            if j * (n + stored_n) >= contained * (shorter or 1) * (1.0 + j) \
                    or (j >= rewrite_rule and shorter >= length * (longer or 1)):
                may.append(i)
        return may


    def _containment(self, j: float, n: int, stored_n: int,
                     anchored: tuple[float, float] | None = None, common: float = 0.0) -> tuple[float, str | None]:
        """(containment, direction) of the best containment match in either direction, or
        (|A∩B|/|A|, None) when neither reaches ``containment_threshold``.

        ``new_in_earlier``: |A∩B|/|A| of the new article A in the earlier B (a trim, an excerpt);
        ``earlier_in_new``: |A∩B|/|B| (the earlier article inside a longer page), with
        ``containment_both_ways``. The contained side needs at least ``min_containment_shingles``
        shingles (new in earlier) or ``min_contained_earlier_shingles`` (earlier in new: a short
        earlier text, such as a site blurb stored as an article, recurs inside many pages).
        ``anchored``: both containments measured on passage anchors, used where larger. ``common``:
        the share of the new article's anchors that are boilerplate; the MinHash estimate of
        new-in-earlier counts the rest only, as if all boilerplate were shared: (C - common) / (1 - common).
        """
        c = self.config
        # rounded as reported (4 decimals) before the thresholds, like the Jaccard estimate;
        # |A∩B| (minhash.containment, inlined: ~10 calls a verification on short items) is the same
        # float in both directions, j (|A| + |B|) / (1 + j)
        inter = j * (n + stored_n) / (1.0 + j)
        new_in_earlier = min(1.0, inter / n) if n > 0 else 0.0
        if common > 0.0:
            new_in_earlier = max(0.0, new_in_earlier - common) / (1.0 - common) if common < 1.0 else 0.0
        new_in_earlier = round(new_in_earlier, 4)
        if anchored is not None:
            new_in_earlier = max(new_in_earlier, anchored[0])
        best, direction = new_in_earlier, None
        threshold = c.containment_threshold
        if n >= c.min_containment_shingles and new_in_earlier >= threshold:
            direction = "new_in_earlier"
        if c.containment_both_ways and stored_n >= c.min_containment_shingles \
                and stored_n >= c.min_contained_earlier_shingles:
            earlier_in_new = round(min(1.0, inter / stored_n), 4) if stored_n > 0 else 0.0
            if anchored is not None:
                earlier_in_new = max(earlier_in_new, anchored[1])
            if earlier_in_new >= threshold and (direction is None or earlier_in_new > best):
                best, direction = earlier_in_new, "earlier_in_new"
        return best, direction
