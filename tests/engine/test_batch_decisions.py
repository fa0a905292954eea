"""The batch's compiled decisions (stream_dedup.batch_decisions): the same decisions and the same
index as one-by-one decisions, most articles decided by the kernel, and a failed batch undone."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from stream_dedup import batch, batch_decisions
from stream_dedup.batch import BatchView, KeyMaker
from stream_dedup.config import EngineConfig
from stream_dedup.engine import Deduplicator
from stream_dedup.fingerprint_batch import FingerprintBatch
from stream_dedup.html_text import html_to_text
from stream_dedup.record import Article, article_from_object

NOW = 1_700_000_000.0


class Counted:
    """Counts the articles Python decides (Deduplicator._decide) and those the kernel does."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.python = self.kernel = self.calls = 0
        decide, run = Deduplicator._decide, batch_decisions.Builder.run

        def counted_decide(engine: Deduplicator, *args: object) -> object:
            self.python += 1
            return decide(engine, *args)

        def counted_run(builder: batch_decisions.Builder, view: BatchView, start: int, *args: object) -> int:
            stop = run(builder, view, start, *args)
            self.kernel += stop - start
            self.calls += 1
            return stop

        monkeypatch.setattr(Deduplicator, "_decide", counted_decide)
        monkeypatch.setattr(batch_decisions.Builder, "run", counted_run)


def _short(records: list[dict], words: int = 40) -> list[dict]:
    """Each record as a short wire item (title and the first paragraph of >= 10 words), as
    bench/throughput.py builds its short stream."""
    out = []
    for rec in records:
        body = rec.get("text") if rec.get("text") is not None else html_to_text(rec.get("html") or "")
        paragraphs = [p for p in re.split(r"\n\s*\n", body) if p.strip()]
        lead = next((p for p in paragraphs if len(p.split()) >= 10), paragraphs[0] if paragraphs else "")
        out.append({"id": rec["id"], "text": (rec.get("title") or "") + "\n\n" + " ".join(lead.split()[:words])})
    return out


def _index_state(d: Deduplicator) -> tuple:
    """Everything the index holds: each record (by seq), the bucket and passage lists, the SimHash entries."""
    index = d.index
    seqs = list(range(index.next_seq))
    stored = index.get([b"A" + s.to_bytes(8, "big") for s in seqs])  # (RocksDB's)
    assert index.record_store.get_many(seqs) == stored  # (the record store's: what verifications read)
    lists = index.lists()
    return (stored, lists.buckets.as_dict(), lists.passages.as_dict(), lists.simhash.entries,
            index.next_seq, index.count)


def _run(articles: list[Article], state: Path, size: int, config: EngineConfig | None = None,
         written: bool = False) -> tuple[list[dict], tuple]:
    """The events and index of batches of ``size``; ``written``: the events as the ``dedup``
    command gets them (Deduplicator.process_batch_events: written compiled, read back here, or the
    decisions Python made; the text itself: tests/engine/test_event_kernel.py, tests/cli/test_summary.py)."""
    with Deduplicator(config or EngineConfig(), state) as d:
        events = []
        for i in range(0, len(articles), size):
            if written:
                items = d.process_batch_events(articles[i:i + size], now=NOW).items
                assert any(type(x) is str for x in items)
                events += [json.loads(x) if type(x) is str else x.to_event() for x in items]
            else:
                events += [x.to_event() for x in d.process_batch(articles[i:i + size], now=NOW)]
        return events, _index_state(d)


@pytest.mark.shared_data
@pytest.mark.parametrize("shape", ["short", "long", "short written"])
def test_kernel_decides_most_articles_as_one_by_one(tmp_path: Path, shared_stream, monkeypatch: pytest.MonkeyPatch,
                                                    shape: str) -> None:
    """On 1,500 records of the shared stream, as short items and whole: batches of 256 give the
    events and the index (records, bucket, passage and SimHash lists) of one article at a time, and
    the kernel decides most of them (a fast path silently off fails here); so do the events
    written compiled (``written``: the dedup command's)."""
    config = EngineConfig()
    records = shared_stream(1500)[0]
    articles = [article_from_object(r, config) for r in (_short(records) if shape.startswith("short") else records)]
    reference, reference_index = _run(articles, tmp_path / "one", 1)
    counted = Counted(monkeypatch)
    events, index = _run(articles, tmp_path / "batch", 256, written=shape.endswith("written"))
    assert sum(e["type"] == "duplicate-of" for e in reference) > len(articles) // 4
    diff = [(r, e) for r, e in zip(reference, events, strict=True) if r != e]
    assert not diff, f"{len(diff)} events differ, first {diff[0]}"
    assert index == reference_index
    assert counted.kernel + counted.python == len(articles)
    assert counted.kernel > (0.85 if shape.startswith("short") else 0.5) * len(articles), (counted.kernel,
                                                                                            counted.python)


