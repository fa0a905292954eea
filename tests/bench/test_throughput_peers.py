"""bench/throughput.py's peer table (issue 13 item 4) on 50 records of the committed sample, one
round: a row per tool and stream with a positive rate, and on the dev stream a precision/recall.
A peer that is not installed keeps its row ("not installed"); its test is skipped, visibly."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "news_sample.jsonl"
TRUTH = ROOT / "examples" / "news_sample.truth.jsonl"
TOOLS = ("stream-dedup", "datasketch", "rensa", "gaoya", "stream-dedup-2cpu")
RECORDS = 50


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> dict:
    data = tmp_path_factory.mktemp("data")
    (data / "news_stream.jsonl").write_bytes(b"".join(SAMPLE.read_bytes().splitlines(keepends=True)[:RECORDS]))
    (data / "news_stream.truth.jsonl").write_bytes(b"".join(TRUTH.read_bytes().splitlines(keepends=True)[:RECORDS]))
    out = data / "result.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "throughput.py"), "--data", str(data),
                           "--repeat", "1", "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    print(proc.stdout)
    table = [line for line in proc.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    rows = {(cells[0], cells[1]): cells for cells in ([c.strip() for c in line.strip("|").split("|")]
                                                      for line in table[1:])}
    return {"stdout": proc.stdout, "rows": rows, "json": json.loads(out.read_text())}


@pytest.mark.parametrize("tool", TOOLS)
def test_a_row_per_stream_with_a_positive_rate(bench: dict, tool: str) -> None:
    for stream in ("dev", "short", "accented"):
        cells = bench["rows"][(tool, stream)]
        row = next(r for r in bench["json"]["rows"] if (r["tool"], r["stream"]) == (tool, stream))
        if tool in ("rensa", "gaoya") and importlib.util.find_spec(tool) is None:
            assert cells[3].startswith("not installed"), cells
            pytest.skip(f"{tool} is not installed: its rows say so ({cells[3]})")
        assert row["status"] == "ok", row["status"]
        assert row["records"] == RECORDS and row["decisions"] == RECORDS
        assert row["records_per_second"] > 0 and row["peak_rss_bytes"] > 0 and row["start_seconds"] > 0
        assert float(cells[3].replace(",", "")) > 0
        if stream == "dev":
            assert re.fullmatch(r"\d\.\d{4} / \d\.\d{4}", cells[-1]), cells
            assert row["recall"] > 0.5 and row["precision"] > 0.9
        else:
            assert cells[-1] == "-"


def test_ratios_and_targets_are_printed(bench: dict) -> None:
    assert bench["rows"][("datasketch", "dev")][4] == "1.00×"
    for stream in ("dev", "short", "accented"):
        assert re.search(rf"^\* >= 10× datasketch on the {stream} stream: \d+\.\d\d×: (met|NOT met)$",
                         bench["stdout"], re.M)
        assert re.search(rf"^\* >= 1× rensa on the {stream} stream: ", bench["stdout"], re.M)


def test_short_items_keep_ids_and_are_short() -> None:
    spec = importlib.util.spec_from_file_location("bench_throughput", ROOT / "bench" / "throughput.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    lines = SAMPLE.read_bytes().splitlines()[:RECORDS]
    items = [json.loads(x) for x in module.short_items(lines, 40)]
    assert [i["id"] for i in items] == [json.loads(x)["id"] for x in lines]
    for item in items:
        title, _, lead = item["text"].partition("\n\n")
        assert title == item["title"] and 0 < len(lead.split()) <= 40


def test_accented_items_keep_ids_and_spell_the_same_words_with_accents() -> None:
    spec = importlib.util.spec_from_file_location("bench_throughput", ROOT / "bench" / "throughput.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    lines = SAMPLE.read_bytes().splitlines()[:RECORDS]
    items = [json.loads(x) for x in module.accented_items(lines)]
    accented: dict[str, set[str]] = {}
    for item, line in zip(items, lines, strict=True):
        rec = json.loads(line)
        assert item["id"] == rec["id"] and item.get("html") == rec.get("html")
        if rec.get("text"):
            words, before = item["text"].split(" "), rec["text"].split(" ")
            assert len(words) == len(before)
            for w, b in zip(words, before, strict=True):
                assert w in (b, b.translate(module.ACCENTS))
                accented.setdefault(b, set()).add(w)
    assert all(len(spellings) == 1 for spellings in accented.values())  # a word is spelled one way everywhere
    assert sum(not i.get("text", "").isascii() for i in items) > RECORDS // 2


def test_a_baseline_checkout_runs_in_the_same_rounds(tmp_path: Path) -> None:
    """``--baseline DIR`` runs another checkout's ``dedup`` as one more row and prints the change."""
    (tmp_path / "news_stream.jsonl").write_bytes(b"".join(SAMPLE.read_bytes().splitlines(keepends=True)[:RECORDS]))
    (tmp_path / "news_stream.truth.jsonl").write_bytes(b"".join(TRUTH.read_bytes().splitlines(keepends=True)[:RECORDS]))
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "throughput.py"), "--data", str(tmp_path),
                           "--repeat", "1", "--tools", "stream-dedup", "--streams", "dev", "--baseline", str(ROOT),
                           "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    base = next(r for r in result["rows"] if r["tool"] == result["baseline"])
    assert result["baseline"].startswith("stream-dedup@") and base["command"][1:4] == ["-P", "-m", "stream_dedup.cli"]
    assert base["status"] == "ok" and base["decisions"] == RECORDS and base["records_per_second"] > 0
    assert re.search(r"^\* dev: [\d,]+ vs [\d,]+ = [+-]\d+\.\d%(; after start-up [\d,]+ vs [\d,]+ = [+-]\d+\.\d%)?$",
                     proc.stdout, re.M), proc.stdout
    bad = subprocess.run([sys.executable, str(ROOT / "bench" / "throughput.py"), "--data", str(tmp_path),
                          "--baseline", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "not a stream-dedup checkout" in bad.stderr


def test_rounds_make_each_stream_longer_with_each_rounds_own_duplicates(tmp_path: Path) -> None:
    """``--rounds 3``: every stream three times over (bench/scale.py's suffixed rounds): three times
    the records, ids distinct (the decisions are read by id), and about three times the one-round
    run's duplicates (a round matches only itself; its suffixed words hash otherwise, so a
    borderline pair can fall on the other side of a threshold in one round)."""
    (tmp_path / "news_stream.jsonl").write_bytes(b"".join(SAMPLE.read_bytes().splitlines(keepends=True)[:RECORDS]))
    (tmp_path / "news_stream.truth.jsonl").write_bytes(b"".join(TRUTH.read_bytes().splitlines(keepends=True)[:RECORDS]))
    found = {}
    for rounds in (1, 3):
        out = tmp_path / f"result-{rounds}.json"
        proc = subprocess.run([sys.executable, str(ROOT / "bench" / "throughput.py"), "--data", str(tmp_path),
                               "--repeat", "1", "--tools", "stream-dedup", "--streams", "dev,short",
                               "--rounds", str(rounds), "--json", str(out)], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        found[rounds] = {r["stream"]: r for r in json.loads(out.read_text())["rows"]}
    assert "(3 rounds)" in proc.stdout
    for stream in ("dev", "short"):
        one, three = found[1][stream], found[3][stream]
        assert three["records"] == three["decisions"] == 3 * RECORDS
        assert one["duplicates"] > 0 and abs(three["duplicates"] - 3 * one["duplicates"]) <= max(2, one["duplicates"] // 5)
    assert "precision" in found[1]["dev"] and "precision" not in found[3]["dev"]  # (the truth's ids: one round)
    bad = subprocess.run([sys.executable, str(ROOT / "bench" / "throughput.py"), "--data", str(tmp_path),
                          "--rounds", "0"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--rounds 0: from 1 to 1000" in bad.stderr
