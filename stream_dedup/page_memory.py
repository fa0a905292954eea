"""The in-memory lists' large arrays, on huge pages only where a table is large enough to gain.

numpy asks the kernel for transparent huge pages (``madvise(MADV_HUGEPAGE)``) for every array of
4 MB or more. A huge page is 2 MB the kernel must find free and zero as one piece at the first
write, and on a virtual machine whose host backs guest memory on demand and takes freed memory
back (free page reporting, in 2 MB blocks: Firecracker, Cloud Hypervisor, many cloud VMs) such a
block is new to the host every time: measured on the 2-core VM this project is developed on
(``bench/fresh_memory.py``), 2-7 ms per MB written the first time on huge pages against 0.4-0.7 ms
on 4 kB pages. What huge pages buy is fewer TLB misses on random probes into a large table: a
scratch probe loop read 64 MB-1 GB tables 19-33 % faster per probe on huge pages, 16 MB ones no
faster; ``bench/scale.py``'s deciding thread spent ~15 % less CPU per record at 1,000,000 articles
(1.4 GB of lists) with them than without.

So the tables ask for what pays at their size: :func:`empty` / :func:`zeros` / :func:`full` map an
array of :data:`HUGE_FROM` bytes or more with huge pages asked for, a smaller one of
:data:`MAPPED_FROM` or more with huge pages refused (``MADV_NOHUGEPAGE``, whatever numpy or the
system would have done), and leave smaller ones to numpy. A one-CPU ``dedup`` run of 74,310 short
items (tables up to ~50 MB) took ~13 % less time so (README: *What changed (page_memory)*).

A snapshot's load (:mod:`stream_dedup.lists_snapshot`) writes 1.1 GB of arrays at once at 1M
articles, before the first decision: on fresh huge pages that took 3.0-8.5 s, on 4 kB pages
0.85-0.90 s. So :func:`loaded` arrays are written on 4 kB pages and :func:`promote` then asks for
huge pages for the large ones: the kernel's ``khugepaged`` moves them to huge pages in the
background, at its own pace (Linux's defaults: 4,096 pages every 10 s; measured, ~1.6 MB a second:
~12 minutes for the 1.1 GB of a 1M index's lists), on its own thread.

The mapping is anonymous and private (zero-filled, returned to the system when the array is freed);
where ``madvise`` is missing (not Linux) the arrays are numpy's own.
"""

from __future__ import annotations

import errno
import mmap

import numpy as np

#: arrays of this many bytes or more ask for huge pages
HUGE_FROM = 64 << 20
#: arrays from this many bytes up to :data:`HUGE_FROM` are mapped with huge pages refused
MAPPED_FROM = 1 << 20
_ADVICE = (getattr(mmap, "MADV_NOHUGEPAGE", None), getattr(mmap, "MADV_HUGEPAGE", None))
_MAPS = hasattr(mmap, "MAP_PRIVATE") and hasattr(mmap, "MAP_ANONYMOUS") and None not in _ADVICE


def huge(nbytes: int, probed: bool = True) -> bool:
    """Whether an array of ``nbytes`` is put on huge pages (``probed``: read at random places)."""
    return _MAPS and probed and nbytes >= HUGE_FROM


def zeros(n: int, dtype: np.dtype | type, probed: bool = True) -> np.ndarray:
    """``np.zeros(n, dtype)``, its pages chosen by its size (see the module doc); an array not
    ``probed`` at random places (written and read in order) never asks for huge pages."""
    dt = np.dtype(dtype)
    nbytes = n * dt.itemsize
    if not _MAPS or nbytes < MAPPED_FROM:
        return np.zeros(n, dtype=dt)
    try:
        area = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except OSError as exc:  # (as numpy's allocations fail: a MemoryError)
        if exc.errno != errno.ENOMEM:
            raise
        raise MemoryError(f"cannot map {nbytes:,} bytes for the in-memory lists (out of memory)") from None
    area.madvise(_ADVICE[huge(nbytes, probed)])  # (before any page is written: the first write decides)
    return np.frombuffer(area, dtype=dt, count=n)  # (the array holds the mapping; freed with it)


def empty(n: int, dtype: np.dtype | type) -> np.ndarray:
    """An array of ``n`` elements to be written before it is read (zero-filled when mapped)."""
    dt = np.dtype(dtype)
    return np.empty(n, dtype=dt) if not _MAPS or n * dt.itemsize < MAPPED_FROM else zeros(n, dt)


def full(n: int, value: int, dtype: np.dtype | type) -> np.ndarray:
    """``np.full(n, value, dtype)``, its pages chosen by its size."""
    out = empty(n, dtype)
    out.fill(value)
    return out


def loaded(n: int, dtype: np.dtype | type) -> np.ndarray:
    """An array about to be written in full at once (a snapshot's load): on 4 kB pages while it is
    written (see the module doc); :func:`promote` it then."""
    return zeros(n, dtype, probed=False)


def promote(array: np.ndarray) -> None:
    """Ask for huge pages for a written :func:`loaded` array large enough to gain from them
    (``khugepaged`` moves it in the background); nothing for a smaller one or numpy's own."""
    area = mapping(array)
    if area is not None and huge(array.nbytes):
        area.madvise(_ADVICE[True])


def mapping(array: np.ndarray) -> mmap.mmap | None:
    """The mapping holding an array of this module (None: numpy's own)."""
    base = array.base
    area = base.obj if isinstance(base, memoryview) else base
    return area if isinstance(area, mmap.mmap) else None
