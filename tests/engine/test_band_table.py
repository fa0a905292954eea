"""stream_dedup.band_table and stream_dedup.list_table: the in-memory LSH buckets (member lists) against a
plain dict-of-lists model."""

from __future__ import annotations

import random

import numpy as np
import pytest

from stream_dedup import list_table, next_arrays
from stream_dedup.band_table import BandTable
from stream_dedup.list_table import EMPTY


class Model:
    """The buckets as lists, newest first, capped (what the RocksDB lists of format 7 were)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.lists: dict[int, list[int]] = {}

    def add(self, keys: list[int], seq: int) -> None:
        for k in keys:
            self.lists[k] = ([seq] + self.lists.get(k, []))[: self.cap]

    def remove(self, keys: list[int], seq: int) -> None:
        for k in keys:
            if seq in self.lists.get(k, []):
                self.lists[k].remove(seq)


def _remove_one_at_random(rnd: random.Random, added: list[tuple[list[int], int]], table: list_table.MemberLists,
                          model: Model) -> None:
    """Take one of the ``added`` articles, at random, out of the table and the model."""
    keys, old = added.pop(rnd.randrange(len(added)))
    table.remove(np.array(keys, dtype=np.uint64), old)
    model.remove(keys, old)


@pytest.mark.parametrize("cap", [1, 3, 256])
def test_random_adds_and_removes_match_the_model(cap: int) -> None:
    rnd = random.Random(cap)
    table = BandTable(bands=4, rows=3, cap=cap, slots=16, nodes=8)  # tiny: it must grow and rehash
    model = Model(cap)
    universe = [rnd.getrandbits(64) % (2**64 - 1) for _ in range(300)]  # EMPTY itself is never a key
    added: list[tuple[list[int], int]] = []
    for seq in range(3000):
        if added and rnd.random() < 0.3:
            _remove_one_at_random(rnd, added, table, model)
        keys = rnd.sample(universe, 4)
        table.add(np.array([keys], dtype=np.uint64), np.array([seq], dtype=np.uint32))
        model.add(keys, seq)
        added.append((keys, seq))
    for k in universe:
        assert table.lookup(np.array([k], dtype=np.uint64)).tolist() == model.lists.get(k, [])
    assert table.members == sum(len(v) for v in model.lists.values())
    assert table.slot_keys.shape[0] > 16
    assert table.node_seq.shape[0] > 8 if cap > 1 else table.meta[1] == 0  # lists of one member take no node


def test_lookup_concatenates_buckets_in_the_order_asked() -> None:
    table = BandTable(bands=2, rows=1, cap=10)
    table.add(np.array([[1, 2], [1, 3]], dtype=np.uint64), np.array([7, 8], dtype=np.uint32))
    assert table.lookup(np.array([3, 1, 99, 2], dtype=np.uint64)).tolist() == [8, 8, 7, 7]
    assert table.lookup(np.zeros(0, dtype=np.uint64)).tolist() == []


def test_emptied_buckets_are_dropped_when_the_table_is_rehashed() -> None:
    table = BandTable(bands=1, rows=1, cap=4, slots=16)
    for seq in range(100):  # each key used once, then removed: the slots fill with emptied buckets
        table.add(np.array([[seq]], dtype=np.uint64), np.array([seq], dtype=np.uint32))
        table.remove(np.array([seq], dtype=np.uint64), seq)
    assert table.members == 0 and table.slot_keys.shape[0] == 16  # rehashed in place, never grown
    assert table.meta[0] <= 12


def test_keys_pack_bands_and_rows_exactly_up_to_three_rows() -> None:
    sig = np.array([1, 2, 3, 4, 5, 6, 0xFFFF, 0xFFFF], dtype=">u2")
    table = BandTable(bands=2, rows=3, cap=1)
    raw = sig.view(np.uint16)  # the record's big-endian bytes, read natively by the kernel
    expect = [(0 << 48) | (int(raw[0]) << 32) | (int(raw[1]) << 16) | int(raw[2]),
              (1 << 48) | (int(raw[3]) << 32) | (int(raw[4]) << 16) | int(raw[5])]
    assert table.keys(sig).tolist() == expect
    assert table.keys(np.stack([sig, sig])).tolist() == [expect, expect]  # (np.stack makes them native)
    assert table.keys(sig.astype(np.uint16)).tolist() == expect  # the same values, the same keys


def test_keys_of_more_than_three_rows_are_hashed_and_never_empty() -> None:
    table = BandTable(bands=4, rows=8, cap=1)
    rng = np.random.default_rng(3)
    sigs = rng.integers(0, 2**16, size=(2000, 32), dtype=np.uint16)
    keys = table.keys(sigs)
    assert keys.shape == (2000, 4) and not (keys == EMPTY).any()
    assert len(set(keys.ravel().tolist())) == keys.size  # no collision among 8,000 random bands
    same = sigs[:2].copy()
    same[1, :8] = same[0, :8]  # band 0 agrees, the others do not
    k = table.keys(same)
    assert k[0, 0] == k[1, 0] and (k[0, 1:] != k[1, 1:]).all()


@pytest.mark.parametrize("cap", [2, 5, 1000])
def test_incremental_growth_matches_the_model_mid_migration(cap: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiny growth steps, so adds, removes and lookups meet a table being initialised, a draining
    table and node arrays being copied, across several growths; a snapshot (settle, arrays copied,
    loaded) taken mid-growth holds the same lists and goes on the same."""
    monkeypatch.setattr(next_arrays, "_threaded", False)  # a growth stepped through, a chunk per add
    monkeypatch.setattr(next_arrays, "FILL_CHUNK", 100)
    monkeypatch.setattr(list_table, "MIN_MIGRATE", 2)
    monkeypatch.setattr(list_table, "MIN_COPY", 3)
    monkeypatch.setattr(list_table, "MIGRATE_PER_ENTRY", 1)
    monkeypatch.setattr(list_table, "COPY_PER_ENTRY", 1)
    rnd = random.Random(cap + 1)
    table = BandTable(bands=3, rows=3, cap=cap, slots=8, nodes=4)
    model = Model(cap)
    universe = [rnd.getrandbits(64) % (2**64 - 1) for _ in range(2000)]
    added: list[tuple[list[int], int]] = []
    seen = {"prepare": 0, "drain": 0, "copy": 0}
    sizes = set()
    last_snapshot, snapshots = 0, 0
    for seq in range(6000):
        if added and rnd.random() < 0.25:
            keys, old = added.pop(rnd.randrange(len(added)))
            table.remove(np.array(keys, dtype=np.uint64), old)
            model.remove(keys, old)
        keys = rnd.sample(universe[: 200 + seq // 3], 3)
        table.add(np.array([keys], dtype=np.uint64), np.array([seq], dtype=np.uint32))
        model.add(keys, seq)
        added.append((keys, seq))
        seen["prepare"] += table._next is not None
        seen["drain"] += table.old_keys.shape[0] > 0
        seen["copy"] += table.mirror_seq.shape[0] > 0
        sizes.add(table.slot_keys.shape[0])
        probe = rnd.sample(universe, 5)
        expect = [m for k in probe for m in model.lists.get(k, [])]
        assert table.lookup(np.array(probe, dtype=np.uint64)).tolist() == expect
        growing = table.old_keys.shape[0] or table.mirror_seq.shape[0] or table._next is not None
        if growing and seq - last_snapshot > 1200:  # a snapshot mid-growth
            last_snapshot = seq
            snapshots += 1
            table.settle()
            copy = BandTable(bands=3, rows=3, cap=cap, slots=1, nodes=1)
            for name in ("slot_keys", "slot_head", "node_seq", "node_next", "meta"):
                setattr(copy, name, getattr(table, name).copy())
            copy.loaded()
            assert copy.as_dict() == table.as_dict()
            table = copy
        live = {k: v for k, v in model.lists.items() if v}
        if seq % 250 == 0:
            assert table.as_dict() == live
        assert table.members == sum(len(v) for v in model.lists.values())
    assert table.as_dict() == {k: v for k, v in model.lists.items() if v}
    assert min(seen.values()) > 50 and len(sizes) >= 4 and snapshots >= 3, (seen, sizes, snapshots)
    assert table.meta[4] == sum(1 for v in model.lists.values() if v)


def test_a_large_add_mid_growth_finishes_the_growth_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """An add larger than what the paced growth leaves room for finishes it (and grows again) at once."""
    monkeypatch.setattr(next_arrays, "_threaded", False)  # a growth stepped through, a chunk per add
    monkeypatch.setattr(next_arrays, "FILL_CHUNK", 1)
    monkeypatch.setattr(list_table, "MIN_MIGRATE", 1)
    monkeypatch.setattr(list_table, "MIN_COPY", 1)
    monkeypatch.setattr(list_table, "MIGRATE_PER_ENTRY", 1)
    monkeypatch.setattr(list_table, "COPY_PER_ENTRY", 1)
    rnd = random.Random(9)
    table = BandTable(bands=2, rows=3, cap=3, slots=64, nodes=64)
    model = Model(3)
    universe = [rnd.getrandbits(64) % (2**64 - 1) for _ in range(5000)]
    seq, large = 0, 0
    while large < 3:
        growing = table.old_keys.shape[0] or table.mirror_seq.shape[0] or table._next is not None
        n = 400 if growing else 1
        large += n > 1
        keys = [rnd.sample(universe[:300 + seq // 2], 2) for _ in range(n)]
        table.add(np.array(keys, dtype=np.uint64), np.arange(seq, seq + n, dtype=np.uint32))
        for i, k in enumerate(keys):
            model.add(k, seq + i)
        seq += n
        assert table.as_dict() == {k: v for k, v in model.lists.items() if v}
    assert table.members == sum(len(v) for v in model.lists.values())


def test_a_list_of_one_member_is_held_in_its_slot() -> None:
    """One-member lists take no node (their slot's head is -2 - seq); a second member moves the first
    into a node; a seq too large for an int32 head takes a node; removals and cap 1 work on both."""
    table = BandTable(bands=4, rows=3, cap=3)
    table.add(np.array([[1, 2]], dtype=np.uint64), np.array([7], dtype=np.uint32))
    assert table.meta[1] == 0 and table.members == 2
    assert table.lookup(np.array([1, 2], dtype=np.uint64)).tolist() == [7, 7]
    table.add(np.array([[1, 3]], dtype=np.uint64), np.array([8], dtype=np.uint32))
    assert table.meta[1] == 2  # key 1 holds two: two nodes; key 3 one, inline
    assert table.as_dict() == {1: [8, 7], 2: [7], 3: [8]}
    big = list_table.INLINE_MAX + 1
    table.add(np.array([[4, 2]], dtype=np.uint64), np.array([big], dtype=np.uint32))
    assert table.as_dict() == {1: [8, 7], 2: [big, 7], 3: [8], 4: [big]}
    table.remove(np.array([2, 3, 4], dtype=np.uint64), 7)  # 3 and 4 do not hold 7
    table.remove(np.array([3], dtype=np.uint64), 8)
    table.remove(np.array([4], dtype=np.uint64), big)
    assert table.as_dict() == {1: [8, 7], 2: [big]}
    assert table.members == 3 and int(table.meta[4]) == 2  # members, lists not empty
    one = BandTable(bands=4, rows=3, cap=1)
    for seq in (5, big, 6, big + 1, 9):
        one.add(np.array([[10]], dtype=np.uint64), np.array([seq], dtype=np.uint32))
        assert one.as_dict() == {10: [seq]} and one.members == 1


@pytest.mark.parametrize("seed", range(3))
def test_reserve_counting_its_room_down_never_lets_an_add_outgrow_the_table(seed: int) -> None:
    """reserve counts down the entries a table can take before a growth check is due (found by the
    call that last looked) instead of looking at every call: after every add of 0-40 entries to a
    tiny table (removals between), the nodes used stay within the node arrays and the slots used
    within MAX_LOAD of the table, the room left never lets in more than reserve's own check would
    (an off-by-one in it, or a node counted once, fails here), and the lists equal the model's."""
    rnd = random.Random(seed)
    table = list_table.MemberLists(cap=1000, slots=16, nodes=8)
    model = Model(1000)
    added: list[tuple[list[int], int]] = []
    for seq in range(4000):
        if added and rnd.random() < 0.2:
            _remove_one_at_random(rnd, added, table, model)
        keys = rnd.sample(range(1, 5000), rnd.choice([0, 1, 2, 7, 40]))
        table.file([(np.array(keys, dtype=np.uint64), seq)])
        model.add(keys, seq)
        added.append((keys, seq))
        assert table._room >= 0
        assert table.meta.item(1) <= table.node_seq.shape[0]
        assert table.meta.item(0) <= list_table.MAX_LOAD * table.slot_keys.shape[0]
        if table._room:  # (0 while a growth is under way: past the thresholds then, as reserve intends)
            # the room left is no more than reserve's own check would let in without a growth
            assert table.meta.item(1) + 2 * table._room <= list_table.PREPARE_NODES * table.node_seq.shape[0]
            assert table.meta.item(0) + table._room <= list_table.PREPARE_LOAD * table.slot_keys.shape[0]
    assert table.as_dict() == {k: v for k, v in model.lists.items() if v}


@pytest.mark.parametrize("existing", [0, 400])
def test_expected_entries_come_without_step_by_step_growth(existing: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``expect(slots, nodes)`` prepares one larger table and one set of larger node arrays for all
    of them: the adds that follow take those and grow no further (without it the table doubles
    many times on the way), and the lists are the model's."""
    monkeypatch.setattr(next_arrays, "_threaded", False)  # (filled in the caller: the same arrays)

    def run(expect: bool) -> tuple[set[int], set[int], BandTable, Model]:
        rnd = random.Random(11)
        table, model = BandTable(bands=4, rows=3, cap=3, slots=16, nodes=8), Model(3)
        universe = [rnd.getrandbits(64) % (2**64 - 1) for _ in range(30000)]
        slot_sizes, node_sizes = set(), set()
        for seq in range(existing + 3000):
            if seq == existing and expect:
                table.expect(slots_needed - int(table.meta[0]) if existing else slots_needed, nodes_needed)
            keys = rnd.sample(universe, 4)
            table.add(np.array([keys], dtype=np.uint64), np.array([seq], dtype=np.uint32))
            model.add(keys, seq)
            if seq >= existing:
                slot_sizes.add(table.slot_keys.shape[0])
                node_sizes.add(table.node_seq.shape[0])
        return slot_sizes, node_sizes, table, model

    slots_needed = nodes_needed = 0
    plain_slots, plain_nodes, plain, model = run(expect=False)
    slots_needed, nodes_needed = int(plain.meta[0]), int(plain.meta[1])  # (what the adds took: the caller's estimate)
    slot_sizes, node_sizes, table, model2 = run(expect=True)
    assert len(plain_slots) >= 3 and len(plain_nodes) >= 3  # (step by step without it)
    assert len(slot_sizes) <= 2 and len(node_sizes) <= 2, (slot_sizes, node_sizes)  # (the current, then the prepared)
    assert table.as_dict() == plain.as_dict() == {k: v for k, v in model.lists.items() if v}
    assert table.slot_keys.shape[0] <= 2 * plain.slot_keys.shape[0]  # (no more memory than the growth would reach)
    assert model2.lists == model.lists


def test_expect_does_nothing_while_a_growth_is_under_way_or_where_there_is_room() -> None:
    table = BandTable(bands=4, rows=3, cap=3, slots=1 << 12, nodes=1 << 12)
    table.expect(100, 100)  # room already
    assert table._next is None and table._next_nodes is None
    table.expect(1 << 20, 0)
    prepared = table._next
    assert prepared is not None and prepared.size >= (1 << 20) / list_table.PREPARE_LOAD
    table.expect(1 << 22, 1 << 22)  # (a growth under way: left alone)
    assert table._next is prepared and table._next_nodes is None
    table.add(np.array([[1, 2, 3, 4]], dtype=np.uint64), np.array([0], dtype=np.uint32))
    prepared.ready(wait=True)
    table.add(np.array([[5, 6, 7, 8]], dtype=np.uint64), np.array([1], dtype=np.uint32))
    assert table.slot_keys.shape[0] == prepared.size and table.as_dict() == {1: [0], 2: [0], 3: [0], 4: [0],
                                                                             5: [1], 6: [1], 7: [1], 8: [1]}
