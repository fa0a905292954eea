"""Helpers for the command-line tests: the console script run as a real subprocess."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE = REPO_ROOT / "examples" / "news_sample.jsonl"
SAMPLE_TRUTH = REPO_ROOT / "examples" / "news_sample.truth.jsonl"


def console_script() -> list[str]:
    script = Path(sys.executable).parent / "stream-dedup"
    if script.is_file():
        return [str(script)]
    found = shutil.which("stream-dedup")
    return [found] if found else [sys.executable, "-m", "stream_dedup.cli"]


def cli(*argv: str, cwd: Path | None = None, input: bytes | None = None, timeout: float = 120,
        env: dict | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``stream-dedup ARGV`` and capture its output (text)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAM_DEDUP_", "KAFKA_"))}
    full_env.update(env or {})
    return subprocess.run(console_script() + list(argv), cwd=cwd, input=input.decode() if input else None,
                          capture_output=True, text=True, timeout=timeout, env=full_env, check=False)


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    """The stderr of a refused command: exactly one line, no traceback."""
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.fixture
def sample_lines() -> list[bytes]:
    return SAMPLE.read_bytes().splitlines()
