"""Deduplicator.process_batch / decide_batch (issue 13, item 1): the same decisions as one-by-one
process / decide, in the same order, with one atomic write per batch."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from stream_dedup.batch import BatchView
from stream_dedup.config import EngineConfig
from stream_dedup.engine import Deduplicator
from stream_dedup.record import Article, article_from_object

NOW = 1_700_000_000.0
# the whole dev stream with STREAM_DEDUP_FULL_BATCH_TEST=1; else its first 3,000 records (~10 s)
STREAM_RECORDS = None if os.environ.get("STREAM_DEDUP_FULL_BATCH_TEST") else 3000


def one_by_one(articles: list[Article], state: Path) -> list[dict]:
    with Deduplicator(EngineConfig(), state) as d:
        return [d.process(a, now=NOW).to_event() for a in articles]


def batched(articles: list[Article], state: Path, size: int, expect: bool = False) -> list[dict]:
    with Deduplicator(EngineConfig(), state) as d:
        out = []
        for i in range(0, len(articles), size):
            out += [x.to_event() for x in d.process_batch(articles[i:i + size], now=NOW)]
            if expect and i == 0:  # (the lists prepared for the rest at once: dedup on a file)
                lists = d.index.lists()
                d.expect(len(articles) - size)
                assert lists.buckets._next is not None and lists.simhash._next is not None
        assert len(d) == len({a.id for a in articles})
        return out


@pytest.mark.shared_data
def test_batches_decide_as_one_by_one_on_the_dev_stream(tmp_path: Path, shared_stream) -> None:
    """The events of process_batch, for batch sizes 1, 37 and 256 (and 256 with the lists prepared
    for the whole stream after the first batch: Deduplicator.expect), equal field by field those of
    one-by-one process on the shared dev stream (its first 3,000 records; all 7,431 with
    STREAM_DEDUP_FULL_BATCH_TEST=1)."""
    config = EngineConfig()
    articles = [article_from_object(r, config) for r in shared_stream(STREAM_RECORDS or 10**9)[0]]
    reference = one_by_one(articles, tmp_path / "one")
    assert sum(e["type"] == "duplicate-of" for e in reference) > len(articles) // 3
    for size, expect in ((1, False), (37, False), (256, False), (256, True)):
        events = batched(articles, tmp_path / f"batch-{size}-{expect}", size, expect)
        assert len(events) == len(reference)
        diff = [(r, e) for r, e in zip(reference, events, strict=True) if r != e]
        assert not diff, f"batch size {size}: {len(diff)} events differ, first {diff[0]}"


def _articles(textgen: SimpleNamespace) -> list[Article]:
    a, b = textgen.words(1, 300), textgen.words(2, 300)
    return [
        Article(id="a", text=textgen.text(a)),
        Article(id="a-copy", text=textgen.text(a)),                   # exact copy of an earlier one in the batch
        Article(id="a-edit", text=textgen.text(a[:280] + b[:20])),    # near copy
        Article(id="a", text="a replay: this text is not read"),      # the same id again
        Article(id="empty", text=""),                                 # no shingles
        Article(id="short", text="Three words only"),
        Article(id="b", text=textgen.text(b)),
        Article(id="b-trim", text=textgen.text(b[:120])),            # contained in b
        Article(id="empty", text="again"),
        Article(id="a-copy", text=textgen.text(b)),
    ]


def test_same_batch_duplicates_repeated_ids_and_empty_texts(tmp_path: Path, textgen: SimpleNamespace) -> None:
    articles = _articles(textgen)
    reference = one_by_one(articles, tmp_path / "one")
    for size in (1, 3, len(articles)):
        assert batched(articles, tmp_path / f"b{size}", size) == reference
    types = {(e["id"], e["seen_before"]): (e["type"], e["method"], e["duplicate_of"]) for e in reference}
    assert types[("a", False)] == ("new", None, None)
    assert types[("a-copy", False)] == ("duplicate-of", "exact", "a")
    assert types[("a-edit", False)][0::2] == ("duplicate-of", "a")
    assert types[("a", True)] == ("new", None, None)                # the replay of the first "a"
    assert types[("empty", False)] == ("new", None, None)
    assert types[("empty", True)] == ("new", None, None)
    assert types[("b-trim", False)] == ("duplicate-of", "containment", "b")
    assert types[("a-copy", True)] == ("duplicate-of", "exact", "a")  # its first decision, not b's text


def test_decide_batch_receipts_checkpoints_and_one_write(tmp_path: Path, textgen: SimpleNamespace) -> None:
    articles = _articles(textgen)
    with Deduplicator(EngineConfig(), tmp_path / "s") as d:
        fps = [d.fingerprint(a) for a in articles]
        ids = [a.id for a in articles]
        tokens = [b"t%02d" % i for i in range(len(ids))]
        decisions = d.decide_batch(ids, fps, now=NOW, checkpoints=[("in", i + 1) for i in range(len(ids))],
                                   receipts=tokens)
        assert d.checkpoint("in") == len(ids)
        assert [d.receipt(t) for t in tokens] == [(i + 1, dec.seen_before) for i, dec in enumerate(decisions)]
        assert len(d) == len(set(ids))
        # a batch that raises (a fingerprint of another num_perm) writes nothing, its earlier articles included
        bad = Article(id="bad", text="x")
        wrong = fps[0].__class__(minhash=np.zeros(7, dtype=np.uint32), simhash=0, exact=b"\0" * 16, n_shingles=1)
        fresh = Article(id="fresh", text=textgen.text(textgen.words(9, 100)))
        with pytest.raises(ValueError, match="permutations"):
            d.decide_batch(["fresh", bad.id], [d.fingerprint(fresh), wrong], now=NOW, checkpoints=[("in", 99)] * 2)
        assert d.checkpoint("in") == len(ids) and d.decision_of("fresh") is None and len(d) == len(set(ids))
        assert d.decide_batch([], []) == []
    with Deduplicator(EngineConfig(), tmp_path / "s") as d:  # reopened: the batch was written
        assert d.decision_of("b-trim").duplicate_of == "b"


def test_decide_batch_keeps_each_articles_own_time(tmp_path: Path, textgen: SimpleNamespace) -> None:
    articles = _articles(textgen)
    with Deduplicator(EngineConfig(), tmp_path / "s") as d:
        fps = [d.fingerprint(a) for a in articles]
        ids = [a.id for a in articles]
        times = [NOW + 10.0 * i for i in range(len(ids))]
        with pytest.raises(ValueError, match="times for"):
            d.decide_batch(ids, fps, now=times[:-1])
        d.decide_batch(ids, fps, now=times)
        first = {}
        for i, article_id in enumerate(ids):
            first.setdefault(article_id, times[i])  # a repeated id keeps its first time
        for article_id, t in first.items():
            assert d.index.article(d.index.seq_of(article_id)).first_seen == t


def test_a_batch_reads_the_lsh_buckets_as_they_will_be_after_its_commit(tmp_path: Path) -> None:
    """The batch's own bucket members are seen before they reach the index's bucket table, capped
    as the table will cap them (a bucket holds its newest ``max_bucket`` members)."""
    from stream_dedup.index import Index

    index = Index(tmp_path / "s", num_perm=8, settings={"test": "batch-buckets"}, max_bucket=3, banding=(2, 3))

    def sig(n: int, odd: bool) -> np.ndarray:
        s = np.arange(8, dtype=np.uint16) + 100 * n + 1000
        s[0:3] = 7          # band 0: shared by every article
        s[3:6] = 1 + odd    # band 1: shared by the odd or the even ones
        return s.astype(">u2")

    def article(n: int) -> dict:
        s = sig(n, n % 2 == 1)
        return dict(article_id=f"a{n}", first_seen=0.0, simhash=n, n_shingles=10, exact=n.to_bytes(16, "big"),
                    minhash=s, root_id=f"a{n}", decision={}, bucket_keys=index.buckets.keys(s), permuted=[],
                    index_sketches=True, checkpoint=None)

    for n in range(2):
        index.insert(**article(n))
    view = BatchView(index)
    seen = []
    for n in range(2, 7):
        seen.append(view.lookup(index.buckets.keys(sig(n, n % 2 == 1)), [], 64).lsh)
        view.insert(**article(n))
    probe = [index.buckets.keys(sig(9, odd)) for odd in (False, True)]
    before = [view.lookup(keys, [], 64).lsh for keys in probe]
    view.commit()
    # band 0 keeps its newest 3 (n = 5 no longer finds 1 there, but in band 1), band 1 is capped too
    assert seen == [{0, 1}, {0, 1, 2}, {0, 1, 2, 3}, {1, 2, 3, 4}, {0, 2, 3, 4, 5}]
    assert before == [index.lookup(keys, [], 64).lsh for keys in probe] == [{2, 4, 5, 6}, {1, 3, 4, 5, 6}]
    index.close()


def _lists_state(index) -> tuple:
    lists = index.lists()
    return lists.buckets.as_dict(), lists.passages.as_dict(), lists.simhash.as_set()


def test_a_batch_that_raises_takes_its_articles_out_of_the_lists(tmp_path: Path, textgen: SimpleNamespace,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch files each article in the in-memory lists when it decides it (the next one's lookup
    finds it there); a batch interrupted before its write takes them out again, so the lists hold
    exactly what RocksDB holds, and deciding the batch again gives the one-by-one decisions."""
    articles = _articles(textgen)
    more = [Article(id=f"m{i}", text=textgen.text(textgen.words(20 + i, 150) + textgen.words(1, 150)))
            for i in range(6)]  # near copies of "a": they share buckets, SimHash keys and passages with it
    reference = one_by_one(articles + more, tmp_path / "one")
    with Deduplicator(EngineConfig(), tmp_path / "s") as d:
        first = [x.to_event() for x in d.process_batch(articles, now=NOW)]
        before, count = _lists_state(d.index), len(d)
        real_write, calls = BatchView.write_records, [0]

        def interrupted(self, records, ids, *args):
            calls[0] += 1  # after the batch's articles are filed, and four of them written
            real_write(self, records[:4], ids[:4], *(a[:4] if a is not None else None for a in args))
            raise KeyboardInterrupt

        monkeypatch.setattr(BatchView, "write_records", interrupted)
        with pytest.raises(KeyboardInterrupt):
            d.process_batch(more, now=NOW)
        monkeypatch.setattr(BatchView, "write_records", real_write)
        assert calls[0] == 1 and len(d) == count
        assert d.index._lists is not None and _lists_state(d.index) == before  # taken out, not rebuilt
        assert d.index.record_store.get_many(list(range(count, count + 4))) == [None] * 4  # (their seqs come again)
        assert not d.index.lists_behind
        again = [x.to_event() for x in d.process_batch(more, now=NOW)]
    assert first + again == reference


