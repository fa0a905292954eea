"""The decision stage's process: started, watched and restarted by the worker.

The decision stage (:mod:`.decisions`) runs in a child process of the worker, so that it has a
core (and a GIL) of its own beside Faust's event loop.  The child sends the worker a snapshot
every half second over a pipe: its status (for ``/readyz``) and, every second, its metric families
(served on the worker's ``/metrics``).  It dies with the worker (``PR_SET_PDEATHSIG`` and a parent check),
so a SIGKILLed worker never leaves a stage behind that holds the index's lock.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from stream_dedup.config import EngineConfig, ServiceConfig

log = logging.getLogger("stream_dedup.service")

SNAPSHOT_INTERVAL = 0.5
#: the metric families travel less often (a scrape every few seconds needs no more)
METRICS_INTERVAL = 1.0
#: restarts of a failing stage allowed within RESTART_WINDOW seconds before the worker gives up
MAX_RESTARTS = 5
RESTART_WINDOW = 120.0
#: metric families the worker itself owns (never taken from the child)
PARENT_ONLY = frozenset({"stream_dedup_ready", "stream_dedup_decision_stage_restarts", "stream_dedup_order_buffer_records"})


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:  # not Linux: the parent check in the snapshot thread covers it
        pass


def child_main(service: ServiceConfig, engine: EngineConfig, conn: Any, parent_pid: int, budget: int,
               log_format: str) -> None:
    _die_with_parent()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(log_format))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(service.log_level.upper())
    from stream_dedup.metrics import Metrics

    from .decisions import DecisionStage

    metrics = Metrics()
    try:
        stage = DecisionStage(service, engine, metrics, dlq_budget=budget)
    except Exception as exc:  # noqa: BLE001 - reported to the worker, which decides what to do
        log.error("decision stage cannot start: %s", exc)
        with contextlib.suppress(OSError):
            conn.send({"status": {"state": "failed", "reasons": [f"decision stage cannot start: {exc}"]}})
        sys.exit(2)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stage.stop())

    def snapshots() -> None:
        last_metrics = 0.0
        while True:
            if os.getppid() != parent_pid:
                log.error("the worker is gone: stopping the decision stage")
                os._exit(1)
            msg: dict[str, Any] = {"status": stage.status()}
            if time.monotonic() - last_metrics >= METRICS_INTERVAL:
                last_metrics = time.monotonic()
                msg["metrics"] = list(metrics.registry.collect())
            try:
                conn.send(msg)
            except (OSError, ValueError):
                os._exit(1)
            time.sleep(SNAPSHOT_INTERVAL)

    threading.Thread(target=snapshots, name="stream-dedup-snapshots", daemon=True).start()
    code = stage.run()
    with contextlib.suppress(OSError, ValueError):
        conn.send({"status": stage.status(), "metrics": list(metrics.registry.collect())})
    sys.exit(code)


class DecisionProcess:
    """The worker's handle on the child: its last status and metric families."""

    def __init__(self, service: ServiceConfig, engine: EngineConfig, budget: int, log_format: str) -> None:
        self.service, self.engine, self.budget, self.log_format = service, engine, budget, log_format
        self.proc: multiprocessing.process.BaseProcess | None = None
        self.conn: Any = None
        self.status: dict[str, Any] = {"state": "starting", "reasons": ["decision stage starting"]}
        self.families: list[Any] = []
        self.restarts: list[float] = []
        self.stopping = False
        self.on_restart: Callable[[], None] | None = None

    def start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=child_main, name="stream-dedup-decisions",
                                args=(self.service, self.engine, child, os.getpid(), self.budget,
                                      self.log_format))
        self.proc.start()
        child.close()
        self.conn = parent
        self.status = {"state": "starting", "reasons": ["decision stage starting"]}
        log.info("decision stage started (pid %d)", self.proc.pid)

    def drain(self) -> dict[str, Any]:
        """Read the snapshots the child has sent; returns its latest status."""
        try:
            while self.conn is not None and self.conn.poll():
                msg = self.conn.recv()
                self.status = msg.get("status", self.status)
                if "metrics" in msg:
                    self.families = msg["metrics"]
        except (EOFError, OSError):
            pass
        return self.status

    def poll(self) -> str | None:
        """Read the child's snapshots; restart it if it died.  Returns a fatal reason, or None."""
        self.drain()
        if self.stopping or self.proc is None or self.proc.is_alive():
            return None
        code = self.proc.exitcode
        now = time.monotonic()
        self.restarts = [t for t in self.restarts if now - t < RESTART_WINDOW] + [now]
        if len(self.restarts) > MAX_RESTARTS:
            return f"the decision stage failed {len(self.restarts)} times in {RESTART_WINDOW:.0f} s (exit code {code})"
        log.error("decision stage exited with code %s: restarting it", code)
        if self.on_restart is not None:
            self.on_restart()
        self.start()
        return None

    def collect(self) -> Any:
        self.drain()
        return [f for f in self.families if f.name not in PARENT_ONLY]

    def stop(self, timeout: float = 30.0) -> None:
        self.stopping = True
        if self.proc is None:
            return
        if self.proc.is_alive():
            self.proc.terminate()  # SIGTERM: the stage finishes its transaction and closes the index
            self.proc.join(timeout)
        if self.proc.is_alive():
            log.error("decision stage did not stop in %.0f s: killing it", timeout)
            self.proc.kill()
            self.proc.join(5)
        self.poll()


def merge_families(own: list[Any], child: list[Any]) -> list[Any]:
    """The worker's metric families with the child's samples added (the child's win on the same sample)."""
    by_name = {f.name: f for f in own}
    out = []
    for family in child:
        mine = by_name.pop(family.name, None)
        if mine is not None:
            keys = {(s.name, tuple(sorted(s.labels.items()))) for s in family.samples}
            family.samples = [s for s in mine.samples
                              if (s.name, tuple(sorted(s.labels.items()))) not in keys] + list(family.samples)
        out.append(family)
    return list(by_name.values()) + out
