"""bench/table_growth.py runs and reports the batches that grew a table (small sizes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_growth_batches_are_reported(tmp_path: Path) -> None:
    out = tmp_path / "growth.json"
    # threshold 0: every batch is listed, so the sizes after each one must grow as the tables do
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "table_growth.py"), "--articles", "3000",
                           "--batch", "500", "--threshold-ms", "0", "--json", str(out)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    for name in ("LSH band table", "SimHash tables"):
        rows = result[name]["slow_batches"]
        assert [r["articles"] for r in rows] == [500, 1000, 1500, 2000, 2500, 3000]
        sizes = [r["table_mib"] for r in rows]
        assert sizes == sorted(sizes)
        assert result[name]["median_batch_ms"] > 0
        assert "| 3,000 |" in proc.stdout


def test_bad_arguments_are_one_line() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "table_growth.py"), "--articles", "0"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0
    assert proc.stderr.strip() == "table_growth: --articles and --batch must be at least 1"
