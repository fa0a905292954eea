"""The batches of ``dedup``: records decided a batch at once, in input order, read, parsed and
fingerprinted ahead in child processes when there is a :class:`~stream_dedup.fingerprint_pool.FingerprintPool`;
a pipe's lines with whether more are ready (:func:`lines_with_readiness`), so that its batches are
what has arrived.

:meth:`BatchDecider.send` takes the next batch of lines read and gives back the batches whose
decisions are ready, oldest first: at once without a pool; with one, the batch's byte range goes to
the pool and the batches :data:`AHEAD` of it are decided meanwhile. :meth:`BatchDecider.drain`
gives the rest at the end. (A pool whose child died does its chunks in this process from then on.)
A batch that raises is decided again one record at a time, so a failing record gets its exception
in place of a decision and the others are decided.
"""

from __future__ import annotations

import fcntl
import os
import select
import stat
from collections import deque
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from ..record import PROCESSING_ERROR, RecordError, parse_record

if TYPE_CHECKING:
    from ..batch_decisions import EventBatch
    from ..engine import Deduplicator
    from ..fingerprint import Fingerprint
    from ..fingerprint_batch import FingerprintBatch
    from ..fingerprint_pool import FingerprintFailed, FingerprintPool, Parsed
    from ..record import Article

AUTO_POOL_BYTES = 1 << 20  # an input file this large gets a fingerprint process by default (it starts in ~10 ms)
#: bytes a pipe is read per call, and read at most without waiting before its lines are handed on
READ_BYTES, READY_BYTES = 1 << 16, 1 << 20
#: the buffer an input file is read through: Python's default is the file system's block (4 kB here:
#: 6,475 reads for the 26 MB dev stream, a longer line joined from pieces). A one-CPU ``dedup`` of
#: the ten-round dev stream (432 MB) spent 3,909 `perf` samples of ~49,000 copying the file in the
#: kernel (``_copy_to_iter``) through 4 kB, 1,177 through 1 MB, 210 through 64 kB (within the caches)
INPUT_BUFFER = 1 << 16
#: the capacity asked for an input pipe (``F_SETPIPE_SZ``; Linux's default limit for a user, ``/proc/sys/fs/pipe-max-size``)
PIPE_BYTES = 1 << 20

AHEAD = 3  # batches handed to the pool before the oldest is decided (2: ~6 % slower on the dev stream, 2 CPUs)
#: a line read: (line number, bytes, the line, its article (or what a fingerprint process parsed of it) or
#: None, the error that rejects it or None)
Line = tuple[int, int, bytes, "Article | Parsed | None", "Exception | None"]
#: a batch of lines and its articles' events (:class:`~stream_dedup.batch_decisions.EventBatch`), or
#: the decision (or exception) of each of its articles in order (a batch decided one record at a time)
Decided = tuple[list[Line], "EventBatch | list[object]"]


def widen_pipe(fd: int) -> int | None:
    """Ask for a pipe of :data:`PIPE_BYTES` on ``fd`` if it reads one; its capacity (None: not a pipe).

    A pipe holds 64 kB by default: ~11 dev-stream articles. A writer faster than the decisions
    (``zcat feed.jsonl.gz |``) has refilled it only partly when the reader looks again, so every
    batch was one pipe's worth (a mean of 11 records against 256 from a file, and ~20 % slower a
    record: per-batch costs). With 1 MB the writer keeps ahead and a batch is what a file gives.
    A lower system limit leaves the pipe as it is."""
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return None
        return fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except OSError:  # (over the limit, or no such fcntl on this system: the pipe's own size)
        try:
            return fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
        except OSError:
            return None


def lines_with_readiness(source: Iterable[bytes]) -> Iterator[tuple[bytes, bool]]:
    """The lines of ``source``, each with whether the next complete line is already there.

    A pipe or a terminal is read as it arrives: ``dedup`` decides what has arrived in one batch
    and waits for more only when nothing is pending, so a record of a slow stream (``tail -f``)
    is decided as soon as its line is complete, while a fast pipe (``cat big.jsonl |``) is
    decided in full batches, as a file is (the same decisions either way: a batch decides as
    one record at a time would). A source without a file descriptor (a test's stdin) is read a
    line at a time, each line its own batch.
    """
    try:
        fd = source.fileno()  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        for line in source:
            yield line, False
        return
    yield from _pipe_lines(fd)


