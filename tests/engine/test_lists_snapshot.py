"""stream_dedup.lists_snapshot and memory_lists: the in-memory lists come back the same whether they are loaded from
the latest snapshot (and brought up to date with the articles indexed after it) or built again from
RocksDB, and a snapshot is used only for the index it was written for, with nothing deleted since."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from stream_dedup import lists_snapshot, memory_lists
from stream_dedup.config import EngineConfig
from stream_dedup.engine import Deduplicator
from stream_dedup.record import article_from_object

NOW = 1_700_000_000.0


@pytest.fixture(scope="module")
def articles(shared_stream):
    return [article_from_object(obj, EngineConfig()) for obj in shared_stream(600)[0]]


def _state(dedup: Deduplicator) -> tuple[dict, dict, set, dict, dict]:
    lists = dedup.index.lists()
    return (lists.buckets.as_dict(), lists.passages.as_dict(), lists.simhash.as_set(), lists.ids.as_dict(),
            lists.exacts.as_dict())


@pytest.mark.shared_data
def test_a_closed_index_reopens_from_its_snapshot_with_the_same_lists(tmp_path: Path, articles) -> None:
    with Deduplicator(EngineConfig(), tmp_path / "a") as d:
        d.process_batch(articles[:400], now=NOW)
        before = _state(d)
    assert (tmp_path / "a" / lists_snapshot.SNAPSHOT_FILE).exists()
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    with Deduplicator(EngineConfig(), tmp_path / "a") as d:
        assert d.index.db.get(lists_snapshot.TOKEN_KEY) is not None
        assert _state(d) == before
        # kept: a crash from here on restarts from it and the articles indexed after it
        assert d.index.db.get(lists_snapshot.TOKEN_KEY) is not None
        assert (tmp_path / "a" / lists_snapshot.SNAPSHOT_FILE).exists()
        loaded = [x.to_event() for x in d.process_batch(articles[400:], now=NOW)]
    os.remove(tmp_path / "b" / lists_snapshot.SNAPSHOT_FILE)  # the copy must build them from RocksDB
    with Deduplicator(EngineConfig(), tmp_path / "b") as d:
        assert _state(d) == before
        built = [x.to_event() for x in d.process_batch(articles[400:], now=NOW)]
    assert loaded == built and any(e["type"] == "duplicate-of" for e in loaded)


def _no_build(index) -> None:
    raise AssertionError("the lists were built from RocksDB, not loaded from the snapshot")


@pytest.mark.shared_data
def test_a_crash_after_a_snapshot_restarts_from_it_and_the_articles_indexed_since(
        tmp_path: Path, articles, monkeypatch) -> None:
    """A snapshot written while the index runs (:meth:`Index.snapshot_lists`), then more batches,
    then a crash (no close): the next open loads the snapshot and files the later articles again,
    and gets exactly the lists the live decisions had; the decisions that follow are those of an
    index whose lists were built from RocksDB."""
    d = Deduplicator(EngineConfig(), tmp_path / "a")
    d.process_batch(articles[:200], now=NOW)
    assert d.index.snapshot_lists()
    d.process_batch(articles[200:300], now=NOW)
    d.process_batch(articles[300:400], now=NOW)   # (two batches after it: exact copies and new articles)
    loaded, built = _crash_and_restart(d, tmp_path, articles[400:], monkeypatch)
    assert loaded == built and any(e["type"] == "duplicate-of" for e in loaded)


def _crash_and_restart(d: Deduplicator, tmp_path: Path, more: list, monkeypatch) -> tuple[list, list]:
    """Stop ``d`` (open on ``tmp_path / "a"``) as a crash would, then decide ``more`` on it reopened
    (its lists must come from the snapshot, and be the live ones) and on a copy whose lists are
    built from RocksDB: the events of each."""
    expected = _state(d)
    d.index.snapshot_on_close = False              # as a crash would: no snapshot at the end
    d.close()
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    with monkeypatch.context() as m:
        m.setattr(memory_lists, "build", _no_build)
        with Deduplicator(EngineConfig(), tmp_path / "a") as d:
            assert _state(d) == expected
            loaded = [x.to_event() for x in d.process_batch(more, now=NOW)]
    os.remove(tmp_path / "b" / lists_snapshot.SNAPSHOT_FILE)
    with Deduplicator(EngineConfig(), tmp_path / "b") as d:
        assert _state(d) == expected
        built = [x.to_event() for x in d.process_batch(more, now=NOW)]
    return loaded, built


@pytest.mark.shared_data
def test_deletions_after_a_snapshot_are_replayed_when_they_happened(tmp_path: Path, articles, monkeypatch) -> None:
    """Retention and remove delete articles between batches, older ones and ones added after the
    snapshot; each deletion is logged in its own write, and a restart from the snapshot applies them
    between the articles added before and after them, as the live lists did. With 3 members a bucket
    (buckets overflow, dropping their oldest) the order matters: the lists come back exactly the live
    ones, and the log is cleared by the next snapshot."""
    from stream_dedup import engine
    monkeypatch.setattr(engine, "MAX_PER_BUCKET", 3)
    d = Deduplicator(EngineConfig(), tmp_path)
    d.process_batch(articles[:150], now=NOW)
    assert d.index.snapshot_lists()
    d.process_batch(articles[150:200], now=NOW)
    assert d.remove(articles[5].id) and d.remove(articles[20].id)        # indexed before the snapshot
    d.process_batch(articles[200:260], now=NOW)
    assert d.remove(articles[170].id) and d.remove(articles[210].id)     # after it
    d.process_batch(articles[260:300], now=NOW)
    assert d.remove(articles[265].id)
    assert len(lists_snapshot._deletions(d.index)) == 5 and d.index.db.get(lists_snapshot.TOKEN_KEY) is not None
    expected = _state(d)
    d.index.snapshot_on_close = False
    d.close()
    monkeypatch.setattr(memory_lists, "build", _no_build)
    with Deduplicator(EngineConfig(), tmp_path) as d:
        assert _state(d) == expected and len(d) == 295
        assert d.index.snapshot_lists() and lists_snapshot._deletions(d.index) == []  # (the new snapshot holds them)


def test_a_deletion_replayed_at_its_moment_keeps_a_full_bucket_as_it_was(tmp_path: Path, textgen, monkeypatch) -> None:
    """Rewrites of one story share LSH buckets of 2 members: deleting one of a full bucket's members
    and then adding another keeps the older member, where adding first would have dropped it. The
    restart from the snapshot gives the live lists, so the deletion was applied between the two adds."""
    from stream_dedup import engine
    from stream_dedup.record import Article
    monkeypatch.setattr(engine, "MAX_PER_BUCKET", 2)
    base = textgen.words(3, 300)

    def variant(k: int) -> Article:
        words = list(base)
        for j in range(k, len(words), 30):
            words[j] = f"v{k}w{j}"
        return Article(id=f"v{k}", text=textgen.text(words))

    d = Deduplicator(EngineConfig(), tmp_path)
    for k in range(3):
        d.process(variant(k), now=NOW)
    assert d.index.snapshot_lists()
    d.process(variant(3), now=NOW)
    assert d.remove("v3")                      # the newest member of its buckets ...
    decisions = [d.process(variant(k), now=NOW) for k in (4, 5)]   # ... then newer ones fill them again
    assert all(x.is_duplicate for x in decisions)
    expected = _state(d)
    d.index.snapshot_on_close = False
    d.close()
    monkeypatch.setattr(memory_lists, "build", _no_build)
    with Deduplicator(EngineConfig(), tmp_path) as d:
        assert _state(d) == expected


@pytest.mark.shared_data
def test_a_background_snapshot_holds_the_lists_when_it_began(tmp_path: Path, articles, monkeypatch) -> None:
    """The worker's snapshots are synced to disk in a thread while it goes on deciding: what one
    holds is the index when it began, made valid once synced, with the deletions logged before it
    dropped from the log and those logged since kept. A crash after it restarts from it: the live
    lists, decided on as lists built from RocksDB."""
    d = Deduplicator(EngineConfig(), tmp_path / "a")
    d.process_batch(articles[:150], now=NOW)
    assert d.index.snapshot_lists()
    d.process_batch(articles[150:200], now=NOW)
    assert d.remove(articles[3].id)                                  # logged, then held by the next snapshot
    assert d.index.start_snapshot() and not d.index.start_snapshot()  # (one at a time)
    d.process_batch(articles[200:260], now=NOW)                      # while it is synced
    assert d.remove(articles[160].id) and d.remove(articles[230].id)  # logged after it began: kept
    written, seconds, paused = d.index.snapshot_done(block=True)
    assert written and seconds >= paused >= 0 and d.index.snapshot_done() is None
    assert len(lists_snapshot._deletions(d.index)) == 2
    d.process_batch(articles[260:320], now=NOW)
    loaded, built = _crash_and_restart(d, tmp_path, articles[320:], monkeypatch)
    assert loaded == built


def test_a_background_snapshot_is_not_made_valid_after_a_drop_or_a_stop(tmp_path: Path, textgen, monkeypatch) -> None:
    """A snapshot dropped while the file is synced (the log over its bound) lost the deletions logged
    since it began: it is not made valid. A close while one is synced waits for it and writes the
    snapshot itself."""
    from stream_dedup.record import Article
    monkeypatch.setattr(lists_snapshot, "MAX_LOGGED_DELETIONS", 1)
    d = Deduplicator(EngineConfig(), tmp_path)
    for i in range(6):
        d.process(Article(id=f"a{i}", text=textgen.text(textgen.words(i, 300))), now=NOW)
    assert d.index.snapshot_lists() and d.index.start_snapshot()
    assert d.remove("a0") and d.remove("a1")                         # the second drops the snapshot
    assert d.index.snapshot_done(block=True)[0] is False
    assert d.index.db.get(lists_snapshot.TOKEN_KEY) is None
    assert d.index.start_snapshot()
    d.close()                                                        # waits for it, saves itself
    with Deduplicator(EngineConfig(), tmp_path) as d:
        assert lists_snapshot.load(d.index) is not None and len(d) == 4


def test_the_deletion_log_is_bounded(tmp_path: Path, textgen, monkeypatch) -> None:
    """Past MAX_LOGGED_DELETIONS since the snapshot (snapshots only at close, retention on) the log is
    dropped with the token in the deletion's write: the next open builds the lists."""
    from stream_dedup.record import Article
    monkeypatch.setattr(lists_snapshot, "MAX_LOGGED_DELETIONS", 2)
    d = Deduplicator(EngineConfig(), tmp_path)
    for i in range(5):
        d.process(Article(id=f"a{i}", text=textgen.text(textgen.words(i, 300))), now=NOW)
    assert d.index.snapshot_lists()
    assert d.remove("a0") and d.remove("a1")
    assert len(lists_snapshot._deletions(d.index)) == 2 and d.index.db.get(lists_snapshot.TOKEN_KEY) is not None
    assert d.remove("a2")
    assert lists_snapshot._deletions(d.index) == [] and d.index.db.get(lists_snapshot.TOKEN_KEY) is None
    assert d.remove("a3")  # (nothing to log any more)
    expected = _state(d)
    d.index.snapshot_on_close = False
    d.close()
    with Deduplicator(EngineConfig(), tmp_path) as d:
        assert lists_snapshot.load(d.index) is None and _state(d) == expected


