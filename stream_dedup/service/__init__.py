"""The streaming service: a Faust (faust-streaming) worker around the engine.

Architecture
============

::

      producers                      every worker (N replicas)                 one worker at a time
    ─────────────┐   ┌──────────────────────────────────────────┐          ┌────────────────────────────────┐
     articles    │   │ stage 1  (agent on the input topic)      │          │ stage 2 (agent on signatures-0)│
     P partitions├──►│ parse_record(raw bytes) -> Fingerprinter │─────────►│ catch-up if index behind       │
    ─────────────┘   │  ok  -> signature record ────────────────┼──┐       │ Deduplicator.decide(id, fp,    │
                     │  bad -> articles.dlq (original bytes,    │  │       │   checkpoint=offset)  RocksDB  │
                     │         reason + source in headers)      │  │       │ event -> articles.new          │
                     └──────────────────────────────────────────┘  │       │       or articles.duplicates   │
                                                                   │       └────────────────────────────────┘
                                            articles.signatures ◄──┘ (1 partition: one total order)

Stage 1 is stateless CPU work (parse, shingle, MinHash, SimHash) and runs on every worker for
the input partitions it owns.  It produces a compact *signature record* (article id,
``Fingerprint.to_bytes()``, source topic/partition/offset, the input record's Kafka
timestamp) to the internal ``signatures_topic``, which has exactly ONE partition.  Stage 2
consumes that partition, so there is a single ordered decision stage owned by exactly one
worker (the consumer group guarantees it): every article is compared with everything indexed
before it, whichever input partition either of them arrived on.

Delivery (at least once)
    Both agents take batches (``noack_take``) and ack a batch's input events only after every
    record produced for it (signatures, events, dead letters) has been acknowledged by Kafka
    (librdkafka idempotent producer, ``acks=all``); batches are pipelined, acks may complete
    out of order, and Faust commits, every ``commit_interval`` seconds, only up to the first
    offset that is not acked.  So a crash (SIGKILL) re-delivers at most the unacknowledged
    tail.  ``Deduplicator.decide`` is idempotent: an id already indexed returns its first
    decision (``seen_before``), so a redelivered article gets the same event again and is
    never a duplicate of itself.  A failed send crashes the worker without acking (exit code
    1; the supervisor restarts it).  SIGTERM stops gracefully: in-flight batches finish and
    are acked, acked offsets are committed (nothing is redone after the restart).

Index ownership and catch-up
    The engine's RocksDB index lives in the data dir of the worker that owns signatures-0.
    ``decide`` stores the signatures offset it applied atomically with the insert (the
    checkpoint).  When a worker is assigned signatures-0 and its checkpoint is behind the
    group's committed offset (another worker decided in between, or its disk is new), it
    replays signatures-0 from checkpoint+1 up to the committed offset with a separate
    confluent-kafka consumer (manual assign, no commits), applying ``decide`` without
    emitting events, before it decides anything new; ``/readyz`` is 503 meanwhile.  Records
    are decided with ``now`` = the input record's Kafka timestamp, so a replay rebuilds the
    same index and re-deciding gives the same decisions.  The signatures topic is created
    with retention = forever (or the engine retention + 1 day) so a replay is always possible.

Dead letters
    Value and key = the input record's, byte for byte; headers ``dlq.reason``,
    ``dlq.detail``, ``dlq.source.topic``, ``dlq.source.partition``, ``dlq.source.offset``,
    ``dlq.source.timestamp`` (see :mod:`.serialization`).  Counted in
    ``stream_dedup_dead_letters_total{reason}``; the worker keeps going.

Process layout (one worker)
    The event loop (uvloop when installed) runs both agents, the Kafka I/O and the
    decisions; Faust's aiokafka consumer runs in its own thread; records are produced through
    librdkafka (:mod:`.producer`); parsing + fingerprinting run in ``fingerprint_processes``
    child processes fed over a socketpair (:mod:`.stage1`).  A worker thus uses about two
    cores.

Scaling
    Stage 1 (tokenising and hashing) scales with workers up to the number of input
    partitions.  Stage 2 is one partition on one worker: its throughput (RocksDB lookups and
    inserts plus one consume and one produce per article) is the ceiling of the whole
    service, whatever the number of workers (``bench/kafka_e2e.py`` measures it: about 2,200
    to 2,600 articles/s on the 2-core test machine, vs about 1,500 for one whole worker).
    Past that, the index would have to be sharded by LSH band key with an aggregation step
    (not implemented).

Entry points: :func:`run_worker` (``stream-dedup worker`` and ``python -m stream_dedup.service``).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys

from stream_dedup.config import EngineConfig, ServiceConfig, redacted

__all__ = ["run_worker"]

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


def run_worker(service: ServiceConfig, engine: EngineConfig) -> int:
    """Run the worker until SIGTERM/SIGINT (exit code 0) or a fatal error (non-zero). Blocking."""
    import faust

    from . import kafka_config
    from .app import DedupWorker
    from .decisions import dlq_budget
    from .http import HealthServer
    from .topics import TopicError, ensure_topics

    _setup_logging(service.log_level)
    try:
        kafka_config.validate(service)
    except kafka_config.KafkaConfigError as exc:
        log.error("invalid Kafka configuration: %s", exc)
        return 2
    log.info("service config: %s", redacted(service))
    log.info("engine config: %s", redacted(engine))
    log.info("kafka: %s", kafka_config.describe(service))
    try:
        partitions = ensure_topics(kafka_config.confluent_config(service), service, engine)
    except (TopicError, Exception) as exc:  # noqa: BLE001 - KafkaException, timeouts
        log.error("cannot prepare topics on %s: %s", service.bootstrap_servers, exc)
        return 1
    log.info("topics: %s", partitions)

    budget = dlq_budget(kafka_config.confluent_config(service), [service.dlq_topic, service.signatures_topic])
    log.info("dead letters larger than %d bytes are written as references", budget)

    loop = _new_event_loop()
    asyncio.set_event_loop(loop)
    worker = DedupWorker(service, engine, dlq_budget=budget, log_format=LOG_FORMAT)
    http = HealthServer(worker.registry, service.metrics_host, int(service.metrics_port),
                        liveness=worker.liveness, readiness=worker.readiness)
    code = 0
    # Faust allocates several objects per message: move the start-up heap out of the GC's
    # way and collect the young generation less often (measured: fewer pauses, more articles/s)
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    # Faust's consumer, the producer's delivery reports and the process pool each hand work to
    # the event loop from their own thread; with the default 5 ms GIL switch interval every
    # hand-over can wait that long behind a busy loop (measured: ~10 ms per stage at p50)
    sys.setswitchinterval(SWITCH_INTERVAL)
    try:
        loop.run_until_complete(http.start())
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
