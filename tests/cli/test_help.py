"""Issue 14, item 10: help that tells the truth. Every flag of every subcommand has help text and is
in the README; produce/tail show only the flags they use; config applies flags; --version; no
deprecation warnings from the build or at run time."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from stream_dedup import __version__
from stream_dedup.cli import build_parser

from .conftest import REPO_ROOT, SAMPLE, cli

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
WORKER_ONLY = ("--data-dir", "--metrics-port", "--metrics-host", "--batch-size", "--batch-wait", "--commit-interval",
               "--session-timeout", "--fingerprint-processes", "--app-id", "--signatures-topic")


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def flags(p: argparse.ArgumentParser) -> list[tuple[str, str | None]]:
    return [(a.option_strings[-1], a.help) for a in p._actions if a.option_strings and a.dest != "help"]


@pytest.mark.parametrize("name", sorted(subcommands()))
def test_every_flag_has_help_and_is_in_the_readme(name: str) -> None:
    missing_help = [f for f, h in flags(subcommands()[name]) if not h or h == argparse.SUPPRESS]
    assert not missing_help, f"{name}: flags without help: {missing_help}"
    missing_readme = [f for f, _ in flags(subcommands()[name]) if f"`{f}" not in README]
    assert not missing_readme, (f"{name}: flags not in README.md: {missing_readme} (the Configuration table is "
                                f"what `stream-dedup config --markdown` prints; the command reference: `make readme`)")


@pytest.mark.parametrize("name", ["produce", "tail"])
def test_kafka_clients_show_no_worker_flags(name: str) -> None:
    shown = {f for f, _ in flags(subcommands()[name])}
    assert not shown & set(WORKER_ONLY)
    assert {"--bootstrap-servers", "--security-protocol", "--sasl-password", "--connect-timeout"} <= shown
    out = cli(name, "--help").stdout
    assert "--data-dir" not in out and "--bootstrap-servers" in out


def test_config_applies_flags() -> None:
    proc = cli("config", "--num-perm", "64", "--bootstrap-servers", "kafka:9093",
               env={"STREAM_DEDUP_JACCARD_THRESHOLD": "0.7"})
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    assert shown["engine"]["num_perm"] == 64 and shown["engine"]["jaccard_threshold"] == 0.7
    assert shown["service"]["bootstrap_servers"] == "kafka:9093"


def test_version() -> None:
    proc = cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"stream-dedup {__version__}"


def test_no_deprecation_warnings_at_run_time(tmp_path: Path) -> None:
    for argv in (["dedup", str(SAMPLE), "--out", str(tmp_path / "o.jsonl"), "-q", "--report", str(tmp_path / "r.png")],
                 ["tune", "--plot", str(tmp_path / "s.png")], ["config"]):
        proc = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-W",
                               "error::PendingDeprecationWarning", "-m", "stream_dedup.cli", *argv],
                              capture_output=True, text=True, timeout=300, check=False)
        assert proc.returncode == 0, proc.stderr
        assert "Warning" not in proc.stderr


def test_no_deprecation_warnings_from_the_build(tmp_path: Path) -> None:
    """The wheel builds with the locked setuptools (no isolation, no download) without deprecation warnings,
    and carries the SPDX license expression."""
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-v",
                           "-w", str(tmp_path), str(REPO_ROOT)], capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    log = proc.stdout + proc.stderr
    assert "Deprecat" not in log, [line for line in log.splitlines() if "Deprecat" in line]
    wheel = next(tmp_path.glob("stream_dedup-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        meta = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in meta
