"""The decision stage's broker probe: a thread that asks the broker every few seconds whether it answers.

A frozen or partitioned broker answers nothing and librdkafka reports it only after its socket
timeout (a minute); the probe makes ``/readyz`` say so within seconds.  Its admin handle also
serves step 1 of the receipt sweep (:class:`.receipts.ReceiptSweep`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from stream_dedup.config import ServiceConfig

from .receipts import ReceiptSweep

log = logging.getLogger("stream_dedup.service.decisions")  # the decision stage logs under one name

#: seconds between broker probes (and the longest a probe waits)
PROBE_INTERVAL = 2.0
NO_ANSWER = "no answer from the broker"


class BrokerProbe:
    """Asks for the signatures topic's metadata until ``stop`` is set; ``error`` says when no answer came."""

    def __init__(self, service: ServiceConfig, client_conf: dict[str, Any], stop: threading.Event,
                 sweep: ReceiptSweep, owned: Callable[[], bool]) -> None:
        self.service = service
        self.client_conf = client_conf
        self.topic = service.signatures_topic
        self._stop = stop
        self.sweep = sweep
        self.owned = owned  # whether the stage owns signatures-0 (only an owner sweeps)
        self.error: str | None = None  # set and cleared by the probe only
        #: since when (time.monotonic()) the broker has answered every probe; None while it does not
        self.answering_since: float | None = None
        self.last_answer: float | None = None  # monotonic time of the last answer

    def start(self) -> None:
        threading.Thread(target=self._run, name="stream-dedup-broker-probe", daemon=True).start()

    def _run(self) -> None:
        """Every PROBE_INTERVAL s, ask the broker for the signatures topic's metadata.

        Every ``--receipt-sweep`` s, while the stage owns signatures-0, it also reads what
        :class:`ReceiptSweep` needs.
        """
        from confluent_kafka.admin import AdminClient

        # a handle of its own: a metadata request on the consumer's handle can wait behind its
        # consume() far longer than its timeout (measured: 14 s of a 20 s broker freeze)
        admin = AdminClient(self.client_conf)
        next_sweep = time.monotonic() + float(self.service.receipt_sweep)
        while not self._stop.wait(PROBE_INTERVAL):
            try:
                admin.list_topics(self.topic, timeout=PROBE_INTERVAL)
                self.last_answer = time.monotonic()
                if self.error is not None:
                    log.info("decision stage: the broker answers again")
                    self.error = None
                if self.answering_since is None:
                    self.answering_since = time.monotonic()
                every = float(self.service.receipt_sweep)
                if every > 0 and self.owned() and self.sweep.target is None and time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + every
                    try:
                        self.sweep.read_target(admin, timeout=10.0)
                    except Exception:  # noqa: BLE001 - tried again next time
                        log.debug("receipt sweep: reading the offsets failed", exc_info=True)
            except Exception as exc:  # noqa: BLE001 - KafkaException, or the consumer is closed
                if self._stop.is_set():
                    return
                self.answering_since = None
                if self.error is None:
                    log.warning("decision stage: %s in %.0f s (%s)", NO_ANSWER, PROBE_INTERVAL, exc)
                self.error = f"{NO_ANSWER} in {PROBE_INTERVAL:.0f} s"
