"""A stage's process: started, watched and restarted by the worker.

The decision stage (:mod:`.decisions`) and, with ``--stage1-client confluent``, stage 1
(:mod:`.fingerprint_stage`) each run in a child process of the worker, so that each has a core
(and a GIL) of its own.  A child sends the worker a snapshot every half second over a pipe: its
status (for ``/readyz``) and, every second, its metric families (served on the worker's
``/metrics``).  It dies with the worker (``PR_SET_PDEATHSIG`` and a parent check), so a SIGKILLed
worker never leaves a stage behind that holds the index's lock or a group membership.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import gc
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
from stream_dedup.gc_tuning import relax_collector

log = logging.getLogger("stream_dedup.service")

SNAPSHOT_INTERVAL = 0.5
#: the metric families travel less often (a scrape every few seconds needs no more)
METRICS_INTERVAL = 1.0
#: restarts of a failing stage allowed within RESTART_WINDOW seconds before the worker gives up
MAX_RESTARTS = 5
RESTART_WINDOW = 120.0
#: metric families the worker itself owns (never taken from a child)
PARENT_ONLY = frozenset({"stream_dedup_ready", "stream_dedup_decision_stage_restarts",
                         "stream_dedup_stage1_restarts"})
#: the stages a child can run: their name in logs, and the families only other processes own
DECISIONS, FINGERPRINT = "decisions", "fingerprint"
LABELS = {DECISIONS: "decision stage", FINGERPRINT: "stage 1"}
#: stage 1's child owns only these families (its other ones stay at zero)
FINGERPRINT_FAMILIES = frozenset({"stream_dedup_order_buffer_records", "stream_dedup_consumer_lag_messages",
                                  "stream_dedup_order_released_early_records"})


def _die_with_parent(name: str) -> None:
    """Die with the worker; and be named ``name`` in ``top``/``ps -L`` (the process's main thread)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        libc.prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except OSError:  # not Linux: the parent check in the snapshot thread covers it
        pass


def thread_name(kind: str, member: int) -> str:
    """The name a stage's process gives its main thread: ``sd-decisions``, ``sd-stage1-0``, ..."""
    return "sd-decisions" if kind == DECISIONS else f"sd-stage1-{member}"


def _build(kind: str, service: ServiceConfig, engine: EngineConfig, metrics: Any, budget: int, member: int) -> Any:
    if kind == DECISIONS:
        from .decisions import DecisionStage

        return DecisionStage(service, engine, metrics, dlq_budget=budget)
    from .fingerprint_stage import FingerprintStage

    return FingerprintStage(service, engine, metrics, dlq_budget=budget, member=member)


def child_main(kind: str, member: int, service: ServiceConfig, engine: EngineConfig, conn: Any, parent_pid: int,
               budget: int, log_format: str) -> None:
    _die_with_parent(thread_name(kind, member))
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(log_format))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(service.log_level.upper())
    from stream_dedup.metrics import Metrics

    metrics = Metrics()
    label = LABELS[kind]
    try:
        stage = _build(kind, service, engine, metrics, budget, member)
    except Exception as exc:  # noqa: BLE001 - reported to the worker, which decides what to do
        log.error("%s cannot start: %s", label, exc)
        with contextlib.suppress(OSError):
            conn.send({"status": {"state": "failed", "reasons": [f"{label} cannot start: {exc}"]}})
        sys.exit(2)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stage.stop())

    def snapshots() -> None:
        last_metrics = 0.0
        while True:
            if os.getppid() != parent_pid:
                log.error("the worker is gone: stopping the %s", label)
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
    gc.collect()  # what the start-up left; the rest of the start-up heap is frozen, as in the worker
    relax_collector()
    code = stage.run()
    with contextlib.suppress(OSError, ValueError):
        conn.send({"status": stage.status(), "metrics": list(metrics.registry.collect())})
    # the stage has closed what it owns; an interpreter shutdown would also destroy each Kafka
    # client, which hangs on one stuck outside its group (librdkafka#3437): leave without it
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class StageProcess:
    """The worker's handle on a child running stage ``kind``: its last status and metric families."""

    def __init__(self, service: ServiceConfig, engine: EngineConfig, budget: int, log_format: str,
                 kind: str = DECISIONS, member: int = 0) -> None:
        self.service, self.engine, self.budget, self.log_format = service, engine, budget, log_format
        self.kind, self.member, self.label = kind, member, LABELS[kind]
        self.proc: multiprocessing.process.BaseProcess | None = None
        self.conn: Any = None
        self.status: dict[str, Any] = {"state": "starting", "reasons": [f"{self.label} starting"]}
        self.families: list[Any] = []
        self.restarts: list[float] = []
        self.stopping = False
        self.on_restart: Callable[[], None] | None = None

    def start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe(duplex=False)
        name = "stream-dedup-decisions" if self.kind == DECISIONS else f"stream-dedup-stage1-{self.member}"
        self.proc = ctx.Process(target=child_main, name=name,
                                args=(self.kind, self.member, self.service, self.engine, child, os.getpid(),
                                      self.budget, self.log_format))
        self.proc.start()
        child.close()
        self.conn = parent
        self.status = {"state": "starting", "reasons": [f"{self.label} starting"]}
        log.info("%s started (pid %d)", self.label, self.proc.pid)

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
            return f"the {self.label} failed {len(self.restarts)} times in {RESTART_WINDOW:.0f} s (exit code {code})"
        log.error("%s exited with code %s: restarting it", self.label, code)
        if self.on_restart is not None:
            self.on_restart()
        self.start()
        return None

    def collect(self) -> Any:
        self.drain()
        if self.kind == FINGERPRINT:
            return [f for f in self.families if f.name in FINGERPRINT_FAMILIES]
        return [f for f in self.families if f.name not in PARENT_ONLY and f.name != "stream_dedup_order_buffer_records"]

    def stop(self, timeout: float = 30.0) -> None:
        self.stopping = True
        if self.proc is None:
            return
        if self.proc.is_alive():
            self.proc.terminate()  # SIGTERM: the stage finishes its transaction (or its sends) and closes
            self.proc.join(timeout)
        if self.proc.is_alive():
            log.error("%s did not stop in %.0f s: killing it", self.label, timeout)
            self.proc.kill()
            self.proc.join(5)
        self.poll()