def test_a_rollback_past_a_capped_bucket_rebuilds_the_lists(tmp_path: Path) -> None:
    """A bucket at its cap dropped its oldest member when the batch filed one: that cannot be undone
    in place, so the rollback drops the lists and the next use builds them from RocksDB, as they were."""
    from stream_dedup.index import Index

    index = Index(tmp_path / "s", num_perm=8, settings={"test": "batch-rollback"}, max_bucket=2, banding=(2, 3))

    def article(n: int, shared: bool = True) -> dict:
        s = (np.arange(8, dtype=np.uint16) + 100 * n + 1000).astype(">u2")
        if shared:
            s[0:3] = 7  # band 0: one bucket for these
        return dict(article_id=f"a{n}", first_seen=0.0, simhash=n, n_shingles=10, exact=n.to_bytes(16, "big"),
                    minhash=s, root_id=f"a{n}", decision=["new"], bucket_keys=index.buckets.keys(s), permuted=[],
                    index_sketches=True, checkpoint=None)

    for n in range(2):
        index.insert(**article(n))
    before = _lists_state(index)[:2]  # (articles filed without SimHash tables here: a rebuild files them)
    view = BatchView(index)
    view.insert(**article(2))  # the shared bucket (cap 2) drops a0
    assert view.lookup(index.buckets.keys(article(3)["minhash"]), [], 64).lsh == {1, 2}
    view.rollback()
    assert index._lists is None and not index.lists_behind
    assert _lists_state(index)[:2] == before  # built again from RocksDB: a0 and a1
    view = BatchView(index)
    view.insert(**article(5, shared=False))  # buckets of its own: no drop, taken out in place
    view.rollback()
    assert index._lists is not None and _lists_state(index)[:2] == before
    index.close()


