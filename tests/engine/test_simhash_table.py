"""stream_dedup.simhash_table: the permuted SimHash tables in memory, against a brute-force model."""

from __future__ import annotations

import numpy as np
import pytest

from stream_dedup import next_arrays, simhash_table
from stream_dedup.simhash import PermutedTables
from stream_dedup.simhash_table import REMOVED, SimhashTable


def brute_force(model: dict[int, int], tables: PermutedTables, query: int, k: int) -> list[int]:
    """Each seq once per table where it shares the key bits with the query, if within ``k`` bits."""
    out = []
    for t, mask in enumerate(tables.key_masks):
        q = tables.permute(query, t)
        out += [seq for seq, fp in model.items()
                if tables.permute(fp, t) & mask == q & mask and (fp ^ query).bit_count() <= k]
    return sorted(out)


def near(rng: np.random.Generator, fp: int, bits: int) -> int:
    for bit in rng.choice(64, size=bits, replace=False):
        fp ^= 1 << int(bit)
    return fp


@pytest.mark.parametrize("k,blocks", [(3, 5), (2, 4)])
def test_probe_equals_brute_force_through_growth_removal_and_rehash(k: int, blocks: int) -> None:
    rng = np.random.default_rng(k * 10 + blocks)
    tables = PermutedTables(k, blocks)
    table = SimhashTable(tables.key_masks, slots=8)  # grows many times
    model: dict[int, int] = {}
    stories = [int(x) * 2 + 1 for x in rng.integers(0, 2**62, size=20)]
    for seq in range(3000):
        fp = near(rng, stories[seq % 20], int(rng.integers(0, 6))) if seq % 3 else int(rng.integers(0, 2**63)) << 1
        table.add(tables.permute_array(fp), seq)
        model[seq] = fp
        if seq % 4 == 3:  # remove an older one (a slot becomes REMOVED; the run behind it stays reachable)
            gone = int(rng.choice(list(model)))
            table.remove(tables.permute_array(model.pop(gone)), gone)
        if seq % 97 == 0:
            for query in (stories[seq % 20], near(rng, stories[(seq + 1) % 20], 3), fp):
                assert sorted(table.probe(tables.permute_array(query), k).tolist()) == \
                    brute_force(model, tables, query, k)
    assert table.entries == len(model) * len(tables)
    assert table.as_set() == {(t, tables.permute(fp, t), seq) for seq, fp in model.items() for t in range(len(tables))}
    for query in stories:
        assert sorted(table.probe(tables.permute_array(query), k).tolist()) == brute_force(model, tables, query, k)


def test_removed_slots_are_reused_and_dropped_by_a_rehash() -> None:
    tables = PermutedTables()
    table = SimhashTable(tables.key_masks, slots=128)
    fps = tables.permute_many(np.arange(1, 5, dtype=np.uint64) * 0x0123_4567_89AB_CDEF)
    table.add_many(fps, np.arange(4, dtype=np.uint32))
    size = table.fps.shape[0]
    table.remove(fps[0], 0)
    table.remove(fps[0], 0)  # absent now: ignored
    assert table.entries == 30 and (table.tags == REMOVED).sum() == 10
    table.add(fps[0], 7)  # reuses removed slots: the table does not grow
    assert table.fps.shape[0] == size and table.entries == 40
    assert sorted(table.probe(fps[0], 0).tolist()) == [7] * 10
    for seq in range(1, 4):
        table.remove(fps[seq], seq)
    table.reserve(60)  # 40 used + 60 > 70 % of 128: rehashed, the removed slots gone
    assert (table.tags == REMOVED).sum() == 0 and table.entries == 10
    assert table.as_set() == {(t, int(fps[0, t]), 7) for t in range(10)}


def test_the_tables_hold_at_most_254_tables() -> None:
    with pytest.raises(ValueError, match="254"):
        SimhashTable([0] * 255)


