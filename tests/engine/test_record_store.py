"""RecordStore (the records a verification reads, in one compiled buffer) against a model of it:
a FIFO cache by halves, never a wrong record."""

from __future__ import annotations

import numpy as np
import pytest

from stream_dedup.record_store import HEADER, RecordStore


class Model:
    """What the store must hold: the records put since the current half began, and those of the
    half before it (both in put order), less those deleted since."""

    def __init__(self, limit: int, slots: int) -> None:
        self.segment, self.slots = limit // 2, slots
        self.current: dict[int, bytes] = {}
        self.previous: dict[int, bytes] = {}
        self.fill = 0

    def put(self, seq: int, record: bytes) -> bool:
        need = HEADER + len(record)
        if need > self.segment or 2 * (len(self.held()) + 1) > self.slots:  # (the map at most half full)
            return False
        if seq in self.current or seq in self.previous:
            return True
        if self.fill + need > self.segment:
            self.previous, self.current, self.fill = self.current, {}, 0
        self.current[seq] = record
        self.fill += need
        return True

    def delete(self, seq: int) -> bool:
        return self.current.pop(seq, None) is not None or self.previous.pop(seq, None) is not None

    def held(self) -> dict[int, bytes]:
        return {**self.previous, **self.current}


@pytest.mark.parametrize("seed", range(6))
def test_the_store_holds_what_its_model_holds(seed: int) -> None:
    """Random puts (records of 0-300 bytes, seqs from a small range, a few put again, the map sized
    for larger records than some: many collide in it, and some puts find it half full), deletes and reads: every read gives the record put or None, exactly
    as the model (the newest half and the one before, less the deleted) says; the count and the
    bytes written stay within the limit. Deletes take entries out of the middle of probe runs (the
    backward shift: an entry left behind its hole would be lost, a wrong read or a None)."""
    rng = np.random.default_rng(seed)
    limit = int(rng.integers(600, 4000))
    store = RecordStore(limit, min_record=int(rng.integers(8, 120)))  # (a small map: long probe runs)
    model = Model(limit, store.keys.shape[0])
    for _ in range(3000):
        op = rng.random()
        seq = int(rng.integers(0, 400))
        if op < 0.6:
            record = rng.integers(0, 256, int(rng.integers(0, 300)), dtype=np.uint8).tobytes()
            assert store.put(seq, record) == model.put(seq, record)
        elif op < 0.8:
            assert store.delete(seq) == model.delete(seq)
        else:
            seqs = [int(s) for s in rng.integers(0, 400, int(rng.integers(0, 30)))]
            held = model.held()
            assert store.get_many(seqs) == [held.get(s) for s in seqs]
        assert len(store) == len(model.held())
        assert store.held_bytes <= limit
        assert store.nbytes == store.held_bytes + store.keys.nbytes + store.vals.nbytes
    held = model.held()
    assert store.get_many(list(range(400))) == [held.get(s) for s in range(400)]
    assert len(held) > 3  # (the run kept records: the test saw the store at work)


def test_a_record_larger_than_half_the_store_or_the_last_seq_is_not_held() -> None:
    store = RecordStore(1000, min_record=8)
    assert not store.put(1, bytes(500 - HEADER + 1))
    assert store.put(2, bytes(500 - HEADER))
    assert store.get_many([1, 2]) == [None, bytes(500 - HEADER)]
    assert not RecordStore(0, min_record=8).put(1, b"")  # (no room at all: nothing held)
    assert store.put((1 << 32) - 2, b"x") and not store.put((1 << 32) - 1, b"x")  # (the last seq: not held)
    assert store.get_many([(1 << 32) - 2, (1 << 32) - 1]) == [b"x", None]


def test_the_map_is_never_more_than_half_full() -> None:
    """Records smaller than the ``min_record`` the store was sized for fill its map before its
    buffer: past half of its slots the store refuses them (not held) rather than fill it."""
    store = RecordStore(1 << 16, min_record=1000)
    slots = store.keys.shape[0]
    taken = sum(store.put(seq, b"x") for seq in range(slots))
    assert taken == slots // 2 and len(store) == taken
    assert store.get_many([0, taken - 1, taken]) == [b"x", b"x", None]


@pytest.mark.parametrize("seed", [0, 1])
def test_put_many_is_put_one_after_another(seed: int) -> None:
    """put_many (a batch's records in one call) leaves the store's arrays as put one record at a
    time does, through several turns of the halves and records too large to hold."""
    rng = np.random.default_rng(seed)
    one, many = RecordStore(4096, 40), RecordStore(4096, 40)
    seq = 0
    for _ in range(60):
        n = int(rng.integers(0, 9))
        records = [rng.integers(0, 256, int(rng.integers(40, 400)), dtype=np.uint8).tobytes() for _ in range(n)]
        if rng.random() < 0.1:
            records.append(bytes(5000))  # larger than a half: not held either way
        for i, record in enumerate(records):
            one.put(seq + i, record)
        many.put_many(seq, records)
        seq += len(records)
        for a, b in ((one.buf, many.buf), (one.keys, many.keys), (one.vals, many.vals), (one.meta, many.meta)):
            assert np.array_equal(a, b)
    assert one.get_many(list(range(seq))) == many.get_many(list(range(seq)))
    assert len(many) > 0
