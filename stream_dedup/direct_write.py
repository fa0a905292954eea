"""A file written in one pass past the page cache (``O_DIRECT``), for the lists' snapshot.

The snapshot of the index's in-memory lists (:mod:`stream_dedup.lists_snapshot`) is ~1.2 GB per
million articles, written while the decisions wait. Through the page cache it makes as many dirty
pages, and the kernel holds a writer of that many to the disk's pace when others write too (RocksDB's
compactions in a worker): 1.2-2.8 s for 1.15 GB with a 3 GB ``dd`` under way, 0.24-2.7 s without,
from run to run. A direct write sends the bytes from one page-aligned buffer to the disk and makes
no dirty page: 0.46-0.6 s and 0.35-0.63 s in the same runs (a scratch A/B on the 1M scale run's
lists, alternating), and the index's cached pages are not pushed out. :func:`write_layout` writes a header and arrays at given offsets so,
and writes buffered where the filesystem refuses ``O_DIRECT`` and for a file under
:data:`DIRECT_MIN_BYTES` (a small index's: not throttled, and synced faster from the cache).
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

__all__ = ["DIRECT_CHUNK", "DIRECT_MIN_BYTES", "write_layout"]


#: bytes copied at a time into the page-aligned buffer that a direct write sends to the disk
DIRECT_CHUNK = 8 << 20
#: a smaller file goes through the page cache: it is not throttled, and the sync after it is short
#: (a 7,431-article index's 9.5 MB of lists: written and synced in 9 ms, 13-17 ms directly)
DIRECT_MIN_BYTES = 64 << 20
_DIRECT_ALIGN = 4096  # (what O_DIRECT asks of a write's address, length and file offset, at most)


def write_layout(path: Path, header: bytes, arrays: list[tuple[int, np.ndarray]], total: int,
                 direct: bool = True) -> None:
    """Write ``header`` at offset 0 and each array's bytes at its offset, zeros between, ``total``
    bytes in all.

    Written past the page cache where the filesystem allows it (``O_DIRECT``, through a page-aligned
    buffer of :data:`DIRECT_CHUNK` bytes; see the module doc), else (a filesystem that refuses
    ``O_DIRECT``, e.g. tmpfs, a file under :data:`DIRECT_MIN_BYTES`, or ``direct`` false) a plain
    buffered write of the same bytes.
    """
    if direct and total >= DIRECT_MIN_BYTES and hasattr(os, "O_DIRECT"):
        try:
            _write_direct(path, header, arrays, total)
            return
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                raise
            log.debug("O_DIRECT refused for %s (%s): a buffered write", path, exc)
    with open(path, "wb") as f:
        f.write(header)
        for offset, array in arrays:
            f.write(b"\0" * (offset - f.tell()))
            if array.nbytes:
                f.write(memoryview(array).cast("B"))
        f.truncate(total)


def _write_direct(path: Path, header: bytes, arrays: list[tuple[int, np.ndarray]], total: int) -> None:
    """:func:`write_layout` with ``O_DIRECT``: the bytes in order through one aligned buffer, each
    write a whole multiple of its size but the last (padded to the alignment, then cut to ``total``)."""
    buffer = mmap.mmap(-1, DIRECT_CHUNK)  # (page-aligned, as O_DIRECT asks)
    view = memoryview(buffer)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
    try:
        filled = written = 0

        def put(data: memoryview | bytes) -> None:
            nonlocal filled, written
            at = 0
            while at < len(data):
                n = min(DIRECT_CHUNK - filled, len(data) - at)
                view[filled:filled + n] = data[at:at + n]
                filled += n
                at += n
                if filled == DIRECT_CHUNK:
                    written += _write_all(fd, view)
                    filled = 0

        put(header)
        for offset, array in arrays:
            put(bytes(offset - written - filled))
            if array.nbytes:
                put(memoryview(array).cast("B"))
        put(bytes(total - written - filled))
        if filled:
            padded = -(-filled // _DIRECT_ALIGN) * _DIRECT_ALIGN
            view[filled:padded] = bytes(padded - filled)
            _write_all(fd, view[:padded])
        os.ftruncate(fd, total)
    finally:
        os.close(fd)
        try:
            view.release()
            buffer.close()
        except BufferError:  # (a slice of it held by the traceback of an error: freed with it)
            pass


def _write_all(fd: int, data: memoryview) -> int:
    """Write all of ``data`` (a direct write of a whole aligned block does; checked all the same)."""
    n = os.write(fd, data)
    if n != len(data):
        raise OSError(errno.EIO, f"a direct write wrote {n} of {len(data)} bytes")
    return n