@pytest.mark.shared_data
def test_a_snapshot_ahead_of_the_index_is_not_used(tmp_path: Path, articles) -> None:
    """A snapshot that holds articles RocksDB does not (its writes lost, e.g. to a power cut after the
    snapshot's file was synced) is not used, even with its token: the lists are built from RocksDB."""
    with Deduplicator(EngineConfig(), tmp_path / "a") as d:
        d.process_batch(articles[:100], now=NOW)
        d.index.snapshot_on_close = False
    shutil.copytree(tmp_path / "a", tmp_path / "b")   # the index at 100 articles, no snapshot
    with Deduplicator(EngineConfig(), tmp_path / "a") as d:
        d.process_batch(articles[100:200], now=NOW)
        assert d.index.snapshot_lists()
        token = d.index.db.get(lists_snapshot.TOKEN_KEY)
    shutil.copy(tmp_path / "a" / lists_snapshot.SNAPSHOT_FILE, tmp_path / "b" / lists_snapshot.SNAPSHOT_FILE)
    with Deduplicator(EngineConfig(), tmp_path / "b") as d:
        d.index.db.put(lists_snapshot.TOKEN_KEY, token)
        assert lists_snapshot.load(d.index) is None
        assert d.index.db.get(lists_snapshot.TOKEN_KEY) is None  # dropped with its file
        assert len(d.index.buckets.as_dict()) > 0 and len(d) == 100


