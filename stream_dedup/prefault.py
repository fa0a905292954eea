"""Fault the pages a filler is about to write in on another thread, before it gets there.

A growing in-memory list (:mod:`stream_dedup.list_table`, :mod:`stream_dedup.simhash_table`)
allocates its next, larger arrays and fills them front to back a chunk per add. The first write to
each page is a page fault: the kernel finds and zeroes a page, and in a virtual machine whose
memory the host backs on demand the host faults it in as well. Measured on the 2-core VM this
project is developed on (``bench/fresh_memory.py``): 2.2-2.3 ms per MB on memory the process has
not used before, every time (pages the guest frees go back to the host within seconds), against
0.13 ms per MB when the same pages are written again; on the LSH band table's growths that was about a sixth of the time it
spent filing a million articles (README, *Where the p99 went as the index grew*).

:class:`NextArrays` holds such next arrays while they are filled; its :class:`Ahead` hands the
next few chunks of the filler to one daemon thread, which asks the
kernel to fault them in (``madvise(MADV_POPULATE_WRITE)``, Linux 5.14+, 1 MB a call): ``ctypes``
releases the GIL around the call, so the faults are taken on another core while the adds go on,
and the memory still becomes resident at the filler's pace (a few chunks ahead of it, not the
whole array at once: the peak RSS is the same). Populating changes nothing in the arrays (an
anonymous page reads as zero, as on its first touch; pages already written are left alone), so
the tables' contents and the decisions do not depend on it, only which thread takes the faults.
Where the call is not available (another OS, an older kernel, ``STREAM_DEDUP_NO_PREFAULT=1``) it
does nothing and the filler takes its faults itself, as before.
"""

from __future__ import annotations

import mmap
import os
import queue
import sys
import threading
from collections.abc import Callable

import numpy as np

MADV_POPULATE_WRITE = 23  # linux/mman.h (5.14+)
#: bytes per madvise call: the call holds the address space's lock for reading, and a thread that
#: maps or unmaps memory meanwhile (a large numpy allocation) waits for it; 1 MB is ~2.5 ms here
#: (4 MB calls made batches of bench/table_growth.py wait up to 100 ms)
CHUNK = 1 << 20
#: the filler's steps faulted in ahead of it (a step is written by one add; adds come ~1-100 ms
#: apart, and faulting a step in takes a few ms here)
STEPS_AHEAD = 4
#: fewer elements than this are left to the filler (well under a millisecond of faults)
MIN_ELEMENTS_AHEAD = 1 << 16
#: ranges waiting for the thread at most
QUEUED = 8
PAGE = mmap.PAGESIZE


def _madvise() -> Callable[[int, int, int], int] | None:
    """libc's ``madvise``, looked up on first use (not at import: every process imports this
    module, few grow a table); None, and no more tries, where it cannot be had."""
    global _MADVISE, _supported
    if _MADVISE is None and _supported:
        import ctypes

        try:
            fn = ctypes.CDLL(None, use_errno=True).madvise  # the process's own libc
        except (OSError, AttributeError):
            _supported = False
            return None
        fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        fn.restype = ctypes.c_int
        _MADVISE = fn
    return _MADVISE if _supported else None


_MADVISE: Callable[[int, int, int], int] | None = None
#: False where MADV_POPULATE_WRITE cannot be used (not Linux, turned off, or refused by the kernel:
#: EINVAL before 5.14): then nothing is handed to the thread
_supported = sys.platform.startswith("linux") and os.environ.get("STREAM_DEDUP_NO_PREFAULT", "") in ("", "0")


