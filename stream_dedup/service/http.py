"""The worker's own HTTP server: ``/metrics``, ``/healthz`` (liveness), ``/readyz`` (readiness).

It runs on the worker's asyncio event loop (aiohttp comes with Faust), so a reply from
``/healthz`` proves the loop is alive; it answers 503 once the app has crashed or is
stopping.  ``/readyz`` answers 200 only when the probe passed in by the worker says so
(app running, partitions assigned, index open and caught up) and 503 with the reasons
otherwise.  Faust's own web server is disabled (``web_enabled=False``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)

Probe = Callable[[], tuple[bool, dict[str, Any]]]


def _json(status: int, body: dict[str, Any]) -> web.Response:
    return web.Response(status=status, body=json.dumps(body, default=str).encode(),
                        content_type="application/json")


class HealthServer:
    """aiohttp server on ``host:port``; ``liveness``/``readiness`` return ``(ok, details)``."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int, *,
                 liveness: Probe, readiness: Probe) -> None:
        self.registry = registry
        self.host, self.port = host, port
        self.liveness, self.readiness = liveness, readiness
        self._runner: web.AppRunner | None = None

    def make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/", self._index)
        return app

    async def start(self) -> None:
        self._runner = web.AppRunner(self.make_app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await site.start()
        log.info("metrics/health server on http://%s:%d (/metrics /healthz /readyz)", self.host, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        resp = web.Response(body=body)
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp

    async def _healthz(self, request: web.Request) -> web.Response:
        ok, details = self.liveness()
        return _json(200 if ok else 503, {"status": "ok" if ok else "failing", **details})

    async def _readyz(self, request: web.Request) -> web.Response:
        ok, details = self.readiness()
        return _json(200 if ok else 503, {"status": "ready" if ok else "not ready", **details})

    async def _index(self, request: web.Request) -> web.Response:
        return web.Response(text="stream-dedup worker: /metrics /healthz /readyz\n")