def test_a_snapshot_of_another_index_state_is_not_used(tmp_path: Path, textgen) -> None:
    """The token and the article count must both agree; a write that did not reach the lists
    (an exception between RocksDB and the lists) writes no snapshot."""
    from stream_dedup.record import Article
    texts = [textgen.text(textgen.words(i, 300)) for i in range(5)]
    with Deduplicator(EngineConfig(), tmp_path) as d:
        for i, t in enumerate(texts[:3]):
            d.process(Article(id=f"a{i}", text=t), now=NOW)
    with Deduplicator(EngineConfig(), tmp_path) as d:
        d.index.db.put(lists_snapshot.TOKEN_KEY, b"x" * 16)  # a token that names another file
        assert lists_snapshot.load(d.index) is None
        d.index.lists_behind = True
        d.process(Article(id="a3", text=texts[3]), now=NOW)
        d.index.lists_behind = True  # as if the last write had not reached the lists
    with Deduplicator(EngineConfig(), tmp_path) as d:
        assert d.index.db.get(lists_snapshot.TOKEN_KEY) is None and len(d) == 4
        assert d.process(Article(id="a4", text=texts[0]), now=NOW).duplicate_of == "a0"


def _snapshot(tmp_path: Path, textgen) -> dict:
    """Three articles closed into an index at ``tmp_path``: its lists."""
    from stream_dedup.record import Article
    with Deduplicator(EngineConfig(), tmp_path) as d:
        for i in range(3):
            d.process(Article(id=f"a{i}", text=textgen.text(textgen.words(i, 300))), now=NOW)
        return _state(d)


