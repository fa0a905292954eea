"""The Faust app's settings and the one patch of Faust internals (faust-streaming 0.15.3,
pinned in requirements/runtime.lock): if an upgrade moves what the patch wraps, this fails."""

from __future__ import annotations

import asyncio

from stream_dedup.config import ServiceConfig
from stream_dedup.service.faust_app import FETCH_MAX_WAIT_MS, make_faust_app


def test_the_stage1_consumer_waits_at_most_fetch_max_wait_on_the_broker(tmp_path):
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    async def created() -> tuple[int, int]:
        app = make_faust_app(ServiceConfig(data_dir=str(tmp_path)))
        thread = app.consumer._thread  # noqa: SLF001
        patched = thread._create_worker_consumer(app.transport)  # noqa: SLF001
        # what Faust itself creates (the wrapped method), for the comparison
        original = AIOKafkaConsumerThread._create_worker_consumer.__wrapped__
        unpatched = original(thread, app.transport)
        return patched._fetch_max_wait_ms, unpatched._fetch_max_wait_ms  # noqa: SLF001

    patched, faust_default = asyncio.run(created())
    assert patched == FETCH_MAX_WAIT_MS
    assert faust_default > FETCH_MAX_WAIT_MS  # 1,500 ms in faust-streaming 0.15.3: the patch has work to do


def test_the_app_keeps_no_state_and_commits_only_acked_offsets(tmp_path):
    app = make_faust_app(ServiceConfig(data_dir=str(tmp_path), app_id="dedup-test"))
    conf = app.conf
    assert conf.stream_wait_empty is True
    assert str(conf.store) == "memory:"
    assert conf.topic_allow_declare is False
    assert type(app.monitor).__name__.startswith("_LeanMonitor")
    # the lean monitor ignores per-message events but is a Monitor (rebalance hooks kept)
    from faust.sensors.monitor import Monitor
    assert isinstance(app.monitor, Monitor)
    assert app.monitor.on_message_in(None, 0, None) is None
