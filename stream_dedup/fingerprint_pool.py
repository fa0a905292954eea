"""Fingerprints computed in child processes while the caller decides: the second core for ``dedup``.

Deciding is sequential (each article is decided against every one before it), fingerprinting is
not: an article's fingerprint depends on its text alone. So ``stream-dedup dedup`` hands each batch
of parsed articles to :class:`FingerprintPool` as soon as it is read and decides the batch before
it meanwhile; the decisions are those of the in-process path (:meth:`Deduplicator.decide_batch`
on the same fingerprints: a child sends a batch's back as one
:class:`~stream_dedup.fingerprint_batch.FingerprintBatch`, the values of
:meth:`Fingerprinter.fingerprint_many`). The Kafka worker does the same split with its stage-1 processes.

Children are forked (they inherit the loaded kernels: no start-up of their own) and ignore SIGINT
and SIGTERM (the parent handles them: it finishes the batch in hand, then stops). A batch is split
into one chunk per child. A text whose fingerprint raises comes back as :class:`FingerprintFailed`
in its place, the others unaffected. If a child dies, :meth:`FingerprintPool.fingerprints` raises
:class:`PoolBroken` and the caller fingerprints in-process from then on.
"""

from __future__ import annotations

import multiprocessing
import signal
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING

from .fingerprint import Fingerprint, Fingerprinter
from .fingerprint_batch import FingerprintBatch

if TYPE_CHECKING:
    from .config import EngineConfig
    from .record import Article

__all__ = ["FingerprintFailed", "FingerprintPool", "PoolBroken"]

_fingerprinter: list[Fingerprinter] = []  # the child's, built once by _init


class FingerprintFailed(Exception):
    """Fingerprinting one text raised in a child (its type and message)."""


class PoolBroken(Exception):
    """A child process died (killed, out of memory): its batch has no fingerprints."""


def _init(config: EngineConfig) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _fingerprinter.append(Fingerprinter(config))


def _fingerprint_chunk(texts: list[tuple[str, bool]]) -> FingerprintBatch | list[bytes | str]:
    """The texts' fingerprints as one :class:`~stream_dedup.fingerprint_batch.FingerprintBatch` (one
    pickle of a few arrays); if that raises, each text's :meth:`Fingerprint.to_bytes`, or
    ``"Type: message"`` for the text that raised."""
    fingerprinter = _fingerprinter[0]
    try:
        return FingerprintBatch.of(fingerprinter, texts)
    except Exception:  # noqa: BLE001, S110 - one at a time below: the failing text gets its message
        pass
    out: list[bytes | str] = []
    for text, is_html in texts:
        try:
            out.append(fingerprinter.fingerprint_text(text, is_html).to_bytes())
        except Exception as exc:  # noqa: BLE001 - one bad text must not cost the batch
            out.append(f"{type(exc).__name__}: {exc}")
    return out


class FingerprintPool:
    """``processes`` forked children that fingerprint batches of articles (see the module doc)."""

    def __init__(self, config: EngineConfig, processes: int) -> None:
        if processes < 1:
            raise ValueError(f"processes must be at least 1, not {processes}")
        self.processes = processes
        self._pool = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("fork"),
                                         initializer=_init, initargs=(config,))

    def submit(self, articles: list[Article]) -> list[Future[FingerprintBatch | list[bytes | str]]]:
        """Start fingerprinting ``articles``; :meth:`fingerprints` of what this returns gives them."""
        texts = [(a.text, a.is_html) for a in articles]
        size = -(-len(texts) // self.processes) or 1
        try:
            return [self._pool.submit(_fingerprint_chunk, texts[i:i + size]) for i in range(0, len(texts), size)]
        except (BrokenProcessPool, RuntimeError) as exc:
            raise PoolBroken(str(exc) or "a fingerprint process died") from exc

    @staticmethod
    def fingerprints(futures: list[Future[FingerprintBatch | list[bytes | str]]]) -> list[Fingerprint | FingerprintFailed]:
        """The fingerprints of a :meth:`submit`'s articles, in order (waits for them)."""
        out: list[Fingerprint | FingerprintFailed] = []
        try:
            for future in futures:
                result = future.result()
                if isinstance(result, FingerprintBatch):
                    out += result.fingerprints()
                else:
                    out += [Fingerprint.from_bytes(r) if isinstance(r, bytes) else FingerprintFailed(r) for r in result]
        except BrokenProcessPool as exc:
            raise PoolBroken(str(exc) or "a fingerprint process died") from exc
        return out

    def close(self) -> None:
        """Stop the children (batches still running are abandoned)."""
        self._pool.shutdown(wait=True, cancel_futures=True)