def _rewrite_header(path: Path, edit) -> None:
    """Apply ``edit`` to the snapshot's JSON header (same length: padded with spaces)."""
    import json
    raw = path.read_bytes()
    length = int.from_bytes(raw[8:16], "little")
    header = json.loads(raw[16:16 + length])
    edit(header)
    text = json.dumps(header).encode()
    assert len(text) <= length
    path.write_bytes(raw[:16] + text.ljust(length) + raw[16 + length:])


@pytest.mark.parametrize("damage", ["cut short", "no simhash arrays", "another dtype", "other magic"])
def test_a_damaged_or_foreign_snapshot_is_not_used(tmp_path: Path, textgen, damage: str) -> None:
    """A file whose size is not its header's (torn, cut), that lacks arrays (an older layout, index
    format 9, had no SimHash tables), holds a non-integer array or is not a snapshot at all: the
    lists are built from the records, the same as the snapshot would have given."""
    expected = _snapshot(tmp_path, textgen)
    path = tmp_path / lists_snapshot.SNAPSHOT_FILE
    if damage == "cut short":
        with open(path, "r+b") as f:
            f.truncate(path.stat().st_size - 64)
    elif damage == "no simhash arrays":
        _rewrite_header(path, lambda h: h.update(arrays=[a for a in h["arrays"] if not a[0].startswith("simhash_")]))
    elif damage == "another dtype":
        _rewrite_header(path, lambda h: h["arrays"][0].__setitem__(1, "|O"))
    else:
        path.write_bytes(b"PK\x03\x04" + path.read_bytes()[4:])
    with Deduplicator(EngineConfig(), tmp_path) as d:
        assert lists_snapshot.load(d.index) is None
        assert not path.exists()  # read once, whatever it held
        assert _state(d) == expected and d.index.simhash_table.entries == 3 * len(d.tables)