def merge_families(own: list[Any], child: list[Any]) -> list[Any]:
    """The worker's metric families with the child's samples added (the child's win on the same sample).

    Neither list is changed (a child's families are kept until its next snapshot).
    """
    by_name = {f.name: f for f in own}
    out = []
    for family in child:
        mine = by_name.pop(family.name, None)
        if mine is not None:
            family = copy.copy(family)
            keys = {(s.name, tuple(sorted(s.labels.items()))) for s in family.samples}
            family.samples = [s for s in mine.samples
                              if (s.name, tuple(sorted(s.labels.items()))) not in keys] + list(family.samples)
        out.append(family)
    return list(by_name.values()) + out


class MergedCollector:
    """A worker's own metric families plus its stage processes' (a stage's samples win on the same name)."""

    def __init__(self, own: Any, stages: Callable[[], list[StageProcess]]) -> None:
        self.own, self.stages = own, stages

    def collect(self) -> Any:
        families = list(self.own.collect())
        for proc in self.stages():
            families = merge_families(families, proc.collect())
        return families


def readiness_body(reasons: list[str], assigned: list[str], decision: dict[str, Any],
                   **extra: Any) -> dict[str, Any]:
    """``/readyz``'s body from the reasons not to be ready, the input partitions this worker
    consumes and its decision stage's status."""
    ok = not reasons
    return {
        "reasons": reasons,
        "assigned_partitions": assigned,
        **extra,
        "decision_stage": bool(decision.get("owns")),
        "decision_state": decision.get("state"),
        # a member whose rebalance assigned nothing (more replicas than partitions) is a ready
        # standby: keeping it unready would block StatefulSet rolling updates forever
        "standby": ok and not assigned and not decision.get("owns"),
        "index_checkpoint": decision.get("index_checkpoint"),
        "committed_offset": decision.get("committed_offset"),
        # a standby's index: records the group has committed that it has not applied (--standby-follow)
        "index_behind": (decision.get("following") or {}).get("behind"),
    }
