"""The streaming service: the Kafka worker around the engine.

Architecture
============

::

      producers        every worker: stage-1 process(es)             one worker: decision process
    ─────────────┐   ┌──────────────────────────────────────────┐    ┌──────────────────────────────────┐
     articles    │   │ stage 1 (confluent-kafka, or a Faust     │    │ stage 2 (confluent-kafka, its own│
     P partitions├──►│ agent): merge partitions by timestamp,   │───►│ process): per batch ONE Kafka    │
    ─────────────┘   │ parse_record -> Fingerprinter            │    │ transaction: decide on RocksDB,  │
                     │  ok  -> signature record                 │    │ produce events + dead letters,   │
                     │  bad -> reject record (original bytes)   │    │ commit the signature offsets     │
                     └──────────────────────────────────────────┘    └──────────────────────────────────┘
                                       articles.signatures (1 partition)

The worker's main process (:mod:`.supervisor`) starts the stage processes (:mod:`.stage_process`),
restarts one that exits and serves ``/metrics``, ``/healthz`` and ``/readyz``.  With
``--stage1-client faust`` stage 1 is a Faust agent in the main process instead (:mod:`.app`,
:mod:`.faust_app`), fingerprinting in a child process: the design card's stream processor, kept
selectable, but its per-message path costs ~160 µs of CPU per record against ~2.5 µs for
confluent-kafka (``bench/consume_cost.py``), so the default is :mod:`.fingerprint_stage`.

Stage 1 is stateless CPU work and runs on every worker for the input partitions it owns.  It is
at-least-once: a batch's input offsets are committed only after its records are acknowledged by
Kafka (``acks=all``), so after a crash some records are sent again.  Stage 2
(:mod:`.decisions`) is exactly-once: it consumes the single
signatures partition with ``read_committed``, and commits events, dead letters and its consumed
offsets in one transaction with a stable ``transactional.id`` (a new owner fences an old one).
Receipts stored in the index with each decision make it answer each *input* record once, even
when stage 1 sent its signature twice or a transaction aborted after the index was written.

So for every input record the committed outputs hold exactly one event or dead letter; see
:mod:`.decisions` for the argument and ``tests/integration/test_worker_chaos.py`` for the proof
under SIGKILL cycles, broker freezes, failover and floods of bad input.

Entry points: :func:`run_worker` (``stream-dedup worker`` and ``python -m stream_dedup.service``).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from stream_dedup.config import EngineConfig, ServiceConfig, redacted
from stream_dedup.gc_tuning import relax_collector

__all__ = ["run_worker"]

T = TypeVar("T")

log = logging.getLogger("stream_dedup.service")

SWITCH_INTERVAL = 0.0005
LOG_FORMAT = "[%(asctime)s] [%(process)d] [%(levelname)s] %(name)s: %(message)s"


def _setup_logging(level: str) -> None:
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        root.addHandler(handler)
    root.setLevel(level.upper())


def _new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop when it is installed (less event-loop overhead per Kafka message), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


BROKER_RETRY_SECONDS = 5.0


class _Starting:
    """Health answers while the worker prepares its topics (the broker may not answer for a while).

    The process is alive (``/healthz`` 200: restarting it would not bring the broker back) and
    not ready (``/readyz`` 503 with the reason); ``/metrics`` serves the metrics at zero.
    """

    def __init__(self) -> None:
        from stream_dedup.metrics import Metrics

        self.metrics = Metrics()
        self.problem: str | None = None

    def liveness(self) -> tuple[bool, dict]:
        return True, {"state": "starting"}

    def readiness(self) -> tuple[bool, dict]:
        reason = f"cannot reach the broker: {self.problem}" if self.problem else "preparing the topics"
        return False, {"state": "starting", "reasons": [reason]}


def _in_thread(loop: asyncio.AbstractEventLoop, fn: Callable[[], T]) -> asyncio.Future[T]:
    """Run blocking ``fn`` in a daemon thread (an interrupted start must not wait for it)."""
    import threading

    fut: asyncio.Future[T] = loop.create_future()

    def settle(error: BaseException | None, result: T | None) -> None:
        if not fut.done():
            fut.set_exception(error) if error is not None else fut.set_result(result)

    def run() -> None:
        try:
            result = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting loop
            loop.call_soon_threadsafe(settle, exc, None)
        else:
            loop.call_soon_threadsafe(settle, None, result)

    threading.Thread(target=run, name="stream-dedup-prepare-topics", daemon=True).start()
    return fut


def _prepare_topics(client_conf: dict, service: ServiceConfig, engine: EngineConfig,
                    starting: _Starting) -> dict[str, int]:
    """Create the topics, waiting for the broker as long as it takes (one line per change of state).

    A broker that cannot be reached, or topics without a leader yet, are waited for; a topic
    layout the worker cannot use (a signatures topic with several partitions) or a refused
    creation raise :class:`TopicError`.
    """
    import time

    from .topics import TopicError, ensure_topics

    waiting_since = None
    while True:
        try:
            partitions = ensure_topics(client_conf, service, engine, timeout=10.0)
        except TopicError as exc:
            if "without a leader" not in str(exc):
                raise
            problem = str(exc)
        except Exception as exc:  # noqa: BLE001 - KafkaException: the broker is unreachable
            problem = str(exc)
        else:
            if waiting_since is not None:
                log.info("the broker at %s answers after %.0f s", service.bootstrap_servers,
                         time.monotonic() - waiting_since)
            return partitions
        starting.problem = problem  # /readyz says why
        if waiting_since is None:
            waiting_since = time.monotonic()
            log.warning("cannot reach the Kafka broker at %s (%s): retrying every %.0f s", service.bootstrap_servers,
                        problem, BROKER_RETRY_SECONDS)
        time.sleep(BROKER_RETRY_SECONDS)


def run_worker(service: ServiceConfig, engine: EngineConfig) -> int:
    """Run the worker until SIGTERM/SIGINT (exit code 0) or a fatal error (non-zero). Blocking."""
    from . import kafka_config
    from .http import HealthServer
    from .topics import TopicError, dlq_budget

    _setup_logging(service.log_level)
    try:
        kafka_config.validate(service)
    except kafka_config.KafkaConfigError as exc:
        log.error("invalid Kafka configuration: %s", exc)
        return 2
    log.info("service config: %s", redacted(service))
    log.info("engine config: %s", redacted(engine))
    log.info("kafka: %s", kafka_config.describe(service))
    client_conf = kafka_config.service_client_config(service)
    loop = _new_event_loop()
    asyncio.set_event_loop(loop)
    # the health server answers from the start: while the broker is waited for, /healthz is 200
    # and /readyz 503 with the reason (a liveness probe must not kill a worker waiting for Kafka)
    starting = _Starting()
    http = HealthServer(starting.metrics.registry, service.metrics_host, int(service.metrics_port),
                        liveness=starting.liveness, readiness=starting.readiness)
    try:
        loop.run_until_complete(http.start())
        partitions = loop.run_until_complete(
            _in_thread(loop, lambda: _prepare_topics(client_conf, service, engine, starting)))
        log.info("topics: %s", partitions)
        budget = dlq_budget(client_conf, [service.dlq_topic, service.signatures_topic])
    except TopicError as exc:
        log.error("cannot prepare topics on %s: %s", service.bootstrap_servers, exc)
        loop.run_until_complete(http.stop())
        return 1
    except KeyboardInterrupt:
        log.info("interrupted while waiting for the broker")
        return 130
    log.info("dead letters larger than %d bytes are written as references", budget)

    if service.stage1_client != "faust":
        return _run_stages(loop, http, service, engine, budget)
    import faust

    from .app import DedupWorker

    worker = DedupWorker(service, engine, dlq_budget=budget, log_format=LOG_FORMAT)
    http.registry, http.liveness, http.readiness = worker.registry, worker.liveness, worker.readiness
    code = 0
    gc.collect()  # (what the start-up left for the collector, before the rest is frozen)
    relax_collector()
    # Faust's consumer, the producer's delivery reports and the process pool each hand work to
    # the event loop from their own thread; with the default 5 ms GIL switch interval every
    # hand-over can wait that long behind a busy loop (measured: ~10 ms per stage at p50)
    sys.setswitchinterval(SWITCH_INTERVAL)
    try:
        fw = faust.Worker(worker.app, loop=loop, loglevel=service.log_level.upper(), quiet=True,
                          redirect_stdouts=False, override_logging=False)
        try:
            fw.execute_from_commandline()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        try:
            worker.close()
        except Exception:  # noqa: BLE001
            log.exception("closing the worker failed")
    if worker.fatal is not None or worker.app.crash_reason is not None:
        return code or 1
    log.info("worker stopped (exit code %d)", code)
    return code


def _run_stages(loop: asyncio.AbstractEventLoop, http: Any, service: ServiceConfig, engine: EngineConfig,
                budget: int) -> int:
    """``--stage1-client confluent``: the stage processes, watched until SIGTERM/SIGINT or a fatal error."""
    import signal

    from .supervisor import StageWorker

    worker = StageWorker(service, engine, dlq_budget=budget, log_format=LOG_FORMAT)
    http.registry, http.liveness, http.readiness = worker.registry, worker.liveness, worker.readiness
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    code = 1
    try:
        worker.start()
        code = loop.run_until_complete(worker.run(stop))
    finally:
        log.info("stopping the stages")
        try:
            worker.close()
        except Exception:  # noqa: BLE001
            log.exception("closing the worker failed")
        loop.run_until_complete(http.stop())
    log.info("worker stopped (exit code %d)", code)
    return code