def _pipe_lines(fd: int) -> Iterator[tuple[bytes, bool]]:
    widen_pipe(fd)
    tail = b""
    eof = False
    while not eof:
        data = os.read(fd, READ_BYTES)  # waits for the next bytes (a signal interrupts it)
        if not data:
            break
        chunks, size = [data], len(data)
        while size < READY_BYTES and select.select([fd], [], [], 0)[0]:  # and takes what else is there
            more = os.read(fd, READ_BYTES)
            if not more:
                eof = True
                break
            chunks.append(more)
            size += len(more)
        lines = (tail + b"".join(chunks)).split(b"\n")
        tail = lines.pop()
        last = len(lines) - 1
        for i, line in enumerate(lines):
            yield line + b"\n", i < last
    if tail:
        yield tail, False


def fingerprint_pool(processes: int | None, dedup: Deduplicator, input_bytes: int | None,
                     fd: int) -> FingerprintPool | None:
    """The pool of ``--fingerprint-processes`` reading the file ``fd`` for ``dedup`` (None: one for an
    input file of at least :data:`AUTO_POOL_BYTES` when this process may use two cores or more), or
    None for none."""
    if processes is None:
        processes = int(input_bytes is not None and input_bytes >= AUTO_POOL_BYTES and len(os.sched_getaffinity(0)) > 1)
    if not processes:
        return None
    from ..batch import KeyMaker
    from ..fingerprint_pool import FingerprintPool

    return FingerprintPool(dedup.config, processes, fd, dedup.fingerprinter, KeyMaker.of(dedup))


class BatchDecider:
    """Decides batches of lines for ``dedup`` in order, ``checkpoint`` naming the input (see the module doc).

    Without a pool the lines come parsed; with one they come as read (:attr:`parses`), and each
    batch with the byte offset of its first line in the file: the pool's processes read, parse and
    fingerprint them, and the decided batch's lines carry what they found."""

    def __init__(self, dedup: Deduplicator, pool: FingerprintPool | None, checkpoint: str) -> None:
        self.dedup, self.pool, self.checkpoint = dedup, pool, checkpoint
        # sent on, oldest first: the lines, and with a pool the numbers of their chunks
        self.in_flight: deque[tuple[list[Line], list[int] | None]] = deque()

    @property
    def parses(self) -> bool:
        """Whether the lines are parsed here (by the pool's processes), not by the caller."""
        return self.pool is not None

    def send(self, batch: list[Line], start: int = 0) -> Iterator[Decided]:
        """Take ``batch`` (its first line at byte ``start`` of the file); yield the batches decided
        meanwhile (this one too without a pool)."""
        chunks = None
        if self.pool is not None:
            from ..fingerprint_pool import CHUNK_LINES

            chunks = []
            for i in range(0, len(batch), CHUNK_LINES):
                lengths = [nbytes for _, nbytes, _, _, _ in batch[i:i + CHUNK_LINES]]
                chunks.append(self.pool.submit(start, lengths))
                start += sum(lengths)
        self.in_flight.append((batch, chunks))
        while len(self.in_flight) > (AHEAD if self.pool is not None else 0):
            yield self._decide(*self.in_flight.popleft())

    def drain(self) -> Iterator[Decided]:
        """The batches still in hand, decided."""
        while self.in_flight:
            yield self._decide(*self.in_flight.popleft())

    @property
    def busy(self) -> bool:
        """Whether batches were sent and are not decided yet."""
        return bool(self.in_flight)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()

    def _decide(self, batch: list[Line], chunks: list[int] | None) -> Decided:
        from ..fingerprint import Fingerprint

        fingerprints = None
        if chunks is not None:
            batch, fingerprints = self._parsed(batch, chunks)
        articles = [article for _, _, _, article, _ in batch if article is not None]
        checkpoints = [(self.checkpoint, n) for n, _, _, article, _ in batch if article is not None]
        if isinstance(fingerprints, list) and any(not isinstance(fp, Fingerprint) for fp in fingerprints):
            # (rare: a text whose fingerprint raised: the batch is decided from the texts, where it raises
            # again, and only its record is rejected)
            articles = [parse_record(raw, self.dedup.config) for _, _, raw, article, _ in batch if article is not None]
            fingerprints = None
        return batch, decide_batch(self.dedup, articles, checkpoints, fingerprints)

    def _parsed(self, batch: list[Line], chunks: list[int]) -> tuple[list[Line], FingerprintBatch | list[Fingerprint]
                                                                     | list[Fingerprint | FingerprintFailed]]:
        """The batch's lines with what the pool found in them (a line it could not parse parsed here
        again, for its error), and its records' fingerprints: the pool's batch of them when the lines
        are one chunk whose texts all were, else a list (with a :class:`FingerprintFailed` in place
        of each that raised)."""
        from ..fingerprint_batch import FingerprintBatch
        from ..fingerprint_pool import CHUNK_LINES, REPARSE

        lines: list[Line] = []
        fingerprints: list[Fingerprint | FingerprintFailed] = []
        whole: FingerprintBatch | None = None
        for i, number in enumerate(chunks):
            parsed, fps = self.pool.result(number)  # type: ignore[union-attr]
            if isinstance(fps, FingerprintBatch) and len(chunks) == 1:
                whole = fps
            else:
                fingerprints += fps.fingerprints() if isinstance(fps, FingerprintBatch) else fps
            for (lineno, nbytes, raw, _, _), found in zip(batch[i * CHUNK_LINES:(i + 1) * CHUNK_LINES], parsed,
                                                          strict=True):
                error: Exception | None = None
                if found == REPARSE:
                    found = None
                    try:
                        parse_record(raw, self.dedup.config)
                        error = RecordError(PROCESSING_ERROR, "the record parsed here but not in a fingerprint process")
                    except (RecordError, UnicodeEncodeError) as err:
                        error = err
                lines.append((lineno, nbytes, raw, found, error))  # type: ignore[arg-type]
        return lines, whole if whole is not None else fingerprints


