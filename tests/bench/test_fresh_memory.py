"""bench/fresh_memory.py runs and prints both passes (small sizes)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "fresh_memory.py"


def test_both_passes_are_printed_for_every_chunk() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--chunks", "3", "--mb", "4"],
                          capture_output=True, text=True, timeout=120, check=True)
    lines = proc.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["first write (fresh pages)", "second write (resident)"]
    for line in lines:
        low, high, each = re.search(r": ([\d.]+)-([\d.]+) ms/MB over 3 x 4 MB \(([\d. ]+)\)$", line).groups()
        times = [float(x) for x in each.split()]
        assert len(times) == 3 and min(times) == float(low) and max(times) == float(high)


def test_bad_arguments_are_one_line() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--chunks", "0"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0
    assert proc.stderr.strip() == "fresh_memory: --chunks and --mb must be at least 1"