def test_the_snapshot_of_an_older_layout_is_deleted_not_read(tmp_path: Path, textgen) -> None:
    """An index closed by a version that wrote ``memory-lists-2.npz`` builds its lists once; the old
    file (never read again) is deleted at the next open."""
    expected = _snapshot(tmp_path, textgen)
    (tmp_path / lists_snapshot.SNAPSHOT_FILE).rename(tmp_path / "memory-lists-2.npz")
    orphan = tmp_path / f"{lists_snapshot.SNAPSHOT_FILE}.4242.tmp"  # left by a writer that was killed
    orphan.write_bytes(b"half a snapshot")
    with Deduplicator(EngineConfig(), tmp_path) as d:
        assert _state(d) == expected
        assert not (tmp_path / "memory-lists-2.npz").exists() and not orphan.exists()
    assert (tmp_path / lists_snapshot.SNAPSHOT_FILE).exists()


@pytest.mark.parametrize("direct", [True, False])
def test_a_snapshot_keeps_every_array_exactly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, direct: bool) -> None:
    """Arrays of every size (empty, one byte short of the alignment, large), dtype and dimension
    come back bit for bit, each in its own writable buffer, from a file written past the page cache
    (``direct``: as a large index's is) or through it; a large one read on small pages, then given
    huge pages to move to (page_memory.loaded / promote)."""
    import json
    from types import SimpleNamespace

    from stream_dedup import direct_write, page_memory
    from tests.engine.test_page_memory import vm_flags
    monkeypatch.setattr(direct_write, "DIRECT_MIN_BYTES", 0 if direct else 1 << 62)
    monkeypatch.setattr(page_memory, "MAPPED_FROM", 1 << 16)
    monkeypatch.setattr(page_memory, "HUGE_FROM", 1 << 20)
    rng = np.random.default_rng(7)
    arrays = {"a": rng.integers(0, 2**63, 1000, dtype=np.uint64), "b": np.zeros(0, dtype=np.int32),
              "c": rng.integers(0, 255, 63, dtype=np.uint8), "d": rng.integers(-5, 5, (7, 3), dtype=np.int64),
              "e": rng.integers(0, 2**63, 1 << 18, dtype=np.uint64)}
    tables = SimpleNamespace(settle=lambda: None, **arrays)
    index = SimpleNamespace(path=tmp_path, count=3, next_seq=4, banding=(16, 8), max_bucket=100, snapshot_generation=0,
                            db=SimpleNamespace(write=lambda batch: None))
    parts = lists_snapshot._parts
    lists_snapshot._parts = lambda _lists: [("", tables, tuple(arrays))]
    try:
        token = lists_snapshot.save(index, None)  # type: ignore[arg-type]
    finally:
        lists_snapshot._parts = parts
    path = tmp_path / lists_snapshot.SNAPSHOT_FILE
    found = lists_snapshot._read(path, token)
    assert found is not None and found[0] == lists_snapshot._fingerprint(index)
    back = found[1]
    assert set(back) == set(arrays)
    for name, array in arrays.items():
        assert back[name].dtype == array.dtype and back[name].shape == array.shape
        own = back[name].flags.owndata or page_memory.mapping(back[name]) is not None  # (numpy's, or its own mapping)
        assert np.array_equal(back[name], array) and back[name].flags.writeable and own
    if page_memory._MAPS:
        assert page_memory.mapping(back["e"]) is not None and "hg" in vm_flags(back["e"]) and "nh" not in vm_flags(back["e"])
    assert lists_snapshot._read(path, b"x" * 16) is None  # another token
    length = int.from_bytes(path.read_bytes()[8:16], "little")
    offsets = [entry[3] for entry in json.loads(path.read_bytes()[16:16 + length])["arrays"]]
    assert all(o % lists_snapshot.ALIGN == 0 for o in offsets)


