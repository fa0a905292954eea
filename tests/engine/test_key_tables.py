"""stream_dedup.key_tables: the id and exact-hash tables in memory (format 11) answer as the ``I``
and ``X`` keys did, and a 64-bit key that is another id's or text's is never taken for a match."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stream_dedup import key_tables
from stream_dedup.config import EngineConfig
from stream_dedup.engine import Deduplicator
from stream_dedup.list_table import EMPTY
from stream_dedup.record import Article

NOW = 1_700_000_000.0


def test_keys_are_the_ids_hash_and_the_exact_hashs_halves() -> None:
    assert key_tables.id_keys(["a", "ü-東京"]).tolist() == [key_tables.id_key("a"), key_tables.id_key("ü-東京")]
    assert key_tables.raw_id_keys(["ü".encode()]).tolist() == [key_tables.id_key("ü")]
    exact = bytes(range(16))
    halves = int.from_bytes(exact[:8], "big") ^ int.from_bytes(exact[8:], "big")
    assert key_tables.exact_key(exact) == halves == key_tables.exact_keys([exact]).tolist()[0]
    heads = np.frombuffer(exact * 2, dtype="V16")  # (the record heads' field)
    assert key_tables.exact_keys(heads).tolist() == [halves, halves]
    # the one value a free slot holds is never a key
    assert key_tables.exact_key(b"\xff" * 8 + bytes(8)) == int(EMPTY) - 1
    assert key_tables.exact_keys([b"\xff" * 8 + bytes(8)]).tolist() == [int(EMPTY) - 1]


def test_a_key_table_holds_the_newest_seq_of_each_key_and_none_elsewhere() -> None:
    table = key_tables.KeyTable(slots=4)
    keys = np.arange(1, 5001, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    table.add_entries(keys, np.arange(5000, dtype=np.uint32))
    table.add_entries(keys[:10], np.arange(9000, 9010, dtype=np.uint32))  # (a key taken again: the newest)
    found = table.seqs(np.concatenate([keys[:12], np.array([7], dtype=np.uint64)]))
    assert found.tolist() == [*range(9000, 9010), 10, 11, -1]
    table.remove(keys[:1], 5)  # (another seq: kept)
    table.remove(keys[1:2], 9001)
    assert table.seqs(keys[:3]).tolist() == [9000, -1, 9002]
    assert table.members == 4999 and table.seqs(np.zeros(0, dtype=np.uint64)).shape == (0,)


def _text(n: int) -> str:
    return " ".join(f"w{n}x{i}" for i in range(60))


def test_an_id_whose_key_holds_another_article_is_decided_afresh_not_replayed(tmp_path: Path) -> None:
    """The id table says "b" is article "a"'s seq (as a 64-bit collision would): the record says
    otherwise, so "b" is a new article, in a batch and one at a time; "a" still replays."""
    with Deduplicator(EngineConfig(), tmp_path) as d:
        first = d.process(Article(id="a", text=_text(1)), now=NOW)
        lists = d.index.lists()
        a = d.index.seq_of("a")
        lists.ids.add_entries(key_tables.id_keys(["b", "c"]), np.array([a, a], dtype=np.uint32))
        assert d.index.seq_of("b") is None and d.decision_of("b") is None
        out = d.process_batch([Article(id="b", text=_text(2)), Article(id="x", text=_text(3))], now=NOW)
        assert [x.type for x in out] == ["new", "new"] and not out[0].seen_before
        single = d.process(Article(id="c", text=_text(4)), now=NOW)
        assert single.type == "new" and not single.seen_before
        again = d.process(Article(id="a", text="anything"), now=NOW)
        assert again.seen_before and again.to_event()["type"] == first.to_event()["type"]
        assert d.index.seq_of("b") == 1 and d.index.seq_of("c") == 3  # (they took the key)


@pytest.mark.parametrize("size", [1, 3])
def test_a_text_whose_exact_key_holds_another_article_is_not_its_exact_copy(tmp_path: Path, size: int) -> None:
    """The exact-hash table says text 2 is article "a"'s (as a 64-bit collision would): its record's
    exact hash differs, so "b" is decided on its candidates (new), not as an exact copy; a true
    exact copy still is one."""
    with Deduplicator(EngineConfig(), tmp_path) as d:
        d.process(Article(id="a", text=_text(1)), now=NOW)
        exact = d.fingerprint(Article(id="b", text=_text(2))).exact
        d.index.lists().exacts.add_entries(key_tables.exact_keys([exact]), np.array([0], dtype=np.uint32))
        assert d.index.exact_match(exact) is None
        batch = [Article(id="b", text=_text(2)), Article(id="a-copy", text=_text(1)), Article(id="z", text=_text(9))]
        out = [x for i in range(0, 3, size) for x in d.process_batch(batch[i:i + size], now=NOW)]
        assert [(x.type, x.method) for x in out[:2]] == [("new", None), ("duplicate-of", "exact")]
        assert out[1].duplicate_of == "a"


def test_removed_and_reindexed_ids_and_texts_follow_the_records(tmp_path: Path) -> None:
    """Remove an article: its id and exact hash leave the tables (a copy of its text is new again);
    index it again: they name the new seq; reopened (snapshot) and rebuilt, the same."""
    with Deduplicator(EngineConfig(), tmp_path) as d:
        d.process_batch([Article(id="a", text=_text(1)), Article(id="b", text=_text(2))], now=NOW)
        assert d.remove("a") and d.index.seq_of("a") is None
        exact = d.fingerprint(Article(id="a", text=_text(1))).exact
        assert d.index.exact_match(exact) is None
        out = d.process_batch([Article(id="a", text=_text(1)), Article(id="a2", text=_text(1))], now=NOW)
        assert [(x.type, x.method) for x in out] == [("new", None), ("duplicate-of", "exact")]
        live = (d.index.lists().ids.as_dict(), d.index.lists().exacts.as_dict())
        assert d.index.seq_of("a") == 2 and d.index.exact_match(exact) == 2
    with Deduplicator(EngineConfig(), tmp_path) as d:
        assert (d.index.lists().ids.as_dict(), d.index.lists().exacts.as_dict()) == live
    (tmp_path / "memory-lists-3.bin").unlink()
    with Deduplicator(EngineConfig(), tmp_path) as d:
        assert (d.index.lists().ids.as_dict(), d.index.lists().exacts.as_dict()) == live
        assert d.index.key_counts().keys() <= {b"A", b"D", b"T", b"M"}
