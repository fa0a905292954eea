"""stream_dedup.prefault: pages faulted in from another thread, contents untouched."""

from __future__ import annotations

import mmap
import sys

import numpy as np
import pytest

from stream_dedup import prefault
from stream_dedup.band_table import BandTable
from stream_dedup.config import EngineConfig
from stream_dedup.simhash import PermutedTables
from stream_dedup.simhash_table import SimhashTable

#: bytes an array needs to be a fresh mapping of its own, whatever glibc's heap holds
FRESH = 64 << 20
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_POPULATE_WRITE is Linux's")


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


@linux_only
def test_populate_faults_in_every_whole_page_and_changes_nothing() -> None:
    if not prefault._supported:
        pytest.skip("this kernel has no MADV_POPULATE_WRITE (Linux < 5.14)")
    # over glibc's largest mmap threshold (32 MB): a fresh mapping, not resident yet
    a = np.zeros(FRESH // 8 + 123, dtype=np.uint64)
    a[:1000] = np.arange(1000, dtype=np.uint64)  # some written already
    before = resident_pages(a)
    assert prefault.populate(a)
    after = resident_pages(a)
    total = (a.nbytes // mmap.PAGESIZE) - 1
    assert before < total // 2 < total <= after
    assert a[:1000].tolist() == list(range(1000)) and not a[1000:].any()


@linux_only
def test_ahead_faults_in_the_next_steps_only_from_its_thread() -> None:
    if not prefault._supported:
        pytest.skip("this kernel has no MADV_POPULATE_WRITE (Linux < 5.14)")
    step = FRESH // 8 // 40 * 2  # elements a fill: both arrays are fresh mappings (over FRESH bytes)
    keys, heads = np.empty(40 * step, dtype=np.uint64), np.empty(40 * step, dtype=np.int32)
    ahead = prefault.Ahead(keys, heads)
    keys[:step], heads[:step] = 7, -1  # the filler's first step
    ahead.filled(step, step)
    prefault.wait_idle()
    page = mmap.PAGESIZE
    expected = (prefault.STEPS_AHEAD + 1) * step * keys.itemsize // page
    assert expected - 2 <= resident_pages(keys) <= expected + 1024  # (a huge page may come whole)
    assert resident_pages(keys) < 20 * step * keys.itemsize // page  # not the whole array
    assert resident_pages(heads) >= (prefault.STEPS_AHEAD + 1) * step * heads.itemsize // page - 2
    assert (keys[:step] == 7).all() and (heads[:step] == -1).all()
    # a filler far ahead: only what lies after it is handed over, up to the end
    ahead.filled(39 * step, step)
    prefault.wait_idle()
    assert ahead.done == keys.shape[0]
    assert (prefault.STEPS_AHEAD + 2) * step * keys.itemsize // page - 4 <= resident_pages(keys) \
        < 20 * step * keys.itemsize // page


def test_an_unsupported_kernel_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prefault, "_supported", False)
    big = np.zeros(1 << 20, dtype=np.uint64)
    ahead = prefault.Ahead(big)
    ahead.filled(0, 1 << 18)
    assert ahead.done == 0 and prefault._worker.jobs.empty()
    assert not prefault.populate(big)


@pytest.mark.parametrize("supported", [True, False])
def test_tables_grown_with_and_without_prefault_hold_the_same(monkeypatch: pytest.MonkeyPatch,
                                                               supported: bool) -> None:
    """Large enough for the next slot tables and node arrays to be faulted in ahead of their
    fillers: every bucket and every SimHash probe answers as it must."""
    monkeypatch.setattr(prefault, "_supported", supported and prefault._supported)
    rng = np.random.default_rng(3)
    bands, n, batch = 8, 150_000, 500
    table = BandTable(bands, 5, cap=4)
    keys = rng.integers(0, 2**40, size=(n, bands), dtype=np.uint64)
    for first in range(0, n, batch):
        table.add(keys[first:first + batch], np.arange(first, first + batch, dtype=np.uint32))
    assert table.slot_keys.shape[0] > 16 * prefault.MIN_ELEMENTS_AHEAD
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
    assert sim.fps.shape[0] > 16 * prefault.MIN_ELEMENTS_AHEAD and sim.entries == n * len(tables.key_masks)
    for i in rng.integers(0, n, size=500).tolist():
        assert i in sim.probe(perm[i], 0).tolist()
