"""Issue 14, item 11: the README's quick-start outputs, library example and command reference are what
the current code prints (scripts/readme_check.py, also `make readme-check`)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

from .conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "readme_check.py"


def load_checker():
    spec = importlib.util.spec_from_file_location("readme_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_matches_the_code() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_checker_notices_a_stale_output() -> None:
    checker = load_checker()
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert "\n  new           " in text and "| `--max-reject-rate` |" in text
    stale = text.replace("\n  new           ", "\n  new           1", 1)
    assert checker.normalise(checker.refreshed(stale)) == checker.normalise(text) != checker.normalise(stale)
    # timings may differ, counts may not
    assert checker.normalise("0.8 s, 494 records/s") == checker.normalise("12.5 s, 1,989 records/s")
