"""Records read, parsed and fingerprinted in child processes while the caller decides: the second core for ``dedup``.

Deciding is sequential (each article is decided against every one before it); reading a record,
parsing it and fingerprinting it are not: they depend on its line alone. So ``stream-dedup dedup``
on a file hands :class:`FingerprintPool` each batch's *byte range* of the input as soon as its
lines are read, in chunks of :data:`CHUNK_LINES` lines, and decides older batches meanwhile. A
child reads its chunk from the file itself (``os.pread`` on the inherited descriptor: no text
crosses a pipe), parses each line (:func:`~stream_dedup.record.parse_record`), fingerprints the
chunk's texts in one call (:class:`~stream_dedup.fingerprint_batch.FingerprintBatch`), makes
their stored signatures, LSH bucket keys and permuted SimHashes too (:class:`~stream_dedup.batch.KeyMaker`:
work the deciding process then does not do) and sends back what the caller needs: per line its id
and title (:class:`Parsed`), ``None`` for a blank line, or :data:`REPARSE` for a line that does not
parse (the caller parses that line itself and gets the very error: parsing is deterministic), and
the fingerprints, as one batch of arrays.

The caller does not wait while there is work: when the chunk it needs is not back yet and chunks
are still queued for the children, it takes the last queued one (the one the children would reach
last) and does it itself (:func:`read_chunk`, the children's code); so both cores stay busy
whichever side is the slower. The decisions are those of the in-process path (the same
fingerprints, decided in the same order).

Messages are small and the results pipe is widened (``F_SETPIPE_SZ``), so neither side blocks on
the other's reading: a child holds at most :data:`HELD` chunks, and there are no threads. Children
are forked (they inherit the loaded kernels: no start-up of their own), run as ``SCHED_BATCH``
work on Linux (a chunk sent to a child waiting for one wakes it; a normal process woken so
preempts the caller on its core: the sends of a ten-round short-item run blocked 78-108 ms in all,
15-21 ms with the children batch work), ignore SIGINT and SIGTERM
(the caller handles them) and exit when the caller closes their pipe or goes away. A text whose
fingerprint raises comes back as :class:`FingerprintFailed` in its place. If a child dies, the
pool says so once (a warning) and does every chunk in the caller's process from then on: a chunk
is a byte range of the file, so nothing is lost.
"""

from __future__ import annotations

import fcntl
import logging
import multiprocessing
import os
import signal
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, NamedTuple

from .fingerprint import Fingerprint, Fingerprinter
from .fingerprint_batch import FingerprintBatch
from .record import RecordError, parse_record

if TYPE_CHECKING:
    from .batch import KeyMaker
    from .config import EngineConfig

__all__ = ["CHUNK_LINES", "ChunkResult", "FingerprintFailed", "FingerprintPool", "Parsed", "REPARSE", "read_chunk"]

log = logging.getLogger("stream_dedup")

CHUNK_LINES = 256  # lines a child (or the caller) takes at a time: a dedup batch (128: ~2 % slower, 64: ~8 %)
HELD = 2  # chunks sent to a child and not yet back: one it works on, one waiting for it
_RESULTS_PIPE_BYTES = 1 << 20  # a few chunks' results (~1 kB a record) fit: a child never waits to write
REPARSE = "reparse"  # a line's mark when it does not parse: the caller parses it and raises its error


class FingerprintFailed(Exception):
    """Fingerprinting one text raised (its type and message)."""


class Parsed(NamedTuple):
    """What the caller keeps of a record parsed elsewhere: its id and title (the text stayed there).

    A named tuple: one crosses the pipe per record, and a tuple unpickles in ~0.2 us where a
    slotted dataclass took ~0.9 us (``dataclasses``' ``__setstate__`` in Python)."""
    id: str
    title: str | None


#: a chunk's lines (Parsed, None for a blank line, REPARSE) and its records' fingerprints in order
#: (a list if one raised)
ChunkResult = tuple[list["Parsed | str | None"], "FingerprintBatch | list[Fingerprint | FingerprintFailed]"]


def _pread(fd: int, start: int, size: int) -> bytes:
    parts, at, left = [], start, size
    while left:
        part = os.pread(fd, left, at)
        if not part:
            raise OSError(f"the input ended at byte {at:,} while {left:,} bytes of a batch were still to read")
        parts.append(part)
        at += len(part)
        left -= len(part)
    return b"".join(parts)


