"""Issue 14, item 7: a progress bar (tqdm: share done, rate, ETA) when stderr is a terminal; none when
it is not, or with --quiet. The terminal is a real pseudo-terminal."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import termios
from pathlib import Path

from .conftest import SAMPLE, cli, console_script


def run_on_tty(argv: list[str], timeout: float = 120) -> tuple[int, str]:
    """Run the console script with stderr on a pseudo-terminal; return (exit code, what the terminal got)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))   # a 120 x 30 terminal
    proc = subprocess.Popen(console_script() + argv, stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], timeout)
        if not ready:
            proc.kill()
            raise AssertionError("no output from the terminal in time")
        try:
            data = os.read(master, 65536)
        except OSError:   # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout=timeout), b"".join(chunks).decode("utf-8", "replace")


def test_progress_bar_on_a_terminal(tmp_path: Path) -> None:
    code, seen = run_on_tty(["dedup", str(SAMPLE), "--out", str(tmp_path / "o.jsonl")])
    assert code == 0
    assert "\rstream-dedup:   0%|" in seen                     # tqdm's bar, redrawn in place
    assert "/1.29M [" in seen and "B/s]" in seen                # bytes of the input, ETA and rate
    assert "largest clusters" in seen                           # then the summary


def test_progress_bar_on_a_terminal_of_unknown_size(tmp_path: Path) -> None:
    """A pty that reports 0 x 0 (e.g. under `script`) still gets the bar (80 x 24 assumed)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(console_script() + ["dedup", str(SAMPLE), "--out", str(tmp_path / "o.jsonl")],
                            stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    seen = b""
    while select.select([master], [], [], 120)[0]:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        seen += data
    os.close(master)
    assert proc.wait(timeout=60) == 0
    assert b"\rstream-dedup:   0%|" in seen


def test_quiet_on_a_terminal_prints_nothing(tmp_path: Path) -> None:
    code, seen = run_on_tty(["dedup", str(SAMPLE), "--out", str(tmp_path / "o.jsonl"), "--quiet"])
    assert code == 0 and seen == ""


def test_no_bar_when_stderr_is_not_a_terminal(tmp_path: Path) -> None:
    proc = cli("dedup", str(SAMPLE), "--out", str(tmp_path / "o.jsonl"))
    assert proc.returncode == 0
    assert "%|" not in proc.stderr and "\r" not in proc.stderr
    assert proc.stderr.startswith("stream-dedup dedup: ")