@pytest.mark.shared_data
@pytest.mark.parametrize("shape", ["short", "long"])
def test_a_fingerprint_batch_with_its_keys_decides_as_its_fingerprints(tmp_path: Path, shared_stream,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        shape: str) -> None:
    """decide_batch on a FingerprintBatch whose keys a KeyMaker made (what dedup's fingerprint
    processes send) gives the events and the index of decide_batch on its fingerprints as a list, and
    of one article at a time; the batch's own arrays are taken (batch._batch_builder) for every batch
    but one of replays."""
    config = EngineConfig()
    records = shared_stream(1024)[0]
    articles = [article_from_object(r, config) for r in (_short(records) if shape == "short" else records)]
    articles += articles[100:150]  # (a batch of replays: decided from its fingerprints one by one)
    taken = []
    builder_of = batch._batch_builder

    def counted(*args: object) -> object:
        made = builder_of(*args)
        taken.append(made is not None)
        return made

    monkeypatch.setattr(batch, "_batch_builder", counted)
    results = []
    for how in ("list", "batch", "one"):
        with Deduplicator(config, tmp_path / how) as d:
            keys, events, size = KeyMaker.of(d), [], 1 if how == "one" else 256
            for i in range(0, len(articles), size):
                chunk = articles[i:i + size]
                fps = FingerprintBatch.of(d.fingerprinter, [(a.text, a.is_html) for a in chunk])
                if how == "batch":
                    fps.keys = keys(fps)
                events += [x.to_event() for x in d.decide_batch([a.id for a in chunk],
                                                                fps if how == "batch" else fps.fingerprints(),
                                                                now=NOW)]
            results.append((events, _index_state(d)))
    assert results[0] == results[1] == results[2]
    assert sum(e["type"] == "duplicate-of" for e in results[0][0]) > len(records) // 4
    assert taken == [True] * 4


# configurations that change what the kernel reads or decides: no passage anchors, character shingles,
# no look-alike rule, no rewrite rule (no word bitmaps), short texts never compared, containment one
# way, small passage lists (more are common), one shared anchor enough, every near-copy indexed,
# tight SimHash, a loose Jaccard
CONFIGS = [
    {"passage_window": 0}, {"char_shingles": 5}, {"identity_threshold": 0.0}, {"rewrite_jaccard": 0.0},
    {"short_text_jaccard": 1.0}, {"containment_both_ways": 0}, {"passage_common_docs": 2, "passage_min_shared": 1},
    {"index_below_similarity": 1.0}, {"simhash_k": 1}, {"jaccard_threshold": 0.3},
]


@pytest.mark.shared_data
@pytest.mark.parametrize("fields", CONFIGS, ids=lambda f: ",".join(f"{k}={v}" for k, v in f.items()))
def test_other_configurations_decide_as_one_by_one(tmp_path: Path, shared_stream, fields: dict) -> None:
    """Under each of CONFIGS, batches of 64 give the events and the index of one article at a time
    (600 records of the shared stream, whole and cut to short items, interleaved)."""
    config = EngineConfig(**fields)
    records = shared_stream(300)[0]
    mixed = [r for pair in zip(records, _short([{**r, "id": r["id"] + "-short"} for r in records]), strict=True)
             for r in pair]
    articles = [article_from_object(r, config) for r in mixed]
    reference, reference_index = _run(articles, tmp_path / "one", 1, config)
    events, index = _run(articles, tmp_path / "batch", 64, config)
    diff = [(r, e) for r, e in zip(reference, events, strict=True) if r != e]
    assert not diff, f"{len(diff)} events differ, first {diff[0]}"
    assert index == reference_index
    assert sum(e["type"] == "duplicate-of" for e in reference) > 50