def test_probe_and_removal_mid_growth_match_brute_force(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiny growth steps: probes, adds and removals meet a table being initialised and a draining
    table across several growths; a snapshot (settle, arrays copied, loaded) taken mid-growth
    holds the same entries."""
    monkeypatch.setattr(next_arrays, "_threaded", False)  # a growth stepped through, a chunk per add
    monkeypatch.setattr(next_arrays, "FILL_CHUNK", 3)
    monkeypatch.setattr(simhash_table, "MIN_MIGRATE", 2)
    monkeypatch.setattr(simhash_table, "MIGRATE_PER_ENTRY", 1)
    rng = np.random.default_rng(5)
    tables = PermutedTables(3, 5)
    table = SimhashTable(tables.key_masks, slots=8)
    model: dict[int, int] = {}
    stories = [int(x) * 2 + 1 for x in rng.integers(0, 2**62, size=20)]
    seen = {"prepare": 0, "drain": 0}
    sizes, last_snapshot, snapshots = set(), 0, 0
    for seq in range(2500):
        fp = near(rng, stories[seq % 20], int(rng.integers(0, 6))) if seq % 3 else int(rng.integers(0, 2**63)) << 1
        table.add(tables.permute_array(fp), seq)
        model[seq] = fp
        if seq % 4 == 3:
            gone = int(rng.choice(list(model)))
            table.remove(tables.permute_array(model.pop(gone)), gone)
        seen["prepare"] += table._next is not None
        seen["drain"] += table.old_tags.shape[0] > 0
        sizes.add(table.fps.shape[0])
        if seq % 13 == 0:
            query = stories[seq % 20]
            assert sorted(table.probe(tables.permute_array(query), 3).tolist()) == brute_force(model, tables, query, 3)
        if (table._next is not None or table.old_tags.shape[0]) and seq - last_snapshot > 600:
            last_snapshot, snapshots = seq, snapshots + 1
            table.settle()
            copy = SimhashTable(tables.key_masks, slots=1)
            for name in SimhashTable.ARRAYS:
                setattr(copy, name, getattr(table, name).copy())
            copy.loaded()
            assert copy.as_set() == table.as_set()
            table = copy
        assert table.entries == len(model) * len(tables)
    assert table.as_set() == {(t, tables.permute(fp, t), seq) for seq, fp in model.items() for t in range(len(tables))}
    assert min(seen.values()) > 50 and len(sizes) >= 4 and snapshots >= 2, (seen, sizes, snapshots)


def test_a_large_add_mid_growth_finishes_the_growth_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """An add larger than what the paced growth leaves room for finishes it (and grows again) at once."""
    monkeypatch.setattr(next_arrays, "_threaded", False)  # a growth stepped through, a chunk per add
    monkeypatch.setattr(next_arrays, "FILL_CHUNK", 1)
    monkeypatch.setattr(simhash_table, "MIN_MIGRATE", 1)
    monkeypatch.setattr(simhash_table, "MIGRATE_PER_ENTRY", 1)
    rng = np.random.default_rng(11)
    tables = PermutedTables(3, 5)
    table = SimhashTable(tables.key_masks, slots=64)
    model: dict[int, int] = {}
    seq, large = 0, 0
    while large < 3:
        n = 300 if table._next is not None or table.old_tags.shape[0] else 1
        large += n > 1
        fps = [int(x) << 1 for x in rng.integers(0, 2**62, size=n)]
        table.add_many(tables.permute_many(np.array(fps, dtype=np.uint64)), np.arange(seq, seq + n, dtype=np.uint32))
        model.update(zip(range(seq, seq + n), fps, strict=True))
        seq += n
    assert table.as_set() == {(t, tables.permute(fp, t), s) for s, fp in model.items() for t in range(len(tables))}
    assert table.entries == len(model) * len(tables)


def test_file_article_files_as_the_three_calls_it_replaces() -> None:
    """file_article (an article's LSH buckets, SimHash tables and passage lists in one call, after
    the three tables' reserve) leaves the tables as BandTable.file, SimhashTable.add and
    MemberLists.file do, through growths of every table (small starting sizes, lists at their
    cap dropping their oldest member) and with any of the three empty."""
    from stream_dedup.band_table import BandTable
    from stream_dedup.list_table import MemberLists

    rng = np.random.default_rng(5)
    tables = PermutedTables()
    routes = [(BandTable(bands=4, rows=2, cap=3, slots=8, nodes=8), SimhashTable(tables.key_masks, slots=8),
               MemberLists(cap=2, slots=8, nodes=8)) for _ in range(2)]
    for seq in range(600):
        keys = rng.integers(0, 40, 4).astype(np.uint64) if rng.random() < 0.9 else np.zeros(0, dtype=np.uint64)
        permuted = tables.permute_array(int(rng.integers(0, 1 << 63))) if rng.random() < 0.9 \
            else np.zeros(0, dtype=np.uint64)
        joins = np.unique(rng.integers(0, 60, int(rng.integers(0, 6)))).astype(np.uint64)
        (buckets, simhash, lists), (f_buckets, f_simhash, f_lists) = routes
        buckets.file([(keys, seq)])
        if permuted.shape[0]:
            simhash.add(permuted, seq)
        lists.file([(joins, seq)])
        f_simhash.reserve(permuted.shape[0])
        f_buckets.reserve(keys.shape[0])
        f_lists.reserve(joins.shape[0])
        simhash_table._file_article(*f_buckets._args, keys, f_simhash.fps, f_simhash.tags, f_simhash.seqs,
                                    f_simhash.meta, permuted, f_simhash.masks, *f_lists._args, joins, seq,
                                    f_buckets.cap, f_lists.cap)
    (buckets, simhash, lists), (f_buckets, f_simhash, f_lists) = routes
    assert f_buckets.as_dict() == buckets.as_dict() and f_buckets.members == buckets.members
    assert f_simhash.as_set() == simhash.as_set() and len(simhash.as_set()) > 500
    assert f_lists.as_dict() == lists.as_dict() and any(len(v) == 2 for v in lists.as_dict().values())
    assert f_buckets.slot_keys.shape[0] > 8 and f_simhash.fps.shape[0] > 8  # (they grew)


def test_reserve_counting_its_room_down_never_lets_in_more_than_its_check() -> None:
    """SimhashTable.reserve counts down the entries the table can take before a growth check is
    due (MemberLists.reserve's room): after every add and removal through several growths of a
    tiny table, the room left never lets in more than the check would (an off-by-one fails it), the
    slots used stay within MAX_LOAD, and the entries are the ones added and not removed."""
    rng = np.random.default_rng(11)
    tables = PermutedTables()
    table = SimhashTable(tables.key_masks, slots=8)
    live: dict[int, np.ndarray] = {}
    for seq in range(3000):
        if live and rng.random() < 0.2:
            old = int(rng.choice(list(live)))
            table.remove(live.pop(old), old)
        permuted = tables.permute_array(int(rng.integers(0, 1 << 63)))
        table.add(permuted, seq)
        live[seq] = permuted
        assert table._room >= 0
        if table._room:  # (0 while a growth is under way)
            assert table.meta.item(0) + table._room <= simhash_table.PREPARE_LOAD * table.fps.shape[0]
        assert table.meta.item(0) <= simhash_table.MAX_LOAD * table.fps.shape[0]
    assert table.as_set() == {(t, int(p[t]), s) for s, p in live.items() for t in range(p.shape[0])}
    assert table.fps.shape[0] > 8


def test_expected_entries_come_without_step_by_step_growth(monkeypatch: pytest.MonkeyPatch) -> None:
    """``expect(slots)`` prepares one larger table for all of them: the adds that follow take it and
    grow no further, and probes find what a table grown step by step finds."""
    monkeypatch.setattr(next_arrays, "_threaded", False)
    tables = PermutedTables(3, 6)
    rng = np.random.default_rng(5)
    fps = [int(x) << 1 for x in rng.integers(0, 2**62, 3000)]

    def run(expect: int) -> tuple[set[int], SimhashTable]:
        table = SimhashTable(tables.key_masks, slots=16)
        table.expect(expect)
        sizes = set()
        for seq, fp in enumerate(fps):
            table.add(tables.permute_array(fp), seq)
            sizes.add(table.fps.shape[0])
        return sizes, table

    plain_sizes, plain = run(0)
    sizes, table = run(int(plain.meta[0]))
    assert len(plain_sizes) >= 4 and len(sizes) <= 2, (plain_sizes, sizes)
    assert table.as_set() == plain.as_set()
    for fp in fps[::50]:
        query = tables.permute_array(near(rng, fp, 2))
        assert sorted(table.probe(query, 3).tolist()) == sorted(plain.probe(query, 3).tolist())
