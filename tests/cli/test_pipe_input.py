"""``dedup -`` on a pipe: batches are what has arrived, and a record is never held waiting for more."""

from __future__ import annotations

import io
import json
import os
import select
import subprocess
import threading
import time
from pathlib import Path

from stream_dedup.cli.batches import PIPE_BYTES, lines_with_readiness, widen_pipe

from .conftest import console_script


def test_lines_carry_whether_the_next_is_ready() -> None:
    r, w = os.pipe()
    try:
        os.write(w, b'{"a": 1}\n{"b": 2}\n{"c"')
        lines = lines_with_readiness(os.fdopen(r, "rb", buffering=0))
        assert next(lines) == (b'{"a": 1}\n', True)
        assert next(lines) == (b'{"b": 2}\n', False)  # the partial third line is not a line yet
        got: list[tuple[bytes, bool]] = []
        reader = threading.Thread(target=lambda: got.append(next(lines)))
        reader.start()
        reader.join(0.3)
        assert reader.is_alive() and not got  # waits for the rest of the line
        os.write(w, b': 3}\n{"d": 4}')
        os.close(w)
        w = -1
        reader.join(10)
        assert got == [(b'{"c": 3}\n', False)]
        assert list(lines) == [(b'{"d": 4}', False)]  # the last line without its newline, at the end
    finally:
        if w >= 0:
            os.close(w)


LINE, TOTAL = b"x" * 1000 + b"\n", 3000


def _writer(w: int) -> threading.Thread:
    """A thread that writes :data:`TOTAL` times :data:`LINE` into pipe ``w`` as fast as it can, then closes it."""

    def write() -> None:
        with os.fdopen(w, "wb") as fh:
            for _ in range(TOTAL):
                fh.write(LINE)

    return threading.Thread(target=write)


def test_large_input_comes_in_bounded_rounds() -> None:
    r, w = os.pipe()
    line, total = LINE, TOTAL
    writer = _writer(w)
    writer.start()
    seen = [flag for chunk, flag in lines_with_readiness(os.fdopen(r, "rb", buffering=0)) if chunk == line]
    writer.join(10)
    assert len(seen) == total
    assert seen.count(False) >= 2  # at least one round boundary inside 3 MB, and the end


def test_an_input_pipe_is_widened_so_a_fast_writer_fills_whole_batches(tmp_path: Path) -> None:
    """A pipe holds 64 kB by default (~11 long articles): the reader asks for 1 MB, so while it
    is busy a writer gets a megabyte ahead and the next round of lines is that megabyte."""
    limit = int(Path("/proc/sys/fs/pipe-max-size").read_text())
    r, w = os.pipe()
    line, total = LINE, TOTAL
    os.write(w, line)
    lines = lines_with_readiness(os.fdopen(r, "rb", buffering=0))
    assert next(lines) == (line, False)  # (the pipe is widened when reading begins)
    import fcntl
    assert fcntl.fcntl(r, fcntl.F_GETPIPE_SZ) >= min(PIPE_BYTES, limit)
    writer = _writer(w)
    writer.start()
    time.sleep(0.5)  # (the reader is busy: the writer fills the pipe)
    rounds, run = [], 1
    for chunk, more in lines:
        assert chunk == line
        if more:
            run += 1
        else:
            rounds.append(run)
            run = 1
    writer.join(10)
    assert sum(rounds) == total
    assert max(rounds) >= min(PIPE_BYTES, limit) // len(line) // 2  # (64 kB: 65 lines)
    regular = tmp_path / "f"
    regular.write_bytes(b"x\n")
    with regular.open("rb") as f:
        assert widen_pipe(f.fileno()) is None


def test_a_source_without_descriptor_is_read_line_by_line() -> None:
    src = io.BytesIO(b"a\nb\n")  # as a test's stdin: fileno() raises
    assert list(lines_with_readiness(src)) == [(b"a\n", False), (b"b\n", False)]


def _read_line(fh, timeout: float) -> bytes:
    deadline = time.monotonic() + timeout
    buf = b""
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        assert left > 0, f"no event within {timeout} s (got {buf!r})"
        if select.select([fh], [], [], left)[0]:
            chunk = os.read(fh.fileno(), 1)
            assert chunk, "the command ended"
            buf += chunk
    return buf


def test_each_record_of_a_slow_stream_is_decided_when_it_arrives(tmp_path: Path) -> None:
    """A record written to the pipe gets its event while the pipe stays open (not held for a batch)."""
    proc = subprocess.Popen(console_script() + ["dedup", "-", "--out", "-", "-q"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        text = "the quick brown fox jumps over the lazy dog near the river bank today " * 3
        for i, rid in enumerate(["first", "second", "third"]):
            proc.stdin.write(json.dumps({"id": rid, "text": text}).encode() + b"\n")
            proc.stdin.flush()
            event = json.loads(_read_line(proc.stdout, 60))
            assert event["id"] == rid
            assert event["type"] == ("new" if i == 0 else "duplicate-of")
        proc.stdin.close()
        assert proc.wait(60) == 0, proc.stderr.read().decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_long_pipe_run_snapshots_its_lists_and_a_kill_restarts_from_one(tmp_path: Path,
                                                                          sample_lines: list[bytes]) -> None:
    """``dedup - --state DIR --lists-snapshot-every`` writes the lists' snapshot between batches
    while the pipe stays open (logged); SIGKILLed after more records, the state reopens from that
    snapshot brought up to date (not built from the index), with every article the run decided."""
    import logging
    import signal as signals

    from stream_dedup.config import EngineConfig
    from stream_dedup.engine import Deduplicator

    state = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAM_DEDUP_", "KAFKA_"))}
    env["STREAM_DEDUP_LOG_LEVEL"] = "INFO"
    proc = subprocess.Popen(console_script() + ["dedup", "-", "--out", "-", "-q", "--state", str(state),
                                                "--lists-snapshot-every", "0.2"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    log: list[bytes] = []
    reader = threading.Thread(target=lambda: log.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        written = 0
        deadline = time.monotonic() + 60
        while not any(b"wrote the snapshot of the index's in-memory lists" in line for line in log):
            assert time.monotonic() < deadline, b"".join(log)
            proc.stdin.write(sample_lines[written] + b"\n")
            proc.stdin.flush()
            _read_line(proc.stdout, 30)  # decided (a batch of its own)
            written += 1
            time.sleep(0.02)
        for line in sample_lines[written:written + 20]:  # after the snapshot: filed again at the restart
            proc.stdin.write(line + b"\n")
            proc.stdin.flush()
            _read_line(proc.stdout, 30)
            written += 1
    finally:
        proc.send_signal(signals.SIGKILL)
        proc.wait(30)
    assert written > 20
    records = logging.getLogger("stream_dedup.index")
    messages: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())  # type: ignore[method-assign]
    records.addHandler(handler)
    level = records.level
    records.setLevel(logging.INFO)
    try:
        with Deduplicator(EngineConfig(), state) as d:
            ids = {json.loads(line)["id"] for line in sample_lines[:written]}
            assert len(d) == len(ids)
            d.index.lists()
    finally:
        records.removeHandler(handler)
        records.setLevel(level)
    assert any("loaded from their snapshot and brought up to date" in m for m in messages), messages
