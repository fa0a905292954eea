"""The worker without a reachable broker: it waits, says so once, and does not flood the log."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path


def test_worker_waits_for_the_broker_with_one_line_per_state(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "stream_dedup.service", "--bootstrap-servers",
                                 f"127.0.0.1:{port}", "--data-dir", str(tmp_path / "data"), "--metrics-port", "0"],
                                stdout=out, stderr=subprocess.STDOUT)
        try:
            time.sleep(20)
            assert proc.poll() is None, log.read_text()  # still waiting, not crashed
        finally:
            proc.kill()
            proc.wait(10)
    lines = log.read_text(errors="replace").splitlines()
    waiting = [x for x in lines if f"cannot reach the Kafka broker at 127.0.0.1:{port}" in x]
    assert len(waiting) == 1, lines
    assert "retrying every" in waiting[0]
    assert len(lines) < 15, f"{len(lines)} lines in 20 s:\n" + "\n".join(lines[:20])
    assert "Traceback" not in log.read_text()