def read_chunk(fingerprinter: Fingerprinter, config: EngineConfig, fd: int, start: int, lengths: list[int],
               keys: KeyMaker | None = None) -> ChunkResult:
    """The lines of ``lengths`` bytes each from byte ``start`` of ``fd``: parsed and fingerprinted
    (see the module doc; the fingerprints as one :class:`FingerprintBatch`, one pickle of a few
    arrays, with its :class:`~stream_dedup.batch.BatchKeys` made by ``keys``, unless a text raised:
    then a list)."""
    data = _pread(fd, start, sum(lengths))
    lines: list[Parsed | str | None] = []
    texts: list[tuple[str, bool]] = []
    at = 0
    for n in lengths:
        raw = data[at:at + n].rstrip(b"\r\n")
        at += n
        if not raw.strip():
            lines.append(None)
            continue
        try:
            article = parse_record(raw, config)
        except (RecordError, UnicodeEncodeError):
            lines.append(REPARSE)
            continue
        lines.append(Parsed(article.id, article.title))
        texts.append((article.text, article.is_html))
    fps = _fingerprints(fingerprinter, texts)
    if keys is not None and isinstance(fps, FingerprintBatch) and fps.simhash.shape[0]:
        fps.keys = keys(fps)
    return lines, fps


def _fingerprints(fingerprinter: Fingerprinter,
                  texts: list[tuple[str, bool]]) -> FingerprintBatch | list[Fingerprint | FingerprintFailed]:
    """The texts' fingerprints in one call; if that raises, one at a time (the text that raises gets
    :class:`FingerprintFailed`, the others their fingerprints)."""
    try:
        return FingerprintBatch.of(fingerprinter, texts)
    except Exception:  # noqa: BLE001, S110 - one at a time below: the failing text gets its message
        pass
    out: list[Fingerprint | FingerprintFailed] = []
    for text, is_html in texts:
        try:
            out.append(fingerprinter.fingerprint_text(text, is_html))
        except Exception as exc:  # noqa: BLE001 - one bad text must not cost the others
            out.append(FingerprintFailed(f"{type(exc).__name__}: {exc}"))
    return out