def test_the_record_store_holds_what_rocksdb_holds_and_forgets_deleted_records(
        tmp_path: Path, textgen: SimpleNamespace) -> None:
    """Index.records (a verification's candidates) answers from its record store what RocksDB holds:
    the records a batch writes are put as it writes them, a removed article's record is gone from
    both, and decisions with the store off (every verification reads its list of records from
    RocksDB) or small (its halves emptied every few records) are the same."""
    from stream_dedup.index import _u64
    from stream_dedup.record_store import RecordStore

    stories = [textgen.words(seed, 120) for seed in range(40)]
    articles = [Article(id=f"s{i}-{v}", text=textgen.text(words[:100 + 5 * v] + words[:3]))
                for i, words in enumerate(stories) for v in range(3)]
    events = {}
    for limit in (None, 0, 6000):
        with Deduplicator(EngineConfig(), tmp_path / f"state-{limit}") as d:
            index = d.index
            if limit is not None:
                index.record_store = RecordStore(limit, index.record_store.min_record)
            events[limit] = [x.to_event() for i in range(0, len(articles), 16)
                             for x in d.process_batch(articles[i:i + 16], now=NOW)]
            seqs = list(range(index.next_seq))
            stored = index._points.get([b"A" + _u64(s) for s in seqs])
            held = index.record_store.get_many(seqs)
            assert index.records(seqs) == stored  # (the store's and RocksDB's)
            assert all(h is None or h == v for h, v in zip(held, stored, strict=True))
            if limit is None:
                assert held == stored  # every record, put as its batch wrote it
                assert d.remove(articles[0].id)
                assert index.records([0]) == [None] and index.record_store.get_many([0]) == [None]
            elif limit == 0:
                assert held == [None] * len(seqs) and not len(index.record_store)
            else:
                assert held[-1] == stored[-1] and None in held  # the newest held, the oldest dropped
                assert index.record_store.held_bytes <= 6000
    assert events[None] == events[0] == events[6000]
    assert sum(e["type"] == "duplicate-of" for e in events[0]) >= 60
