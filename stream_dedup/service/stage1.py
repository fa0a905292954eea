"""Stage-1 CPU work (parse + fingerprint), runnable in a separate process.

The event loop of the worker does the Kafka I/O and the decisions; the pure CPU part of stage 1
runs in a small process pool (``--fingerprint-processes``, default 1) so that a worker uses two
cores.  The functions here are module-level and take/return plain bytes/tuples so that batches
cross the process boundary with one pickle each way.
"""

from __future__ import annotations

import logging
import time
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
        warm = parse_record(b'{"id": "warm-up", "text": "warm up the compiled kernels of the fingerprint"}', config)
        _state["fingerprinter"].fingerprint(warm)
    except Exception:  # noqa: BLE001 - warm-up is best effort
        log.debug("warm-up failed", exc_info=True)


def multiprocessing_child() -> bool:
    import multiprocessing

    return multiprocessing.parent_process() is not None


def compute(items: list[Item]) -> list[Result]:
    """Parse and fingerprint a batch; never raises for a bad record (it becomes a ``dlq`` result)."""
    from stream_dedup.record import RecordError, parse_record

    config: EngineConfig = _state["config"]
    fingerprinter = _state["fingerprinter"]
    out: list[Result] = []
    for value, topic, partition, offset, ts_ms in items:
        t0 = time.perf_counter()
        try:
            article = parse_record(value, config)
        except RecordError as err:
            out.append(("dlq", err.reason, str(err)))
            continue
        try:
            fp = fingerprinter.fingerprint(article)
        except Exception as exc:  # noqa: BLE001 - one poisonous record must not stop the stream
            log.exception("fingerprinting %r failed", article.id)
            out.append(("dlq", PROCESSING_ERROR, f"{type(exc).__name__}: {exc}"))
            continue
        sig = SignatureRecord(article_id=article.id, fingerprint=fp.to_bytes(), source_topic=topic,
                              source_partition=partition, source_offset=offset, timestamp_ms=ts_ms,
                              engine_us=int((time.perf_counter() - t0) * 1e6))
        out.append(("sig", article.id, sig.encode()))
    return out
