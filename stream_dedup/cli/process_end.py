"""How a ``dedup`` run lets go of its index: closed at the end of the run or, when the process ends
next, left open (:data:`LEFT_OPEN`; a kept state with its write-ahead log synced first) until
:func:`end_process` ends the process without closing it."""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from ..engine import Deduplicator

#: temporary indexes of finished runs, deleted but not closed, until the process ends (see
#: :func:`stream_dedup.cli.main`)
LEFT_OPEN: list[Deduplicator] = []


def release_state(dedup: Deduplicator, leave_open: bool, kept: bool = False) -> None:
    """Close the index at the end of a run or, when the process ends next (``leave_open``), only
    stop its background work and keep it open: closing flushes the memtables to SST files (~0.05 s
    for 7,431 short items: the hash memtables are sorted into a skip list first), for a temporary
    directory deleted right after, or for a ``kept`` state whose write-ahead log holds every write
    (:meth:`Index.sync_for_exit <stream_dedup.index.Index.sync_for_exit>`: the lists' snapshot, then
    the log synced to disk; the next run's open replays it, as after a crash)."""
    if leave_open:
        if kept:
            dedup.index.sync_for_exit()
        dedup.index.db.cancel_all_background(True)   # no flush or compaction writes into the directory
        LEFT_OPEN.append(dedup)
    else:
        dedup.close()


def end_process(code: int) -> NoReturn:
    """End the process with ``code`` without closing the indexes in ``LEFT_OPEN`` (Python's own exit
    would drop them, and dropping flushes them); output streams and log handlers are flushed first."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    logging.shutdown()
    os._exit(code)
