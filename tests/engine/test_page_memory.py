"""The lists' large arrays: mapped with huge pages asked for or refused by size (stream_dedup.page_memory)."""

from __future__ import annotations

import gc
import sys

import numpy as np
import pytest

from stream_dedup import page_memory
from stream_dedup.list_table import MemberLists
from stream_dedup.record_store import RecordStore

linux = pytest.mark.skipif(not sys.platform.startswith("linux") or not page_memory._MAPS,
                           reason="madvise and /proc/self/smaps are Linux's")


def vm_flags(array: np.ndarray) -> set[str] | None:
    """The kernel's VmFlags of the mapping holding ``array``'s first byte (None: not mapped)."""
    address = array.ctypes.data
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(" ", 1)[0]
            if "-" in head and ":" not in head:
                start, end = (int(x, 16) for x in head.split("-"))
                inside = start <= address < end
            elif inside and line.startswith("VmFlags:"):
                return set(line.split()[1:])
    return None


def mapped_ranges() -> list[tuple[int, int]]:
    with open("/proc/self/maps") as f:
        return [tuple(int(x, 16) for x in line.split(" ", 1)[0].split("-")) for line in f]  # type: ignore[misc]


@pytest.fixture
def small_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(page_memory, "MAPPED_FROM", 1 << 16)
    monkeypatch.setattr(page_memory, "HUGE_FROM", 4 << 20)


@pytest.mark.parametrize("n", [0, 1, 1000, 1 << 17, (8 << 20) // 8 + 3])
def test_arrays_hold_what_numpy_would(small_limits: None, n: int) -> None:
    for dtype in (np.uint64, np.int32, np.uint8):
        z = page_memory.zeros(n, dtype)
        assert z.dtype == np.dtype(dtype) and z.shape == (n,) and z.flags.writeable and z.flags.c_contiguous
        assert not z.any()
        f = page_memory.full(n, 7, dtype)
        np.testing.assert_array_equal(f, np.full(n, 7, dtype=dtype))
        e = page_memory.empty(n, dtype)
        e[:] = 3
        assert e.shape == (n,) and (n == 0 or int(e[-1]) == 3)


@linux
def test_large_arrays_ask_for_huge_pages_smaller_ones_refuse_them(small_limits: None) -> None:
    big = page_memory.zeros((4 << 20) // 8, np.uint64)
    mid = page_memory.zeros((1 << 20) // 8, np.uint64)
    sequential = page_memory.zeros(8 << 20, np.uint8, probed=False)
    small = page_memory.zeros(100, np.uint64)
    flags = vm_flags(big)
    assert flags is not None and "hg" in flags and "nh" not in flags
    assert "nh" in vm_flags(mid) and "hg" not in vm_flags(mid)
    assert "nh" in vm_flags(sequential)  # (written and read in order: never huge)
    assert page_memory.huge(big.nbytes) and not page_memory.huge(mid.nbytes) \
        and not page_memory.huge(sequential.nbytes, probed=False)
    assert page_memory.mapping(small) is None and page_memory.mapping(big) is not None  # (numpy's own; a mapping)


@linux
def test_a_freed_array_returns_its_mapping(small_limits: None) -> None:
    a = page_memory.full((4 << 20) // 4, -1, np.int32)
    start = a.ctypes.data
    assert any(lo <= start < hi for lo, hi in mapped_ranges())
    del a
    gc.collect()
    assert not any(lo <= start < hi for lo, hi in mapped_ranges())


@linux
def test_tables_and_record_store_use_them(small_limits: None) -> None:
    table = MemberLists(cap=2, slots=1 << 20, nodes=1 << 10)
    assert "hg" in vm_flags(table.slot_keys) and (table.slot_keys == np.iinfo(np.uint64).max).all()
    assert (table.slot_head == -1).all()
    store = RecordStore(16 << 20, 64)
    assert "nh" in vm_flags(store.buf)
    table.add_entries(np.arange(1, 1001, dtype=np.uint64), np.arange(1000, dtype=np.uint32))
    assert table.lookup(np.array([5], dtype=np.uint64)).tolist() == [4]


@linux
def test_a_loaded_array_is_written_on_small_pages_then_promoted(small_limits: None) -> None:
    big = page_memory.loaded((4 << 20) // 8, np.uint64)
    mid = page_memory.loaded((1 << 20) // 8, np.uint64)
    assert "nh" in vm_flags(big) and "nh" in vm_flags(mid)  # (while written: 4 kB pages)
    big[:] = 5
    mid[:] = 6
    for array in (big, mid, np.zeros(10)):
        page_memory.promote(array)
    assert "hg" in vm_flags(big) and "nh" not in vm_flags(big)  # (khugepaged may move it now)
    assert "nh" in vm_flags(mid) and "hg" not in vm_flags(mid)  # (too small to gain)
    assert (big == 5).all() and (mid == 6).all()


@linux
def test_out_of_memory_is_a_memory_error_as_numpy_s(small_limits: None, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno
    import mmap

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOMEM, "Cannot allocate memory")

    monkeypatch.setattr(mmap, "mmap", refuse)
    with pytest.raises(MemoryError, match="cannot map 8,388,608 bytes"):
        page_memory.zeros(1 << 20, np.uint64)
    assert page_memory.zeros(10, np.uint64).shape == (10,)  # (numpy's own: no mapping)
