"""The worker without a reachable broker: it waits, says so once, and does not flood the log."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_worker_waits_for_the_broker_with_one_line_per_state(tmp_path: Path) -> None:
    port = _free_port()  # a port nobody listens on
    http = _free_port()
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "stream_dedup.service", "--bootstrap-servers",
                                 f"127.0.0.1:{port}", "--data-dir", str(tmp_path / "data"), "--metrics-port", str(http),
                                 "--metrics-host", "127.0.0.1"],
                                stdout=out, stderr=subprocess.STDOUT)
        try:
            time.sleep(12)
            # the health server answers while the broker is waited for: alive, not ready, and why
            status, body = _get(f"http://127.0.0.1:{http}/healthz")
            assert status == 200, (status, body, log.read_text())
            status, body = _get(f"http://127.0.0.1:{http}/readyz")
            assert status == 503, body
            assert any("cannot reach the broker" in r for r in json.loads(body)["reasons"]), body
            status, body = _get(f"http://127.0.0.1:{http}/metrics")
            assert status == 200 and "stream_dedup_ready 0.0" in body, body[:500]
            time.sleep(8)
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
