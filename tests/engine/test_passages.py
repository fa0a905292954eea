"""Passage anchors (stream_dedup.passages): winnowing against its reference, and each rule on both
sides on real RocksDB indexes: an excerpt found, a page found, boilerplate passages held by many
articles ignored (as candidates and in containment), removal leaves no posting behind."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from stream_dedup import passages
from stream_dedup.config import EngineConfig
from stream_dedup.engine import Deduplicator
from stream_dedup.fingerprint import Fingerprinter
from stream_dedup.hashing import shingle_hashes
from stream_dedup.record import Article

_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_VOCABULARY = sorted({"".join(random.Random(i).choice(_LETTERS) for _ in range(3 + i % 8)) for i in range(5000)})


def random_words(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(_VOCABULARY) for _ in range(n)]


def as_text(words: list[str]) -> str:
    return " ".join(" ".join(words[i:i + 12]).capitalize() + "." for i in range(0, len(words), 12))


def _lists(dedup: Deduplicator) -> dict[int, list[int]]:
    """Every non-empty passage list of the index: anchor -> seqs."""
    return dedup.index.passage_lists.as_dict()


def _decide(path: Path, texts: list[str], **config) -> list:
    with Deduplicator(EngineConfig(**config), path) as dedup:
        return [dedup.process(Article(id=f"r{i}", text=t), now=float(i)) for i, t in enumerate(texts)]


@pytest.mark.parametrize("w", [1, 4, 16, 24, 100])
def test_winnow_kernel_matches_the_reference(w: int) -> None:
    rng = np.random.default_rng(w)
    for n in (0, 1, 3, 20, 300):
        th = rng.integers(0, 2**63, size=n, dtype=np.uint64)
        ref = passages.winnow_reference(shingle_hashes(th, 4), w)
        assert passages.winnow(th, 4, w).tolist() == ref.tolist()


def test_every_anchor_of_a_verbatim_excerpt_is_an_anchor_of_its_original() -> None:
    fpr = Fingerprinter(EngineConfig())
    words = random_words(1, 600)
    whole = set(fpr.fingerprint_text(" ".join(words)).anchors.tolist())
    part = fpr.fingerprint_text(" ".join(words[200:320])).anchors
    assert part.shape[0] >= 5 and set(part.tolist()) <= whole
    # density about 2 / (w + 1)
    assert 0.7 < len(whole) / (2 * 600 / (EngineConfig().passage_window + 1)) < 1.3
    # the reference fingerprint agrees, and the wire form carries the anchors
    text = " ".join(words)
    fp = fpr.fingerprint_text(text)
    assert fp == fpr.fingerprint_reference(text)
    assert type(fp).from_bytes(fp.to_bytes()) == fp
    assert Fingerprinter(EngineConfig(passage_window=0)).fingerprint_text(text).anchors.shape[0] == 0


ORIGINAL = random_words(11, 1000)
EXCERPT = as_text(ORIGINAL[430:590])        # 16 %: Jaccard about 0.16, below what LSH proposes


def test_a_short_excerpt_is_found(tmp_path: Path) -> None:
    d = _decide(tmp_path / "a", [as_text(ORIGINAL), EXCERPT])
    assert d[1].is_duplicate and d[1].method == "containment" and d[1].direction == "new_in_earlier"
    assert d[1].containment >= 0.8 and d[1].similarity < 0.3
    assert _decide(tmp_path / "b", [as_text(ORIGINAL), EXCERPT], passage_window=0)[1].type == "new"
    # the excerpt first, then its original: the earlier excerpt inside the new article
    d = _decide(tmp_path / "c", [EXCERPT, as_text(ORIGINAL)])
    assert d[1].is_duplicate and d[1].direction == "earlier_in_new"


def test_an_excerpt_of_another_article_is_new(tmp_path: Path) -> None:
    other = as_text(random_words(12, 1000)[430:590])
    assert _decide(tmp_path, [as_text(ORIGINAL), other])[1].type == "new"


def test_the_original_inside_a_page_three_times_its_length_is_found(tmp_path: Path) -> None:
    article = as_text(random_words(21, 300))
    page = as_text(random_words(22, 450)) + " " + article + " " + as_text(random_words(23, 450))
    d = _decide(tmp_path / "a", [article, page])
    assert d[1].is_duplicate and d[1].direction == "earlier_in_new" and d[1].similarity < 0.3
    assert _decide(tmp_path / "b", [article, page], passage_window=0)[1].type == "new"


BOILERPLATE = as_text(random_words(31, 170))   # a site's furniture: navigation, cookie banner, bio


def _site_pages(k: int) -> list[str]:
    return [BOILERPLATE + " " + as_text(random_words(100 + i, 300)) for i in range(k)]


def test_a_passage_held_by_many_articles_is_ignored(tmp_path: Path) -> None:
    c = EngineConfig()
    with Deduplicator(c, tmp_path) as dedup:
        for i, text in enumerate(_site_pages(c.passage_common_docs + 3)):
            fp = dedup.fingerprint(Article(id=f"p{i}", text=text))
            found = passages.lookup(dedup.index.passage_lists, fp.anchors, c.passage_common_docs,
                                    c.passage_min_shared)
            if i < c.passage_common_docs:   # until the furniture's lists are full, it proposes every earlier page
                assert sorted(found.shared) == list(range(i)) and found.usable == fp.anchors.shape[0]
            else:                           # then it proposes none, and counts in no containment
                assert found.shared == {} and found.usable < fp.anchors.shape[0] - 5
            assert dedup.decide(f"p{i}", fp).type == "new"
        lists = list(_lists(dedup).values())
    assert max(len(v) for v in lists) == c.passage_common_docs   # bounded: a full list is not extended


def test_two_articles_sharing_only_boilerplate_are_not_duplicates(tmp_path: Path) -> None:
    # 85 % furniture and a short story of its own, after pages of the same site
    blurb = BOILERPLATE + " " + as_text(random_words(999, 30))
    pages = _site_pages(EngineConfig().passage_common_docs + 1)
    d = _decide(tmp_path / "a", pages + [blurb])
    assert d[-1].type == "new"
    # counting the furniture as evidence (no list is ever full) calls it a copy of a page
    d = _decide(tmp_path / "b", pages + [blurb], passage_common_docs=1024)
    assert d[-1].is_duplicate and d[-1].method == "containment"


def test_removing_an_article_takes_it_out_of_the_passage_lists(tmp_path: Path) -> None:
    with Deduplicator(EngineConfig(), tmp_path) as dedup:
        dedup.process(Article(id="a", text=as_text(ORIGINAL)))
        dedup.process(Article(id="b", text=as_text(random_words(12, 500))))
        before = _lists(dedup)
        dedup.process(Article(id="c", text=as_text(random_words(13, 500))))
        assert dedup.remove("c")
        assert _lists(dedup) == before and before
        assert dedup.remove("a") and dedup.remove("b")
        assert not list(_lists(dedup).items())
        assert dedup.process(Article(id="x", text=EXCERPT)).type == "new"


def test_the_passage_lists_are_rebuilt_from_the_index_when_it_opens(tmp_path: Path) -> None:
    """The lists live in memory: reopened, the index has the same lists (each article's ``D`` key
    names the lists it joined), removals included, and decides as it did."""
    pages = _site_pages(EngineConfig().passage_common_docs + 3)
    with Deduplicator(EngineConfig(), tmp_path) as dedup:
        for i, text in enumerate(pages):
            dedup.process(Article(id=f"p{i}", text=text), now=float(i))
        dedup.process(Article(id="a", text=as_text(ORIGINAL)), now=50.0)
        assert dedup.remove("p2")
        before = _lists(dedup)
    assert before and max(len(v) for v in before.values()) == EngineConfig().passage_common_docs - 1  # full, less p2
    with Deduplicator(EngineConfig(), tmp_path) as dedup:
        assert _lists(dedup) == before
        assert dedup.index.key_counts()[b"P"] == 0  # none of it in RocksDB
        found = dedup.process(Article(id="x", text=EXCERPT), now=60.0)
    assert found.is_duplicate and found.duplicate_of == "a" and found.method == "containment"


@pytest.mark.parametrize("common_docs", [0, 2, 50])
def test_the_joins_of_a_batch_article_are_those_of_one_alone(common_docs: int) -> None:
    """posting_writes with the anchors' bytes made for the batch (Builder: one anchor_bytes call
    for all its articles, sliced by Builder.prepare) gives what it computes alone:
    every list empty, some held by matched articles, some common, no anchors at all."""
    from stream_dedup.batch import Prepared
    from stream_dedup.batch_decisions import Builder, _joined
    from stream_dedup.fingerprint import Fingerprint
    from stream_dedup.list_table import MemberLists

    rng = np.random.default_rng(common_docs)
    fps = [Fingerprint(minhash=np.zeros(8, dtype=np.uint64), simhash=0, exact=bytes(16), n_shingles=1,
                       anchors=np.sort(rng.choice(1 << 40, int(n), replace=False)).astype(np.uint64))
           for n in rng.choice([0, 1, 7, 30], 12)]
    todo = [Prepared(fp, np.zeros(8, dtype=">u2")) for fp in fps]
    signatures = np.stack([p.sig for p in todo])
    anchors, anchors_at = _joined([fp.anchors for fp in fps], np.uint64)
    identity, identity_at = _joined([fp.identity for fp in fps], np.uint32)
    n = len(todo)
    builder = Builder(n, list(range(n)), [False] * n, _band_table().keys(signatures),
                      _tables().permute_many(np.zeros(n, dtype=np.uint64)), signatures, np.zeros(n, dtype=np.uint64),
                      np.ones(n, dtype=np.int64), [fp.exact for fp in fps], [fp.words for fp in fps], identity,
                      identity_at, anchors, anchors_at, np.full(n, -1, dtype=np.int64))
    for i, p in enumerate(todo):
        builder.prepare(i, p)
    lists = MemberLists(cap=100, slots=64, nodes=64)
    for seq, fp in enumerate(fps[:6]):  # the first articles' passages held by articles 0-5
        if fp.anchors.shape[0]:
            lists.file([(fp.anchors[: 1 + seq % 3], seq)])
    for p in todo:
        assert p.anchor_bytes == passages.anchor_bytes(p.fp.anchors)
        found = passages.lookup(lists, p.fp.anchors, common_docs, 1)
        for matched in (set(), {0, 3}):
            alone = passages.posting_writes(found, common_docs, matched)
            batch = passages.posting_writes(found, common_docs, matched, p.anchor_bytes)
            assert np.array_equal(alone[0], batch[0]) and alone[1] == batch[1]


def _band_table():
    from stream_dedup.band_table import BandTable
    return BandTable(bands=2, rows=4, cap=8, slots=16, nodes=16)


def _tables():
    from stream_dedup.simhash import PermutedTables
    return PermutedTables()