#: lines decided before ``dedup`` tells the index how many more articles a file holds (InputForecast)
FORECAST_LINES = 512
#: the most articles the in-memory lists are prepared for at once (~1.1 GB of lists at most: a larger
#: input grows them as it goes)
FORECAST_MAX = 1 << 20


class InputForecast:
    """How many more articles an input will index, told once to :meth:`Deduplicator.expect` after
    :data:`FORECAST_LINES` of its lines are decided: the lines left (``records`` given, else a
    file's bytes left at the bytes a line so far), times the share of the lines decided that were
    indexed. The in-memory lists are then prepared for them at once instead of doubling step by
    step (whole ``dedup`` runs of 74,310 short items 12-13 % faster, README: *What changed
    (f1b2b4a-2462ca5)*)."""

    def __init__(self, dedup: Deduplicator, total_bytes: int | None, records: int | None = None,
                 skipped: int = 0) -> None:
        """``total_bytes``: a file's size (None: a pipe); ``records``: the lines the input holds
        (``--expect-records``), ``skipped`` of them skipped (``--resume``)."""
        self.dedup, self.total, self.records, self.skipped = dedup, total_bytes, records, skipped
        self.indexed = len(dedup)  # (an existing state's articles: not this input's)
        self.first: int | None = None  # the byte offset of the first line read to be decided
        self.done = total_bytes is None and records is None

    def sent(self, batch_at: int, offset: int, read: int, decided: int) -> None:
        """A batch whose first line is at byte ``batch_at`` was handed on; reading stands at byte
        ``offset``, ``read`` lines were read to be decided and ``decided`` of them are."""
        if self.done:
            return
        if self.first is None:
            self.first = batch_at
        if decided < FORECAST_LINES:
            return
        self.done = True
        indexed = len(self.dedup) - self.indexed
        if indexed <= 0:
            return
        if self.records is not None:
            lines = self.records - self.skipped - decided
        elif self.total is not None and offset > self.first:
            lines = (self.total - offset) * read / (offset - self.first) + (read - decided)
        else:
            return
        if lines > 0:
            self.dedup.expect(min(FORECAST_MAX, int(lines * indexed / decided)))


def decide_batch(dedup: Deduplicator, articles: list[Article | Parsed], checkpoints: list[tuple[str, int]],
                 fingerprints: list[Fingerprint] | FingerprintBatch | None = None) -> EventBatch | list[object]:
    """Their events in one batch (on ``fingerprints`` if given, else fingerprinted here from the
    articles' texts: :meth:`Deduplicator.decide_batch_events`); if the batch raises (it then writes
    nothing), their decisions one at a time (on the same fingerprints when given: what a
    fingerprint process parsed holds no text), so that a failing record gets its exception in
    place of a decision and the others are decided."""
    if not articles:
        return []
    try:
        if fingerprints is None:
            return dedup.process_batch_events(articles, checkpoints=checkpoints)  # type: ignore[arg-type]
        return dedup.decide_batch_events([a.id for a in articles], fingerprints, checkpoints=checkpoints)
    except Exception as exc:  # noqa: BLE001 - reported per record by the caller
        if len(articles) == 1:
            return [exc]
    out: list[object] = []
    for i, (article, checkpoint) in enumerate(zip(articles, checkpoints, strict=True)):
        try:
            out.append(dedup.process(article, checkpoint=checkpoint) if fingerprints is None  # type: ignore[arg-type]
                       else dedup.decide(article.id, fingerprints[i], checkpoint=checkpoint))
        except Exception as exc:  # noqa: BLE001
            out.append(exc)
    return out
