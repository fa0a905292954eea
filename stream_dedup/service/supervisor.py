"""The worker's main process with ``--stage1-client confluent`` (the default): it runs no Kafka client.

It starts the stage processes (:mod:`.stage_process`): ``--fingerprint-processes`` stage-1
processes (:mod:`.fingerprint_stage`, each a member of the input topic's consumer group) and the
decision stage (:mod:`.decisions`), restarts one that exits, and serves ``/metrics`` (its own
families merged with the stages'), ``/healthz`` and ``/readyz`` (the stages' reasons).  A stage
that fails :data:`.stage_process.MAX_RESTARTS` times within two minutes stops the worker
(non-zero exit: the orchestrator restarts it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

from stream_dedup.config import EngineConfig, ServiceConfig
from stream_dedup.metrics import Metrics

from .stage_process import DECISIONS, FINGERPRINT, MergedCollector, StageProcess, readiness_body

log = logging.getLogger("stream_dedup.service")

#: seconds between looks at the stage processes
WATCH_INTERVAL = 0.5


class StageWorker:
    """One worker: stage-1 processes and the decision-stage process, watched; health and metrics."""

    def __init__(self, service: ServiceConfig, engine: EngineConfig, *, metrics: Metrics | None = None,
                 dlq_budget: int = 1_000_000, log_format: str = "%(message)s") -> None:
        from prometheus_client import CollectorRegistry

        self.service = service
        self.metrics = metrics or Metrics()
        Path(service.data_dir).mkdir(parents=True, exist_ok=True)
        self.decisions = StageProcess(service, engine, dlq_budget, log_format, kind=DECISIONS)
        self.decisions.on_restart = self.metrics.decision_stage_restarts.inc
        self.stage1 = [StageProcess(service, engine, dlq_budget, log_format, kind=FINGERPRINT, member=i)
                       for i in range(max(1, int(service.fingerprint_processes)))]
        for proc in self.stage1:
            proc.on_restart = self.metrics.stage1_restarts.inc
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(MergedCollector(self.metrics.registry, lambda: [self.decisions, *self.stage1]))
        self.started_at = time.time()
        self.fatal: str | None = None

    def start(self) -> None:
        self.decisions.start()
        for proc in self.stage1:
            proc.start()

    async def run(self, stop: asyncio.Event) -> int:
        """Watch the stages until ``stop`` is set (0) or one fails for good (1)."""
        while not stop.is_set():
            for proc in [self.decisions, *self.stage1]:
                reason = proc.poll()
                if reason is not None:
                    self.fatal = reason
                    self.metrics.ready.set(0)
                    log.error("fatal: %s; stopping the worker", reason)
                    return 1
            self.readiness()  # keeps the ready gauge current between probes
            try:
                await asyncio.wait_for(stop.wait(), WATCH_INTERVAL)
            except asyncio.TimeoutError:
                pass
        return 0

    def close(self) -> None:
        """Stage 1 first (it waits for its records in flight and commits their offsets), then the decision stage."""
        for proc in self.stage1:
            proc.stop()
        self.decisions.stop()

    def liveness(self) -> tuple[bool, dict[str, Any]]:
        if self.fatal is not None:
            return False, {"error": self.fatal}
        return True, {"uptime_seconds": round(time.time() - self.started_at, 1)}

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        reasons: list[str] = []
        if self.fatal is not None:
            reasons.append("crashed")
        stages = [p.drain() for p in self.stage1]
        decision = self.decisions.drain()
        if stages and not any(s.get("assigned_once") for s in stages):
            reasons.append("waiting for the first partition assignment")
        for status in [*stages, decision]:
            reasons += [r for r in status.get("reasons", []) if r not in reasons
                        and r != "waiting for the first partition assignment"]
        assigned = sorted(a for s in stages for a in s.get("assigned", []))
        ok = not reasons
        self.metrics.ready.set(1 if ok else 0)
        return ok, readiness_body(reasons, assigned, decision, stage1_state=[s.get("state") for s in stages])
