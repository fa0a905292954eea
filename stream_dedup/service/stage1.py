"""Stage-1 CPU work (parse + fingerprint), runnable in a separate process.

The event loop of the worker does the Kafka I/O and the decisions; the pure CPU part of stage 1
runs in child processes (``--fingerprint-processes``, default 1) so that a worker uses two
cores.  :func:`compute` takes and returns plain bytes/tuples so that a batch crosses the process
boundary with one pickle each way (:class:`ComputePool`).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import pickle
import socket
import struct
import time
from collections import deque
from typing import Any

from stream_dedup.config import EngineConfig

from .serialization import SignatureRecord

log = logging.getLogger(__name__)

#: the adapters' reason for a valid record whose processing raised (``stream_dedup.record.PROCESSING_ERROR``)
PROCESSING_ERROR = "processing_error"

#: one input record: (value bytes, topic, partition, offset, timestamp_ms)
Item = tuple[bytes, str, int, int, int]
#: ("sig", article_id, signature bytes) or ("dlq", reason, detail)
Result = tuple[str, str, Any]

_state: dict[str, Any] = {}


def init(config: EngineConfig) -> None:
    """Process-pool initializer: build the Fingerprinter once and warm up the compiled kernels."""
    import signal
    import threading

    from stream_dedup.fingerprint import Fingerprinter
    from stream_dedup.record import parse_record

    if threading.current_thread() is threading.main_thread() and multiprocessing_child():
        # the parent handles SIGINT/SIGTERM and shuts the pool down
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _state["config"] = config
    _state["fingerprinter"] = Fingerprinter(config)
    try:
        # (a non-ASCII word: the tables of folding by table are built here, not on the first article's clock)
        warm = parse_record('{"id": "warm-up", "text": "warm up the compiled kernels of the fingerprint, café"}'.encode(),
                            config)
        _state["fingerprinter"].fingerprint(warm)
    except Exception:  # noqa: BLE001 - warm-up is best effort
        log.debug("warm-up failed", exc_info=True)


def multiprocessing_child() -> bool:
    import multiprocessing

    return multiprocessing.parent_process() is not None


def compute(items: list[Item]) -> list[Result]:
    """Parse and fingerprint a batch (the parsed articles' fingerprints in one
    :meth:`~stream_dedup.fingerprint.Fingerprinter.fingerprint_many`; if that raises, one at a time,
    so that only the failing record is lost to it); never raises for a bad record (it becomes a
    ``dlq`` result). A record's ``engine_us`` is its parse and its share of the batch's fingerprint time."""
    from stream_dedup.record import RecordError, parse_record

    config: EngineConfig = _state["config"]
    fingerprinter = _state["fingerprinter"]
    out: list[Result | None] = []
    parsed: list[tuple[int, Any, Item, float]] = []  # (position in out, article, item, parse seconds)
    for item in items:
        t0 = time.perf_counter()
        try:
            article = parse_record(item[0], config)
        except RecordError as err:
            out.append(("dlq", err.reason, str(err)))
            continue
        parsed.append((len(out), article, item, time.perf_counter() - t0))
        out.append(None)
    if not parsed:
        return out  # type: ignore[return-value]
    t0 = time.perf_counter()
    try:
        fingerprints: list[Any] = fingerprinter.fingerprint_many([(a.text, a.is_html) for _, a, _, _ in parsed])
        share = (time.perf_counter() - t0) / len(parsed)
    except Exception:  # noqa: BLE001 - one at a time below: the failing record gets its error
        fingerprints, share = [None] * len(parsed), 0.0
    for (at, article, (_, topic, partition, offset, ts_ms), parse_s), fp in zip(parsed, fingerprints, strict=True):
        t1 = time.perf_counter()
        if fp is None:
            try:
                fp = fingerprinter.fingerprint(article)
            except Exception as exc:  # noqa: BLE001 - one poisonous record must not stop the stream
                log.exception("fingerprinting %r failed", article.id)
                out[at] = ("dlq", PROCESSING_ERROR, f"{type(exc).__name__}: {exc}")
                continue
        sig = SignatureRecord(article_id=article.id, fingerprint=fp.to_bytes(), source_topic=topic,
                              source_partition=partition, source_offset=offset, timestamp_ms=ts_ms,
                              engine_us=int((parse_s + share + time.perf_counter() - t1) * 1e6))
        out[at] = ("sig", article.id, sig.encode())
    return out  # type: ignore[return-value]


# ---------------------------------------------------------------------- worker processes

_LEN = struct.Struct(">I")
READY = b"ready"


def _recv_exactly(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _child_main(sock: socket.socket, config: EngineConfig) -> None:
    """Child process: read length-prefixed pickled batches, answer with the results, in order."""
    init(config)
    sock.sendall(_LEN.pack(len(READY)) + READY)
    while True:
        head = _recv_exactly(sock, _LEN.size)
        if head is None:
            return  # the parent closed the socket (or died)
        body = _recv_exactly(sock, _LEN.unpack(head)[0])
        if body is None:
            return
        out = pickle.dumps(compute(pickle.loads(body)), protocol=pickle.HIGHEST_PROTOCOL)
        sock.sendall(_LEN.pack(len(out)) + out)


class ComputeProcess:
    """One child process running :func:`compute`, driven from the event loop over a socketpair.

    No helper threads in the worker (unlike ``ProcessPoolExecutor``, whose feeder and manager
    threads compete with the event loop for the GIL on every batch): the parent writes a
    batch with the loop's non-blocking socket I/O and a reader task resolves the futures in
    FIFO order.  If the child dies, every pending and later call fails (the worker crashes
    without acking: the records are redelivered after the restart).
    """

    def __init__(self, config: EngineConfig, start_timeout: float = 180.0) -> None:
        parent, child = socket.socketpair()
        ctx = multiprocessing.get_context("spawn")
        self.proc = ctx.Process(target=_child_main, args=(child, config), name="stream-dedup-fingerprint",
                                daemon=True)
        self.proc.start()
        child.close()
        parent.settimeout(start_timeout)
        head = _recv_exactly(parent, _LEN.size)
        ready = head is not None and _recv_exactly(parent, _LEN.unpack(head)[0])
        if ready != READY:
            raise RuntimeError(f"fingerprint process {self.proc.pid} did not start")
        parent.settimeout(None)
        parent.setblocking(False)
        self.sock = parent
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._waiters: deque[asyncio.Future] = deque()
        self._read_task: asyncio.Task | None = None
        self._connected: asyncio.Future | None = None
        self._error: BaseException | None = None

    async def _connect(self) -> None:
        self._reader, self._writer = await asyncio.open_connection(sock=self.sock, limit=1 << 26)
        self._read_task = asyncio.ensure_future(self._read_loop())

    async def _read_loop(self) -> None:
        assert self._reader is not None
        try:
            while True:
                head = await self._reader.readexactly(_LEN.size)
                body = await self._reader.readexactly(_LEN.unpack(head)[0])
                fut = self._waiters.popleft()
                if not fut.done():
                    fut.set_result(pickle.loads(body))
        except asyncio.CancelledError:
            self._fail(RuntimeError("fingerprint process client stopped"))
            raise
        except BaseException as exc:  # noqa: BLE001 - EOF: the child died
            self._fail(RuntimeError(f"fingerprint process {self.proc.pid} failed: {exc!r} "
                                    f"(exit code {self.proc.exitcode})"))

    def _fail(self, exc: BaseException) -> None:
        self._error = exc
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_exception(exc)

    async def compute(self, items: list[Item]) -> list[Result]:
        if self._error is not None:
            raise self._error
        if self._connected is None:
            self._connected = asyncio.ensure_future(self._connect())
        await self._connected
        assert self._writer is not None
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        data = pickle.dumps(items, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self._writer.write(_LEN.pack(len(data)) + data)
            await self._writer.drain()
        except ConnectionError as exc:  # the child died before the read loop saw its end: the same failure
            self._fail(RuntimeError(f"fingerprint process {self.proc.pid} failed: {exc!r} "
                                    f"(exit code {self.proc.exitcode})"))
        return await fut

    def close(self) -> None:
        if self._read_task is not None:
            self._read_task.cancel()
        try:
            self.sock.close()
        except OSError:
            pass
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.terminate()


class ComputePool:
    """``n`` :class:`ComputeProcess` used round-robin (``n = 0``: compute in the event loop)."""

    def __init__(self, config: EngineConfig, n: int) -> None:
        self.procs = [ComputeProcess(config) for _ in range(n)]
        self._next = 0
        if not self.procs:
            init(config)

    async def compute(self, items: list[Item]) -> list[Result]:
        if not self.procs:
            return compute(items)
        proc = self.procs[self._next]
        self._next = (self._next + 1) % len(self.procs)
        return await proc.compute(items)

    def close(self) -> None:
        for p in self.procs:
            p.close()
        self.procs = []
