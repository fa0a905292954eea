"""The Faust app of stage 1: its settings, and the one patch of Faust's internals we need.

:func:`make_faust_app` builds the ``faust.App`` every worker runs (no agents: :mod:`.app`
adds them).  Faust keeps no state here (``store="memory://"``, no tables: the engine has its
own RocksDB), serializes nothing (raw bytes both ways), and commits only acked offsets
(``stream_wait_empty``).  Two things Faust does not let us set through its settings:

* the aiokafka consumer's ``fetch_max_wait_ms`` (hard-coded to 1,500 ms):
  :func:`_patch_fetch_max_wait` wraps ``AIOKafkaConsumerThread._create_worker_consumer``
  (faust-streaming 0.15.3, pinned in ``requirements/runtime.lock``; tested in
  ``tests/service/test_faust_app.py``);
* the Monitor's per-message bookkeeping: replaced through the public ``Monitor`` setting by
  :func:`_lean_monitor_class`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import faust

from stream_dedup.config import ServiceConfig

from . import kafka_config

#: longest a consumer fetch may wait on the broker for data (see _patch_fetch_max_wait)
FETCH_MAX_WAIT_MS = 100


def _patch_fetch_max_wait() -> None:
    """Faust hard-codes ``fetch_max_wait_ms=1500`` for its aiokafka consumer; we use :data:`FETCH_MAX_WAIT_MS`.

    aiokafka keeps one fetch in flight per broker and leaves out of it the partitions whose
    records are still buffered; a record arriving on such a partition while the fetch for the
    others is parked on the broker waits until that fetch returns.  1.5 s is too long for that.
    Very short waits cost CPU instead: at 5 ms an idle worker kept the broker at 24 % of a core
    and its own event loop at 26 % (200 fetches a second).  At 100 ms both are under 10 %, and
    the latency at 300 records/s on 3 partitions was the same (p50 22-28 ms either way).
    """
    from faust.transport.drivers import aiokafka as driver

    cls = driver.AIOKafkaConsumerThread
    if getattr(cls, "_stream_dedup_patched", False):
        return
    original = cls._create_worker_consumer

    def _create_worker_consumer(self: Any, transport: Any) -> Any:
        consumer = original(self, transport)
        consumer._fetch_max_wait_ms = min(consumer._fetch_max_wait_ms, FETCH_MAX_WAIT_MS)
        return consumer

    _create_worker_consumer.__wrapped__ = original  # functools' convention: the method Faust has
    cls._create_worker_consumer = _create_worker_consumer
    cls._stream_dedup_patched = True


def _lean_monitor_class() -> type:
    """Faust's Monitor without its per-message bookkeeping (we export our own metrics).

    The default Monitor keeps per-event statistics (timestamps, deques, counters per topic)
    on every message in and out; on this workload that is a measurable share of the event
    loop.  Rebalance/commit/assignment hooks are kept.
    """
    from faust.sensors.monitor import Monitor

    class _LeanMonitor(Monitor):
        def on_message_in(self, tp: Any, offset: int, message: Any) -> None:
            return None

        def on_stream_event_in(self, tp: Any, offset: int, stream: Any, event: Any) -> None:
            return None

        def on_stream_event_out(self, tp: Any, offset: int, stream: Any, event: Any, state: Any = None) -> None:
            return None

        def on_message_out(self, tp: Any, offset: int, message: Any) -> None:
            return None

        def on_send_initiated(self, producer: Any, topic: str, message: Any, keysize: int,
                              valsize: int) -> Any:
            return None

        def on_send_completed(self, producer: Any, state: Any, metadata: Any) -> None:
            return None

    return _LeanMonitor


def make_faust_app(service: ServiceConfig) -> faust.App:
    """The Faust app with the worker's settings (no agents yet)."""
    _patch_fetch_max_wait()
    return faust.App(
        service.app_id,
        broker=kafka_config.faust_broker(service),
        broker_credentials=kafka_config.faust_credentials(service),
        autodiscover=False,
        web_enabled=False,  # our own HTTP server serves /metrics /healthz /readyz
        datadir=str(Path(service.data_dir) / "faust"),
        store="memory://",  # no Faust tables: the engine has its own RocksDB
        key_serializer="raw",
        value_serializer="raw",
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        producer_linger=0.002,
        broker_commit_interval=float(service.commit_interval),
        broker_session_timeout=float(service.session_timeout),
        broker_heartbeat_interval=max(0.5, min(3.0, float(service.session_timeout) / 5)),
        broker_rebalance_timeout=max(float(service.session_timeout), 10.0),
        consumer_group_instance_id=kafka_config.instance_id(service),  # static membership: a restart rejoins at once
        stream_wait_empty=True,
        topic_disable_leader=True,
        topic_allow_declare=False,  # topics are created by ensure_topics() with our partition counts
        Monitor=_lean_monitor_class(),
    )
