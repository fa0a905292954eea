"""stream_dedup.next_arrays: a growing table's next arrays written on a thread, the tables' contents as without it."""

from __future__ import annotations

import mmap
import sys

import numpy as np
import pytest

from stream_dedup import next_arrays
from stream_dedup.band_table import BandTable
from stream_dedup.config import EngineConfig
from stream_dedup.simhash import PermutedTables
from stream_dedup.simhash_table import SimhashTable

#: bytes an array needs to be a fresh mapping of its own, whatever glibc's heap holds
FRESH = 64 << 20


def resident_pages(array: np.ndarray) -> int:
    """Pages of ``array``'s buffer that are resident (mincore)."""
    import ctypes
    import ctypes.util

    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    page = mmap.PAGESIZE
    first = -(-array.ctypes.data // page) * page
    end = (array.ctypes.data + array.nbytes) // page * page
    vec = (ctypes.c_ubyte * ((end - first) // page))()
    libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
    assert libc.mincore(ctypes.c_void_p(first), ctypes.c_size_t(end - first), vec) == 0, ctypes.get_errno()
    return sum(v & 1 for v in vec)


def test_next_arrays_are_written_on_a_thread_while_the_caller_goes_on() -> None:
    """A large next array is filled by a thread: the constructor returns before it is written
    (its pages not resident yet), ready() says so until it is, and then every element holds its
    initial value (every page resident)."""
    size = FRESH // 8
    nxt = next_arrays.NextArrays(size, (np.uint64, np.uint64(2**64 - 1)), (np.int32, -1))
    assert nxt._thread is not None
    nxt.ready(wait=True)
    assert nxt.ready() and nxt.filled == size and nxt.nbytes == size * 12
    keys, heads = nxt.arrays
    assert (keys == np.uint64(2**64 - 1)).all() and (heads == -1).all()
    if sys.platform.startswith("linux"):
        assert resident_pages(keys) >= keys.nbytes // mmap.PAGESIZE - 1


def test_small_next_arrays_are_filled_at_once_and_a_cancelled_fill_stops() -> None:
    small = next_arrays.NextArrays(1000, (np.uint8, 7))
    assert small._thread is None and small.ready() and (small.arrays[0] == 7).all()
    big = next_arrays.NextArrays(16 * next_arrays.FILL_CHUNK, (np.uint64, 1))
    big.cancel()
    assert not big.ready(wait=True) and big.filled < big.size  # (stopped within a chunk or two)


def test_a_paced_fill_keeps_ahead_of_the_table_and_a_wait_lifts_the_pacing() -> None:
    """The thread fills no more than HEAD_START + AHEAD x the table's progress (a chunk over at
    most), goes on as the table progresses, and a caller that waits gets every element at once."""
    import time

    chunk = next_arrays.FILL_CHUNK
    size = 40 * chunk
    progress = [0.0]
    nxt = next_arrays.NextArrays(size, (np.uint64, 3), pace=lambda: progress[0])

    def settled(limit: float) -> int:
        """The elements filled once the thread has stopped at its pace (it waits for the table)."""
        deadline = time.monotonic() + 30
        last = -1
        while time.monotonic() < deadline:
            now = nxt.filled
            if now == last and now >= min(size, limit * size):
                return now
            last = now
            time.sleep(0.2)
        return nxt.filled

    first = settled(next_arrays.HEAD_START)
    assert next_arrays.HEAD_START * size <= first <= next_arrays.HEAD_START * size + chunk
    assert not nxt.ready()
    progress[0] = 0.2  # (the table took a fifth of the adds it can take before it needs the arrays)
    second = settled(next_arrays.HEAD_START + next_arrays.AHEAD * 0.2)
    assert first < second <= (next_arrays.HEAD_START + next_arrays.AHEAD * 0.2) * size + chunk
    assert not nxt.ready()
    assert nxt.ready(wait=True)  # (the table is full: it waits, and the rest is filled flat out)
    assert nxt.filled == size and (nxt.arrays[0] == 3).all()


def test_a_table_paces_its_next_arrays_by_its_own_load() -> None:
    """headroom(): the share of the way from the slots used when the growth began to the most the
    table may use, read from the table's meta when asked."""
    meta = np.array([700, 5], dtype=np.int64)
    used = next_arrays.headroom(meta, 0, 800.0)
    assert used() == 0.0
    meta[0] = 750
    assert used() == 0.5
    meta[0] = 800
    assert used() == 1.0


@pytest.mark.parametrize("threaded", [True, False])
def test_tables_grown_with_and_without_the_thread_hold_the_same(monkeypatch: pytest.MonkeyPatch,
                                                                threaded: bool) -> None:
    """Large enough for the next slot tables and node arrays to be written on their threads
    (or at once, ``STREAM_DEDUP_NO_PREFAULT=1``): every bucket and every SimHash probe answers as
    it must."""
    monkeypatch.setattr(next_arrays, "_threaded", threaded)
    rng = np.random.default_rng(3)
    bands, n, batch = 8, 150_000, 500
    table = BandTable(bands, 5, cap=4)
    keys = rng.integers(0, 2**40, size=(n, bands), dtype=np.uint64)
    for first in range(0, n, batch):
        table.add(keys[first:first + batch], np.arange(first, first + batch, dtype=np.uint32))
    assert table.slot_keys.shape[0] > 16 * next_arrays.MIN_THREADED
    probe = keys[rng.integers(0, n, size=2000)]
    for row in probe:
        got = table.lookup(row)
        # each key is (almost surely) one article's: its bucket holds that article alone
        assert got.shape[0] == bands and len(set(got.tolist())) == 1

    config = EngineConfig()
    tables = PermutedTables(config.simhash_k, config.simhash_blocks)
    sim = SimhashTable(tables.key_masks)
    fps = rng.integers(0, 2**63, size=n, dtype=np.uint64)
    perm = tables.permute_many(fps)
    for first in range(0, n, batch):
        sim.add_many(perm[first:first + batch], np.arange(first, first + batch, dtype=np.uint32))
    assert sim.fps.shape[0] > 16 * next_arrays.MIN_THREADED and sim.entries == n * len(tables.key_masks)
    for i in rng.integers(0, n, size=500).tolist():
        assert i in sim.probe(perm[i], 0).tolist()
