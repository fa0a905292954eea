"""bench/scale.py end to end on a tiny stream built from the committed sample: the command fed a
chunk at a time, a row per chunk with the rate measured while it had input, and the same-run
reference's rate around each chunk (issue 13's flatness verdict at the machine's speed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "news_sample.jsonl"


def test_scale_bench_feeds_chunks_and_measures_a_reference_around_each(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "news_stream.jsonl").write_bytes(b"".join(SAMPLE.read_bytes().splitlines(keepends=True)[:100]))
    out = tmp_path / "scale.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "scale.py"), "--data", str(data),
                           "--stream", str(tmp_path / "stream.jsonl"), "--articles", "250", "--chunk", "100",
                           "--reference", "40", "--json", str(out)], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    stats = result["stats"]
    assert [s["lines"] for s in stats] == [100, 200, 250]  # two full chunks and the partial last one
    assert stats[-1]["index_articles"] == 250  # three rounds of 100 records: none matches another round
    for s in stats:
        assert 0 < s["busy_seconds"] < 60
        assert s["reference_rate"] > 0
        # the command's CPU by thread (schedstat): the deciding thread's, never more than the whole process's
        assert 0 < s["decider_cpu_seconds"] == s["main_thread_cpu_seconds"] <= s["cpu_seconds"] + 0.05
        assert s["decider_wait_seconds"] >= 0
        assert s["rocksdb_cpu_seconds"] >= 0 and s["other_cpu_seconds"] >= 0
    assert result["flat_at_reference_speed"] in (True, False)
    rows = [line for line in proc.stdout.splitlines() if line[:3] in ("| 1", "| 2") and line.count("|") == 15]
    assert len(rows) == 3, proc.stdout  # a row per chunk, with the threads' and the reference's columns
    assert all(len(row.split("|")[5].split("/")) == 3 for row in rows)  # deciding / RocksDB / other
    assert "at the reference's speed, slowest chunk" in proc.stdout
    assert len(result["tenths"]) == 2  # two full chunks: tenths of one chunk each
    assert "tenths within 20 % of the first tenth: records/s" in proc.stdout
    assert "the deciding thread's CPU per record" in proc.stdout
    assert all(t["deciding_thread_cpu_ms_per_record"] > 0 for t in result["tenths"])


def test_scale_bench_runs_twice_and_judges_each_chunk_by_its_best_run(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "news_stream.jsonl").write_bytes(b"".join(SAMPLE.read_bytes().splitlines(keepends=True)[:60]))
    out, kept = tmp_path / "scale.json", tmp_path / "kept"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "scale.py"), "--data", str(data),
                           "--stream", str(tmp_path / "stream.jsonl"), "--articles", "120", "--chunk", "60",
                           "--reference", "20", "--runs", "2", "--keep-state", str(kept), "--json", str(out)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert len(result["runs"]) == 2
    assert result["stats"] == result["runs"][-1]["stats"]  # the top level: the last run's, as with one run
    best = result["best_of_runs"]
    assert [c["lines"] for c in best["chunks"]] == [60, 120]
    for k, chunk in enumerate(best["chunks"]):
        rates = [60 / (r["stats"][k]["busy_seconds"]) for r in result["runs"]]
        assert chunk["rates"] == rates and chunk["best"] == max(rates)
        assert chunk["best_over_reference"] == max(
            rate / r["stats"][k]["reference_rate"] for rate, r in zip(rates, result["runs"], strict=True))
    flat = best["chunks"][1]["best"] >= 0.8 * best["chunks"][0]["best"]
    assert best["flat"] is flat
    assert "each chunk's best of 2 runs" in proc.stdout and "### run 2 of 2" in proc.stdout
    assert (kept / "CURRENT").exists()  # the last run's index is the one kept
    # (the kept run's events beside its index; the first run's went with its temporary index)
    assert [p.name for p in tmp_path.glob("*.events.jsonl")] == ["kept.events.jsonl"]