def test_a_copy_later_in_the_same_batch_is_decided_by_the_kernel(tmp_path: Path, textgen: SimpleNamespace,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A near copy of an article earlier in its batch (whose record Python has not written yet):
    verified on the provisional record the kernel left, in the same call; the copy is a duplicate."""
    a, b = textgen.words(1, 200), textgen.words(2, 200)
    articles = [Article(id="a", text=textgen.text(a)), Article(id="b", text=textgen.text(b)),
                Article(id="a-edit", text=textgen.text(a[:190] + b[:10])),
                Article(id="c", text=textgen.text(textgen.words(3, 200)))]
    counted = Counted(monkeypatch)
    with Deduplicator(EngineConfig(), tmp_path / "s") as d:
        out = d.process_batch(articles, now=NOW)
    assert [x.type for x in out] == ["new", "new", "duplicate-of", "new"]
    assert out[2].duplicate_of == "a" and out[2].method == "minhash"
    assert (counted.kernel, counted.python, counted.calls) == (4, 0, 1)


def test_exact_copies_are_the_kernels_and_replays_go_to_python(tmp_path: Path, textgen: SimpleNamespace,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """An exact copy of an earlier article of the batch is decided by the kernel, a replayed id by Python."""
    a = textgen.words(1, 200)
    articles = [Article(id="a", text=textgen.text(a)), Article(id="a-copy", text=textgen.text(a)),
                Article(id="a", text="replayed"), Article(id="b", text=textgen.text(textgen.words(2, 200)))]
    counted = Counted(monkeypatch)
    with Deduplicator(EngineConfig(), tmp_path / "s") as d:
        out = d.process_batch(articles, now=NOW)
    assert [(x.type, x.method, x.seen_before) for x in out] == [("new", None, False), ("duplicate-of", "exact", False),
                                                                 ("new", None, True), ("new", None, False)]
    assert out[1].matched_id == "a" and out[1].duplicate_of == "a" and out[1].hamming_distance == 0
    assert (counted.kernel, counted.python) == (3, 1)


def test_every_kind_of_exact_copy_decides_as_one_by_one(tmp_path: Path, textgen: SimpleNamespace,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Exact copies (a different case and spacing, the same folded text) of: an article of an
    earlier batch (its record held), of one whose record the store no longer holds (read from RocksDB
    when its exact hash is checked, so held again: the kernel decides it), of an earlier article of the batch, of a copy of a copy (the root is the first), and
    of an earlier near-copy that was not indexed (not an exact duplicate then: decided on its
    candidates). The events are those of one article at a time (the latest indexed of several
    with one text: :func:`test_an_exact_copy_is_of_the_latest_indexed_article_with_its_text`)."""
    a, b, c = textgen.words(1, 200), textgen.words(2, 200), textgen.words(3, 200)
    first = [Article(id="a", text=textgen.text(a)), Article(id="b", text=textgen.text(b))]
    near = textgen.text(c[:199] + ["changed"])
    batch = [Article(id="a-copy", text=textgen.text(a).upper()),
             Article(id="b-copy", text="  " + textgen.text(b)),
             Article(id="c", text=textgen.text(c)), Article(id="c-copy", text=textgen.text(c)),
             Article(id="c-copy-2", text=textgen.text(c) + " "),
             Article(id="c-near", text=near), Article(id="c-near-copy", text=near),
             Article(id="d", text=textgen.text(textgen.words(4, 200)))]

    def run(size: int, evict: bool) -> list[dict]:
        with Deduplicator(EngineConfig(), tmp_path / f"s{size}{evict}") as d:
            events = [x.to_event() for x in d.process_batch(first, now=NOW)]
            if evict:  # (b's record gone from the store: read again from RocksDB)
                store = d.index.record_store
                store.delete(1)
            for i in range(0, len(batch), size):
                events += [x.to_event() for x in d.process_batch(batch[i:i + size], now=NOW)]
            return events

    reference = run(1, False)
    by_id = {e["id"]: e for e in reference}
    assert by_id["a-copy"]["method"] == by_id["b-copy"]["method"] == by_id["c-copy"]["method"] == "exact"
    assert by_id["c-copy-2"]["duplicate_of"] == "c" and by_id["c-copy-2"]["method"] == "exact"
    assert by_id["c-near"]["method"] == "minhash" and by_id["c-near-copy"]["method"] == "minhash"
    for evict in (False, True):
        counted = Counted(monkeypatch)
        assert run(len(batch), evict) == reference
        monkeypatch.undo()
        # (b-copy, evicted: its record read back into the store by the key table's check, BatchView.exact_seqs)
        assert counted.python == 0, (evict, counted.python, counted.kernel)


def test_a_batch_that_raises_takes_the_kernels_filings_out(tmp_path: Path, textgen: SimpleNamespace,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that raises after the kernel filed the batch's articles: nothing is written, the lists
    are as before the batch, and the batch then decides as it would have."""
    first = [Article(id=f"x{i}", text=textgen.text(textgen.words(10 + i, 150))) for i in range(5)]
    batch = [Article(id=f"y{i}", text=textgen.text(textgen.words(20 + i, 150))) for i in range(6)]
    batch.append(Article(id="x0-edit", text=textgen.text(textgen.words(10, 150)[:145] + ["extra"] * 5)))
    with Deduplicator(EngineConfig(), tmp_path / "s") as d:
        d.process_batch(first, now=NOW)
        before = _index_state(d)
        calls = []
        write = BatchView.write_records

        def failing(view: BatchView, records: list[bytes], ids: list[str], *args: object) -> None:
            calls.append(ids)
            write(view, records[:3], ids[:3], *(a[:3] if a is not None else None for a in args))  # type: ignore[index]
            raise OSError("disk full")

        monkeypatch.setattr(BatchView, "write_records", failing)
        with pytest.raises(OSError, match="disk full"):
            d.process_batch(batch, now=NOW)
        monkeypatch.setattr(BatchView, "write_records", write)
        assert calls == [[a.id for a in batch]]  # (the kernel decided them all: Python's writes are one call's)
        assert _index_state(d) == before
        out = d.process_batch(batch, now=NOW)
    assert [x.type for x in out] == ["new"] * 6 + ["duplicate-of"]
    assert out[-1].duplicate_of == "x0"


def test_builder_rows_and_joined_arrays() -> None:
    """_joined: the parts end to end and where each begins."""
    joined, at = batch_decisions._joined([np.array([1, 2], dtype=np.uint64), np.zeros(0, dtype=np.uint64),
                                          np.array([3], dtype=np.uint64)], np.uint64)
    assert joined.tolist() == [1, 2, 3] and at.tolist() == [0, 2, 2, 3]
    empty, at0 = batch_decisions._joined([], np.uint32)
    assert empty.shape == (0,) and at0.tolist() == [0]


@pytest.mark.shared_data
@pytest.mark.parametrize("round_", [64, 91])
def test_an_exact_copy_is_of_the_latest_indexed_article_with_its_text(tmp_path: Path, shared_stream,
                                                                      round_: int) -> None:
    """The shared stream's news-01078 family in a round of bench/scale.py's stream (found by its
    1M-article run): v3 is a near-copy that is not indexed, v4 has v3's text and is indexed (it
    matches v2 at a low similarity), and v5, the same text again, is v4's exact copy, not a fresh
    decision because v3 was not indexed. Decided in one batch as one at a time."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("bench_scale", Path(__file__).resolve().parents[2] / "bench" / "scale.py")
    scale = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scale)  # type: ignore[union-attr]
    lines = [json.dumps(r).encode() for r in shared_stream(7431)[0] if r["id"].startswith("news-01078")]
    config = EngineConfig()
    articles = [article_from_object(json.loads(scale.suffixed(scale.template(line), round_)), config) for line in lines]
    reference, reference_index = _run(articles, tmp_path / "one", 1)
    assert [(e["method"], (e["matched_id"] or "").split("~")[0]) for e in reference[-2:]] == [
        ("minhash", "news-01078-v2"), ("exact", "news-01078-v4")]
    events, index = _run(articles, tmp_path / "batch", len(articles))
    assert events == reference and index == reference_index


@pytest.mark.shared_data
def test_events_without_roots_are_the_same_events_and_tally(tmp_path: Path, shared_stream) -> None:
    """decide_batch_events(roots=False) (the worker's: it never reads them) writes the same events and
    counts the same tally, only without the written duplicates' root ids."""
    config = EngineConfig()
    articles = [article_from_object(r, config) for r in _short(shared_stream(1024)[0])]
    tallies = []
    for roots in (True, False):
        with Deduplicator(config, tmp_path / str(roots)) as d:
            batches = []
            for i in range(0, len(articles), 256):
                chunk = articles[i:i + 256]
                fps = FingerprintBatch.of(d.fingerprinter, [(a.text, a.is_html) for a in chunk])
                batches.append(d.decide_batch_events([a.id for a in chunk], fps, now=NOW, compact=True, roots=roots))
            tallies.append(batches)
    for with_roots, without in zip(*tallies, strict=True):
        assert without.items == with_roots.items and without.roots == [] and without.with_roots is False
        assert (without.new, without.methods, without.similarities, without.written, without.candidates) == \
               (with_roots.new, with_roots.methods, with_roots.similarities, with_roots.written, with_roots.candidates)
    assert sum(len(b.roots) for b in tallies[0]) > 100