def populate(array: np.ndarray) -> bool:
    """Fault in the whole pages of ``array``'s buffer now, in this thread; False where the kernel
    cannot (nothing done)."""
    global _supported
    madvise = _madvise() if array.nbytes else None
    if madvise is None:
        return False
    start = array.ctypes.data
    first = -(-start // PAGE) * PAGE  # whole pages inside the buffer only
    end = (start + array.nbytes) // PAGE * PAGE
    for at in range(end, first, -CHUNK):  # back to front: a filler that catches up meets it last
        lo = max(first, at - CHUNK)
        if madvise(lo, at - lo, MADV_POPULATE_WRITE) != 0:
            import ctypes

            if ctypes.get_errno() in (22, 38):  # EINVAL, ENOSYS: not this kernel
                _supported = False
            return False
    return True


class _Worker:
    """One daemon thread faulting in the ranges it is handed, a few at a time at most (a range
    handed while it is busy with others is dropped: the filler then takes those faults itself)."""

    def __init__(self) -> None:
        self.jobs: queue.Queue[tuple[np.ndarray, int, int]] = queue.Queue(maxsize=QUEUED)
        self.thread: threading.Thread | None = None

    def submit(self, array: np.ndarray, start: int, stop: int) -> None:
        if self.thread is None or not self.thread.is_alive():
            self.thread = threading.Thread(target=self._run, name="stream-dedup-prefault", daemon=True)
            self.thread.start()
        try:
            self.jobs.put_nowait((array, start, stop))
        except queue.Full:
            pass

    def _run(self) -> None:
        while True:
            array, start, stop = self.jobs.get()
            try:
                populate(array[start:stop])
            finally:
                del array
                self.jobs.task_done()


_worker = _Worker()


def _forked() -> None:
    global _worker
    _worker = _Worker()  # the parent's thread is not in the child, and its queue's lock may be held


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


class Ahead:
    """Faults in the next elements of 1-d arrays that a filler writes front to back a step at a
    time, up to :data:`STEPS_AHEAD` steps ahead of it (so the memory becomes resident at the pace
    the filler would make it so: a few steps more, not the whole array at once)."""

    __slots__ = ("arrays", "limit", "done")

    def __init__(self, *arrays: np.ndarray, limit: int | None = None) -> None:
        self.arrays = arrays
        self.limit = arrays[0].shape[0] if limit is None else limit
        self.done = 0

    def filled(self, end: int, step: int) -> None:
        """The filler has written up to ``end`` and writes ``step`` more at a time."""
        start, stop = max(self.done, end), min(self.limit, end + STEPS_AHEAD * step)
        if not _supported or stop - start < MIN_ELEMENTS_AHEAD:
            return
        for a in self.arrays:
            _worker.submit(a, start, stop)
        self.done = stop


def wait_idle() -> None:
    """Until the prefault thread has done every range handed to it (tests)."""
    _worker.jobs.join()


class NextArrays:
    """A growing table's next, larger arrays while they are initialised a chunk per add (so that
    no add writes them all), their pages faulted in a few chunks ahead on another thread
    (:class:`Ahead`)."""

    __slots__ = ("arrays", "fills", "filled", "ahead")

    def __init__(self, size: int, *spec: tuple[type, int | np.integer]) -> None:
        """``spec``: (dtype, initial value) of each array."""
        self.arrays = tuple(np.empty(size, dtype=dtype) for dtype, _ in spec)
        self.fills = tuple(value for _, value in spec)
        self.filled = 0
        self.ahead = Ahead(*self.arrays)

    @property
    def size(self) -> int:
        return self.arrays[0].shape[0]

    @property
    def nbytes(self) -> int:
        """Bytes initialised so far (the rest is not touched yet)."""
        return sum(a[:self.filled].nbytes for a in self.arrays)

    def advance(self, entries: int, window: float, least: int, full: bool) -> bool:
        """Initialise the share of the arrays that ``entries`` more entries take of a ``window`` of
        entries (at least ``least`` elements; all that is left if ``full``); True once all are."""
        return self.fill(self.size if full else least + int(self.size * entries / max(1.0, window)))

    def fill(self, step: int) -> bool:
        """Initialise the next ``step`` elements of each array; True once all are."""
        end = min(self.size, self.filled + step)
        for array, value in zip(self.arrays, self.fills, strict=True):
            array[self.filled:end] = value
        self.filled = end
        if end < self.size:  # the next adds' chunks, faulted in meanwhile on another core
            self.ahead.filled(end, step)
        return end == self.size
