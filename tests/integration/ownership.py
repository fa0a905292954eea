"""Which worker's decision stage decides (for the failover tests)."""

from __future__ import annotations

import time
from typing import Any


def wait_decision_owner(workers: list[Any], timeout: float = 90.0, stable: float = 3.0) -> Any:
    """The one worker whose decision stage decides, once that has held for ``stable`` seconds.

    When a second worker's decision stage joins its group, the signatures partition may move to
    it (a rebalance), so the first owner seen is not always the owner a moment later.
    """
    deadline = time.monotonic() + timeout
    seen, since = None, 0.0
    while time.monotonic() < deadline:
        bodies = [(w, w.readyz()) for w in workers if w.alive()]
        owners = [w for w, (status, body) in bodies
                  if status == 200 and body.get("decision_stage") and body.get("decision_state") == "deciding"]
        current = owners[0] if len(owners) == 1 else None
        if current is not seen:
            seen, since = current, time.monotonic()
        elif current is not None and time.monotonic() - since >= stable:
            return current
        time.sleep(0.3)
    raise AssertionError(f"no stable single decision-stage owner: {[w.readyz() for w in workers]}")
