"""The metrics/health HTTP server."""

from __future__ import annotations

import asyncio
import json
import socket

from aiohttp import ClientSession

from stream_dedup.metrics import Metrics
from stream_dedup.service.http import HealthServer


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_metrics_healthz_readyz():
    metrics = Metrics()
    metrics.articles.labels(result="new").inc(3)
    metrics.dead_letters.labels(reason="invalid_json").inc()
    state = {"ready": False, "alive": True}

    async def run():
        port = _port()
        server = HealthServer(metrics.registry, "127.0.0.1", port,
                              liveness=lambda: (state["alive"], {}),
                              readiness=lambda: (state["ready"], {"reasons": [] if state["ready"] else ["x"]}))
        await server.start()
        base = f"http://127.0.0.1:{port}"
        try:
            async with ClientSession() as http:
                async with http.get(base + "/metrics") as r:
                    assert r.status == 200
                    assert r.headers["Content-Type"].startswith("text/plain")
                    text = await r.text()
                assert 'stream_dedup_articles_total{result="new"} 3.0' in text
                assert 'stream_dedup_dead_letters_total{reason="invalid_json"} 1.0' in text
                async with http.get(base + "/healthz") as r:
                    assert r.status == 200 and json.loads(await r.text())["status"] == "ok"
                async with http.get(base + "/readyz") as r:
                    assert r.status == 503
                    assert json.loads(await r.text()) == {"status": "not ready", "reasons": ["x"]}
                state["ready"] = True
                async with http.get(base + "/readyz") as r:
                    assert r.status == 200
                state["alive"] = False
                async with http.get(base + "/healthz") as r:
                    assert r.status == 503
        finally:
            await server.stop()

    asyncio.run(run())
