"""Issue 14, item 6: Ctrl-C (SIGINT) and SIGTERM stop ``dedup`` after the record in hand, with the
outputs and state flushed and the summary printed; ``--resume`` continues without double events.
A real console-script subprocess gets a real signal."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from stream_dedup.cli.batches import AUTO_POOL_BYTES

from .conftest import SAMPLE, cli, console_script

COPIES = 25   # ~10,000 records: several seconds of work, so the signal lands mid-run


@pytest.fixture(scope="module")
def long_input(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    lines = SAMPLE.read_bytes().splitlines()
    path = tmp_path_factory.mktemp("signals") / "long.jsonl"
    ids = []
    with path.open("wb") as fh:
        for copy in range(COPIES):
            for n, raw in enumerate(lines):
                if copy == 3 and n == 10:
                    fh.write(b"not json: a rejected line in the middle\n")
                rec = json.loads(raw)
                rec["id"] = f"{rec['id']}-c{copy}"
                ids.append(rec["id"])
                fh.write(json.dumps(rec).encode() + b"\n")
    return path, ids


@pytest.fixture(scope="module")
def reference(long_input, tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """The events of one uninterrupted run."""
    path, _ = long_input
    out = tmp_path_factory.mktemp("ref") / "events.jsonl"
    proc = cli("dedup", str(path), "--out", str(out), "-q", timeout=300)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(x) for x in out.read_text().splitlines()]


def wait_for_output(path: Path, proc: subprocess.Popen, min_bytes: int = 20_000, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"dedup ended before the signal (exit {proc.returncode}): {proc.stderr.read()}")
        if path.exists() and path.stat().st_size >= min_bytes:
            return
        time.sleep(0.01)
    pytest.fail("dedup wrote no output in time")


# SIGINT with the default fingerprint process (the ~30 MB input is over the size that starts one; the
# batches sent to it are abandoned and read again by --resume), SIGTERM with none
@pytest.mark.parametrize(("sig", "processes"), [(signal.SIGINT, []), (signal.SIGTERM, ["--fingerprint-processes", "0"])],
                         ids=["SIGINT", "SIGTERM"])
def test_signal_then_resume(long_input, reference, tmp_path: Path, sig: signal.Signals, processes: list[str]) -> None:
    path, ids = long_input
    assert path.stat().st_size > AUTO_POOL_BYTES
    out, state, summary = tmp_path / "events.jsonl", tmp_path / "state", tmp_path / "summary.json"
    proc = subprocess.Popen(console_script() + ["dedup", str(path), "--out", str(out), "--state", str(state),
                                                "--summary-json", str(summary), *processes],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for_output(out, proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, err
    assert "Traceback" not in err
    m = re.search(rf"stream-dedup dedup: interrupted \({sig.name}\) at record ([\d,]+) \(input line ([\d,]+)\): "
                  rf"rerun with --resume --state {re.escape(str(state))} to continue", err)
    assert m, err
    record_no, line_no = (int(g.replace(",", "")) for g in m.groups())
    assert "  new " in err and "  duplicates " in err          # the usual summary
    first = [json.loads(x) for x in out.read_text().splitlines()]
    assert 0 < len(first) < len(ids), "the signal should land mid-run"
    # every record up to the line in hand has its event (flushed), and none beyond
    rejected_before = 1 if line_no > 3 * 396 + 10 else 0
    assert len(first) == line_no - rejected_before == record_no - rejected_before
    assert first == reference[:len(first)]
    s = json.loads(summary.read_text())
    assert s["interrupted"] is True and s["last_line"] == line_no and s["records"] == len(first)

    # the rerun continues from the next line: together exactly one event per record, no replays
    again = cli("dedup", str(path), "--out", str(out), "--state", str(state), "--resume", timeout=300)
    assert again.returncode == 0, again.stderr
    assert f"resuming after input line {line_no:,}" in again.stderr
    events = [json.loads(x) for x in out.read_text().splitlines()]
    assert [e["id"] for e in events] == ids
    assert not any(e["seen_before"] for e in events)
    assert events == reference
    rejects = [json.loads(x) for x in Path(f"{out}.rejects.jsonl").read_text().splitlines()]
    assert [r["line"] for r in rejects] == [3 * 396 + 11]

    # resuming a finished run does nothing
    done = cli("dedup", str(path), "--out", str(out), "--state", str(state), "--resume")
    assert done.returncode == 0
    assert re.search(r"^  lines +0 \(after [\d,]+ done before: resumed\)$", done.stderr, re.M), done.stderr
    assert [json.loads(x) for x in out.read_text().splitlines()] == reference


def test_resume_needs_state(tmp_path: Path) -> None:
    proc = cli("dedup", str(SAMPLE), "--out", str(tmp_path / "o.jsonl"), "--resume")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "stream-dedup dedup: --resume needs --state DIR (the state of the interrupted run)"