def _serve(tasks: Connection, results: Connection, fd: int, config: EngineConfig, parent: int,
           keys: KeyMaker | None) -> None:
    """A child's loop: ``(number, start, lengths)`` in, ``(number, lines, fingerprints)`` out (the
    fingerprints as one :class:`FingerprintBatch`: one pickle of a few arrays; ``None, None`` if
    reading the chunk raised)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:  # (a task wakes an idle child: as batch work it does not preempt the caller on its core)
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except (AttributeError, OSError):  # (not Linux)
        pass
    fingerprinter = Fingerprinter(config)
    while True:
        while not tasks.poll(1.0):
            if os.getppid() != parent:  # the caller is gone
                return
        try:
            task = tasks.recv()
        except EOFError:
            return
        if task is None:
            return
        number, start, lengths = task
        try:
            found = read_chunk(fingerprinter, config, fd, start, lengths, keys)
        except Exception:  # noqa: BLE001 - e.g. the file cut short: the caller does the chunk and gets the error
            found = (None, None)
        results.send((number, *found))


@dataclass(slots=True)
class _Child:
    process: multiprocessing.process.BaseProcess
    tasks: Connection
    results: Connection
    held: int = 0


class FingerprintPool:
    """``processes`` forked children that read, parse and fingerprint chunks of the file ``fd`` (see
    the module doc), and make their :class:`~stream_dedup.batch.BatchKeys` with ``keys``."""

    def __init__(self, config: EngineConfig, processes: int, fd: int, fingerprinter: Fingerprinter,
                 keys: KeyMaker | None = None) -> None:
        if processes < 1:
            raise ValueError(f"processes must be at least 1, not {processes}")
        self.config, self.fd, self.fingerprinter, self.keys = config, fd, fingerprinter, keys
        self._queued: deque[int] = deque()  # chunk numbers not sent to a child, oldest first
        self._chunks: dict[int, tuple[int, list[int]]] = {}  # number -> (start, lengths), until its result is taken
        self._done: dict[int, ChunkResult | None] = {}  # results back (None: the chunk raised in a child)
        self._held_by: dict[int, _Child] = {}
        self._next = 0
        self.stolen = 0  # chunks this process did itself
        self._children: list[_Child] = []
        self.broken = False
        context = multiprocessing.get_context("fork")
        for _ in range(processes):
            tasks_out, tasks_in = context.Pipe(duplex=False)
            results_out, results_in = context.Pipe(duplex=False)
            try:
                fcntl.fcntl(results_in.fileno(), fcntl.F_SETPIPE_SZ, _RESULTS_PIPE_BYTES)
            except OSError:  # (a lower system limit: a child may then wait to write, nothing worse)
                pass
            process = context.Process(target=_serve, args=(tasks_out, results_in, fd, config, os.getpid(), keys),
                                      daemon=True, name="stream-dedup-fingerprint")
            process.start()
            tasks_out.close()
            results_in.close()
            self._children.append(_Child(process, tasks_in, results_out))

    def submit(self, start: int, lengths: list[int]) -> int:
        """Queue the lines of ``lengths`` bytes each from byte ``start``; the number :meth:`result` takes."""
        number = self._next
        self._next += 1
        self._chunks[number] = (start, lengths)
        self._queued.append(number)
        self._collect(timeout=0)
        return number

    def result(self, number: int) -> ChunkResult:
        """Chunk ``number``'s result (done here if no child has it; while waiting, the last queued chunks are done here)."""
        while self._done.get(number) is None:
            if number in self._done:  # it raised in a child
                del self._done[number]
                self._here(number)
            elif number in self._queued:  # needed now: no child has started it
                self._queued.remove(number)
                self._here(number)
            elif self._queued:  # a child has it: do the chunk the children would reach last meanwhile
                self._here(self._queued.pop())
                self._collect(timeout=0)
            else:
                self._collect(timeout=None, child=self._held_by[number])
        del self._chunks[number]
        return self._done.pop(number)  # type: ignore[return-value]

    def close(self) -> None:
        """Stop the children (chunks they hold are abandoned)."""
        for child in self._children:
            try:
                child.tasks.send(None)
            except OSError:
                pass
        for child in self._children:
            child.process.join(timeout=5)
            if child.process.is_alive():
                child.process.kill()
                child.process.join()
            child.tasks.close()
            child.results.close()
        self._children = []

    def _here(self, number: int) -> None:
        start, lengths = self._chunks[number]
        self._done[number] = read_chunk(self.fingerprinter, self.config, self.fd, start, lengths, self.keys)
        self.stolen += 1

    def _collect(self, timeout: float | None, child: _Child | None = None) -> None:
        """Take the results that are back (waiting up to ``timeout`` for ``child``'s, None: until one
        is), then send queued chunks to children holding fewer than :data:`HELD`."""
        if self._children:
            conns = [c.results for c in self._children]
            if child is not None:
                wait([child.results], timeout)  # until its next result (or its end) is there
            ready = wait(conns, 0 if child is not None else timeout)
            for c in self._children:
                if c.results in ready:
                    try:
                        while True:
                            number, lines, fps = c.results.recv()
                            del self._held_by[number]
                            c.held -= 1
                            # (None: it raised there; the chunk is done here when asked for, and raises here)
                            self._done[number] = None if lines is None else (lines, fps)
                            if not c.results.poll():
                                break
                    except (EOFError, OSError) as exc:
                        self._lost(exc)
                        return
        try:
            for c in sorted(self._children, key=lambda c: c.held):
                while c.held < HELD and self._queued:
                    number = self._queued.popleft()
                    self._held_by[number] = c
                    c.held += 1
                    c.tasks.send((number, *self._chunks[number]))
        except OSError as exc:
            self._lost(exc)

    def _lost(self, exc: BaseException) -> None:
        """A child died: say so once; every chunk not back is queued again, to be done here from now on."""
        log.warning("a fingerprint process died (%s): reading and fingerprinting in this process from here on",
                    type(exc).__name__ if not str(exc) else exc)
        self.broken = True
        for c in self._children:
            c.process.kill()
        self.close()
        self._queued = deque(sorted({*self._queued, *self._held_by}))
        self._held_by.clear()
