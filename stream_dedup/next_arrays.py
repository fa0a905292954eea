"""A growing table's next arrays, written (and so faulted in) on a thread of their own.

A growing in-memory list (:mod:`stream_dedup.list_table`, :mod:`stream_dedup.simhash_table`)
allocates its next, larger arrays (the slots of a table twice as large, node arrays half as large
again) and must initialise them before it uses them. The first write to each page is a page
fault: the kernel finds and zeroes a page, and in a virtual machine whose memory the host backs on
demand the host faults it in as well. Measured on the 2-core VM this project is developed on
(``bench/fresh_memory.py``): on huge pages (what numpy asks for at 4 MB or more, and
:mod:`stream_dedup.page_memory` for a table of 64 MB or more) 2-7 ms per MB on memory the process
has not used before, nearly every time (pages the guest frees go back to the host within seconds),
on 4 kB pages 0.4-0.7 ms, against 0.05-0.1 ms per MB when the same pages are written again: ~1.8 s
for the 805 MB of the LSH band table's slots past 20M entries. The arrays come from
:func:`stream_dedup.page_memory.empty`.

:class:`NextArrays` writes them on a thread: numpy releases the GIL while it fills a slice, so the
faults are taken on another core while the adds go on into the current table (measured: a main
thread doing 150 us units of Python kept 98 % of its pace while the thread filled 537 MB in 1.6 s).
The table uses the arrays once :meth:`NextArrays.ready` says they are filled. Before this, the
adds filled them a chunk each, within a few thousand adds, and handed the next chunks to a thread
that faulted them in with ``madvise(MADV_POPULATE_WRITE)``; that thread needed the GIL between two
1 MB calls and fell behind a busy decision loop, so the adds took most faults themselves: the
growth's ~1.5 s fell in one 20,000-article chunk of ``bench/scale.py`` (that chunk ~22 % slower).

The thread is paced by the table's own progress towards needing the arrays (``headroom``: the
share of the adds between the start of the growth and the load at which the table cannot take
more, used so far): it keeps its share of the arrays filled :data:`AHEAD` times ahead of that
share (plus :data:`HEAD_START`), so the whole fill is spread over the first half of the adds the
table can still take, instead of taking ~1-2 s of a core and of the memory bus at once. (Filled
flat out, the passage lists' 360 MB of next slots near 780,000 articles of ``bench/scale.py`` took
1.1 s of the second core, RocksDB's compaction the rest of it, and the deciding thread's CPU per
record rose 30 % in that 20,000-article chunk.) A caller that waits for the arrays
(:meth:`NextArrays.ready` with ``wait``) lifts the pacing: the rest is filled flat out.

``STREAM_DEDUP_NO_PREFAULT=1`` fills them in the caller instead, :data:`FILL_CHUNK` elements per
add (``bench/table_growth.py`` compares the two; the tests step through a growth so).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import numpy as np

from . import page_memory

#: elements a next array's thread writes between two looks at its stop flag (8 MB of uint64)
FILL_CHUNK = 1 << 20
#: arrays smaller than this are filled in the caller (well under a millisecond: no thread)
MIN_THREADED = 1 << 16
#: the thread keeps ``HEAD_START + AHEAD * headroom()`` of the arrays filled, no more (see the module doc)
HEAD_START, AHEAD = 0.05, 2.0
PACE_SECONDS = 0.02  # how long the paced thread sleeps before it looks at the table's progress again
_threaded = os.environ.get("STREAM_DEDUP_NO_PREFAULT", "") in ("", "0")


def headroom(meta: np.ndarray, index: int, limit: float) -> Callable[[], float]:
    """The table's progress towards needing its next arrays: the share of the way from ``meta[index]``
    now (slots or nodes used) to ``limit`` (the most it can use) covered when called."""
    start = int(meta[index])
    span = max(1.0, limit - start)
    return lambda: (int(meta[index]) - start) / span


class NextArrays:
    """A growing table's next, larger arrays, initialised on a thread of their own while the adds
    go on into the table (see the module doc); :meth:`ready` once all are."""

    __slots__ = ("arrays", "fills", "filled", "_stop", "_thread", "_stepped", "_pace", "_hurry")

    def __init__(self, size: int, *spec: tuple[type, int | np.integer],
                 pace: Callable[[], float] | None = None) -> None:
        """``spec``: (dtype, initial value) of each array; ``pace``: the table's :func:`headroom`
        (None: filled flat out)."""
        self.arrays = tuple(page_memory.empty(size, dtype) for dtype, _ in spec)
        self.fills = tuple(value for _, value in spec)
        self.filled = 0
        self._stop = False
        self._pace = pace
        self._hurry = threading.Event()  # (set: no more pacing)
        self._thread: threading.Thread | None = None
        self._stepped = not _threaded  # (filled a chunk per ready() in the caller)
        if self._stepped:
            return
        if size < MIN_THREADED:
            self._fill()
        else:
            self._thread = threading.Thread(target=self._fill, name="stream-dedup-next-arrays", daemon=True)
            self._thread.start()

    def _fill(self, limit: int | None = None) -> None:
        size = self.size if limit is None else min(self.size, limit)
        pace = self._pace if limit is None and self._thread is not None else None  # (the thread only)
        while self.filled < size and not self._stop:
            if pace is not None and not self._hurry.is_set() \
                    and self.filled >= (HEAD_START + AHEAD * pace()) * self.size:
                self._hurry.wait(PACE_SECONDS)  # (ahead of the table's need: wait for it to catch up)
                continue
            end = min(size, self.filled + FILL_CHUNK)
            for array, value in zip(self.arrays, self.fills, strict=True):
                array[self.filled:end] = value
            self.filled = end

    @property
    def size(self) -> int:
        return self.arrays[0].shape[0]

    @property
    def nbytes(self) -> int:
        """Bytes initialised so far (the rest is not touched yet)."""
        return sum(a[:self.filled].nbytes for a in self.arrays)

    def ready(self, wait: bool = False) -> bool:
        """Whether every element is initialised; ``wait``: until it is (a table that cannot take
        another add without them)."""
        if self._stepped and self.filled < self.size:
            self._fill(None if wait else self.filled + FILL_CHUNK)
        thread = self._thread
        if thread is not None:
            if wait:
                self._hurry.set()
                thread.join()
            if thread.is_alive():
                return False
        return self.filled == self.size

    def cancel(self) -> None:
        """The arrays are not wanted any more: the thread stops at its next chunk."""
        self._stop = True
        self._hurry.set()