@pytest.mark.shared_data
def test_lists_built_in_small_chunks_equal_the_lists_the_decisions_made(tmp_path: Path, articles) -> None:
    """The rebuild reads records a chunk at a time as arrays (exact duplicates and empty texts have
    no sketches to file): any chunking gives the lists the live decisions built."""
    with Deduplicator(EngineConfig(), tmp_path) as d:
        d.process_batch(articles[:300], now=NOW)
        d.process_batch([article_from_object({"id": "empty", "text": "..."}, EngineConfig())], now=NOW)
        live = _state(d)
        heads = memory_lists.record_heads(d.index.num_perm)
        flags = [np.frombuffer(v[:heads.itemsize], dtype=heads)["flags"][0] for _, v in d.index.scan(b"A")]
        assert 0 in flags and 1 in flags  # some records have no sketches filed (exact copies, the empty text)
        for chunk in (7, 64, 8192):
            built = memory_lists.build(d.index, chunk=chunk)
            assert (built.buckets.as_dict(), built.passages.as_dict(), built.simhash.as_set(), built.ids.as_dict(),
                    built.exacts.as_dict()) == live
        buckets, passages, _, ids, exacts = live
        assert len(buckets) > 0 and len(passages) > 0
        # every article has its id filed, only the indexed ones their exact hash
        assert len(ids) == d.index.count == len(flags) and len(exacts) == sum(int(f) for f in flags) < len(flags)


@pytest.mark.shared_data
def test_a_close_keeps_a_snapshot_at_most_one_percent_behind(tmp_path: Path, articles, monkeypatch) -> None:
    """A close writes no new snapshot while the valid one is at most CLOSE_SNAPSHOT_BEHIND of the
    index behind (the next open files the later articles again, as after a crash, and has the same
    lists); one further behind is written again, and a deletion since counts as behind too."""
    from stream_dedup import index as index_module

    path = tmp_path / "a"
    snapshot = path / lists_snapshot.SNAPSHOT_FILE
    with Deduplicator(EngineConfig(), path) as d:
        d.process_batch(articles[:500], now=NOW)
    written = snapshot.stat().st_mtime_ns, snapshot.read_bytes()[:128]
    with Deduplicator(EngineConfig(), path) as d:
        d.index.lists()  # (loaded when first used)
        assert d.index.snapshot_next_seq == d.index.next_seq
        d.process_batch(articles[500:502], now=NOW)
        behind = d.index.next_seq - d.index.snapshot_next_seq
        assert 0 < behind <= index_module.CLOSE_SNAPSHOT_BEHIND * len(d) and d.index.snapshot_fresh()
        kept_state = _state(d)
    assert (snapshot.stat().st_mtime_ns, snapshot.read_bytes()[:128]) == written  # not written again
    with monkeypatch.context() as m:
        m.setattr(memory_lists, "build", _no_build)
        with Deduplicator(EngineConfig(), path) as d:  # loaded and brought up to date: the same lists
            assert _state(d) == kept_state and d.index.snapshot_next_seq < d.index.next_seq
            d.process_batch(articles[502:560], now=NOW)  # now far more than 1 % behind
            assert not d.index.snapshot_fresh()
            after = _state(d)
    assert snapshot.read_bytes()[:128] != written[1]  # written again (another token)
    with Deduplicator(EngineConfig(), path) as d:
        assert _state(d) == after and d.index.snapshot_next_seq == d.index.next_seq
        assert d.remove(articles[0].id)
        assert d.index.logged_deletions == 1  # (behind by one deletion, no article)
        assert d.index.snapshot_fresh() == (1 <= index_module.CLOSE_SNAPSHOT_BEHIND * len(d))
        monkeypatch.setattr(index_module, "CLOSE_SNAPSHOT_BEHIND", 0.0)
        assert not d.index.snapshot_fresh()  # (and so written at this close)
        removed = _state(d)
    with monkeypatch.context() as m:
        m.setattr(memory_lists, "build", _no_build)
        with Deduplicator(EngineConfig(), path) as d:
            assert _state(d) == removed and d.index.logged_deletions == 0
