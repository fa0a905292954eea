"""Why is B (not) a duplicate of A? Every measure the decision rules read, for one pair.

:func:`explain` runs the real engine on a fresh, temporary index (A first, then B), so the
``decision`` it reports is exactly what ``dedup`` would say about B after A, and adds the measures
of the pair: estimated Jaccard, containment in both directions (estimated from MinHash and measured
on passage anchors, :mod:`stream_dedup.passages`), SimHash distance, the short-text
status, the identity agreement, the rewrite rule's evidence (:mod:`stream_dedup.rewrite`), and which rules pass at the given configuration.
"""

from __future__ import annotations

import tempfile
from typing import Any

from .config import EngineConfig
from .engine import Deduplicator
from .identity import agreement
from .minhash import containment
from .passages import anchor_containment
from .record import Article
from .rewrite import MIN_LENGTH, MIN_SHARE, evidence, in_band, word_jaccard
from .simhash import hamming


def explain(config: EngineConfig, a: Article, b: Article) -> dict[str, Any]:
    """The decision on ``b`` after ``a``, and the pair's measures (a JSON-ready dict)."""
    c = config
    with tempfile.TemporaryDirectory() as tmp, Deduplicator(c, tmp) as dedup:
        fa, fb = dedup.fingerprint(a), dedup.fingerprint(b)
        dedup.decide(a.id, fa, now=0.0)
        decision = dedup.decide(b.id, fb, now=1.0).to_event()
        short = {a.id: dedup.is_short_text(fa.n_shingles), b.id: dedup.is_short_text(fb.n_shingles)}
    j = float((fa.minhash == fb.minhash).mean())
    b_in_a = containment(j, fb.n_shingles, fa.n_shingles)
    a_in_b = containment(j, fa.n_shingles, fb.n_shingles)
    shared = len(set(fa.anchors.tolist()) & set(fb.anchors.tolist()))
    anchored = anchor_containment(shared, fb.anchors.shape[0], fa.anchors.shape[0]) \
        if shared >= c.passage_min_shared else (0.0, 0.0)
    b_in_a, a_in_b = max(b_in_a, anchored[0]), max(a_in_b, anchored[1])
    ham = hamming(fa.simhash, fb.simhash)
    agreed = agreement(fb.identity, fa.identity, c.identity_min_tokens)
    is_short = any(short.values())
    shared_pairs, pair_share, length = evidence(fb.identity, fa.identity, fb.n_shingles, fa.n_shingles)
    words = word_jaccard(fb.words, fa.words) if c.rewrite_word_jaccard > 0 else None
    second = words >= c.rewrite_word_jaccard if words is not None \
        else shared_pairs >= c.rewrite_min_pairs and pair_share >= MIN_SHARE
    rules = {
        "exact": fa.exact == fb.exact,
        "minhash": j >= (c.short_text_jaccard if is_short else c.jaccard_threshold)
        and not (is_short and c.short_text_jaccard >= 1.0),
        "containment new_in_earlier": not is_short and fb.n_shingles >= c.min_containment_shingles
        and b_in_a >= c.containment_threshold,
        "containment earlier_in_new": not is_short and bool(c.containment_both_ways)
        and fa.n_shingles >= max(c.min_containment_shingles, c.min_contained_earlier_shingles)
        and a_in_b >= c.containment_threshold,
        "simhash": not is_short and ham <= c.simhash_k and j >= c.simhash_min_jaccard,
        "rewrite": not is_short and in_band(j, c.rewrite_jaccard, c.jaccard_threshold)
        and second and length >= MIN_LENGTH,
        "identity disagrees (look-alike)": c.identity_threshold > 0 and agreed is not None
        and agreed < c.identity_threshold,
    }
    return {
        "earlier": a.id, "new": b.id,
        "decision": decision,
        "jaccard": round(j, 4),
        "shingles": {a.id: fa.n_shingles, b.id: fb.n_shingles},
        "containment": {"new_in_earlier": round(b_in_a, 4), "earlier_in_new": round(a_in_b, 4)},
        "passage_anchors": {a.id: int(fa.anchors.shape[0]), b.id: int(fb.anchors.shape[0]), "shared": shared},
        "hamming_distance": ham,
        "short_text": short,
        "identity": {"tokens_sampled": {a.id: int(fa.identity.shape[0]), b.id: int(fb.identity.shape[0])},
                     "agreement": None if agreed is None else round(agreed, 4)},
        "rewrite": {"jaccard_band": [c.rewrite_jaccard, c.jaccard_threshold], "identity_pairs_shared": shared_pairs,
                    "share_of_smaller_sketch": round(pair_share, 4), "length_ratio": round(length, 4),
                    "word_jaccard": None if words is None else round(words, 4)},
        "rules_passed": [name for name, hit in rules.items() if hit],
    }
