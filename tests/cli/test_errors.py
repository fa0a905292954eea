"""Issue 14, items 3-5: user errors are one clear line with a non-zero exit (never a traceback),
nothing is truncated by a refused run, and the exit status tells whether records were processed.
Every case runs the real console script in a subprocess."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from .conftest import SAMPLE, cli, console_script, one_line_error

GOOD = b'{"id": "a", "text": "a perfectly ordinary record with a few words in it"}\n'


@pytest.fixture
def small_input(tmp_path: Path) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_bytes(GOOD + b'{"id": "b", "text": "another ordinary record, different words"}\n')
    return path


# ------------------------------------------------------------------------- item 3: no tracebacks
def test_out_in_missing_directory(small_input: Path, tmp_path: Path) -> None:
    proc = cli("dedup", str(small_input), "--out", str(tmp_path / "no" / "such" / "dir" / "o.jsonl"))
    assert proc.returncode == 2
    line = one_line_error(proc)
    assert line.startswith("stream-dedup dedup: --out ") and "does not exist" in line


def test_out_is_a_directory(small_input: Path, tmp_path: Path) -> None:
    proc = cli("dedup", str(small_input), "--out", str(tmp_path))
    assert proc.returncode == 2
    assert "is a directory" in one_line_error(proc)


def test_out_is_the_input(small_input: Path) -> None:
    proc = cli("dedup", str(small_input), "--out", str(small_input))
    assert proc.returncode == 2
    assert "is the input file" in one_line_error(proc)
    assert small_input.read_bytes().startswith(GOOD)


def test_state_is_a_file(small_input: Path, tmp_path: Path) -> None:
    state = tmp_path / "state-file"
    state.write_text("not a directory")
    proc = cli("dedup", str(small_input), "--out", str(tmp_path / "o.jsonl"), "--state", str(state))
    assert proc.returncode == 2
    assert one_line_error(proc) == f"stream-dedup dedup: --state {state}: is a file, not a directory"
    assert not (tmp_path / "o.jsonl").exists()


def test_tune_plot_to_bad_path(tmp_path: Path) -> None:
    proc = cli("tune", "--plot", str(tmp_path / "missing" / "s-curve.png"))
    assert proc.returncode == 2
    assert "--plot" in one_line_error(proc) and proc.stdout == ""


@pytest.mark.parametrize(("argv", "message"), [
    (["--num-perm", "0"], "--num-perm 0: must be at least 1"),
    (["--num-perm", "-5"], "--num-perm -5: must be at least 1"),
    (["--threshold", "1.5"], "--threshold 1.5"),
    (["--threshold", "0"], "--threshold 0.0"),
    (["--fp-weight", "-1"], "--fp-weight"),
    (["--bands", "-2", "--rows", "3"], "--bands and --rows must be positive"),
])
def test_tune_bad_values(argv: list[str], message: str) -> None:
    proc = cli("tune", *argv)
    assert proc.returncode == 2
    assert message in one_line_error(proc)


def test_argparse_usage_errors_are_exit_2() -> None:
    proc = cli("tune", "--num-perm", "many")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "invalid int value" in proc.stderr


def test_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    """``stream-dedup dedup big.jsonl --out - | head -1``: no traceback, no message, exit 141 (SIGPIPE)."""
    big = tmp_path / "big.jsonl"
    lines = SAMPLE.read_bytes().splitlines()
    # ids made unique per copy: ~1,600 events, far more than a pipe buffer holds
    with big.open("wb") as fh:
        for copy in range(4):
            for raw in lines:
                rec = json.loads(raw)
                rec["id"] = f"{rec['id']}-c{copy}"
                fh.write(json.dumps(rec).encode() + b"\n")
    proc = subprocess.Popen(console_script() + ["dedup", str(big), "--out", "-"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()                       # what `head -1` does after one line
    _, err = proc.communicate(timeout=120)
    assert json.loads(first)["id"]
    assert err.decode() == ""
    assert proc.returncode == 141


def test_closed_pipe_through_a_shell(tmp_path: Path) -> None:
    """The same through a real shell pipeline into ``head``."""
    cmd = " ".join(console_script()) + f" dedup {SAMPLE} --out - --quiet | head -n 2"
    proc = subprocess.run(["bash", "-c", f"set -o pipefail; {cmd}; echo exit=$?"], capture_output=True, text=True,
                          timeout=120, check=False)
    out = proc.stdout.splitlines()
    assert len(out) == 3 and out[-1] in ("exit=141", "exit=0")  # 0 when everything fit in the pipe first
    assert proc.stderr == ""


# ------------------------------------------------------------------ item 4: nothing lost on refusal
def test_refused_state_does_not_truncate_outputs(small_input: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    out = tmp_path / "events.jsonl"
    assert cli("dedup", str(small_input), "--out", str(out), "--state", str(state), "-q").returncode == 0
    before = out.read_bytes()
    rejects = tmp_path / "rejects.jsonl"
    rejects.write_text("earlier rejects\n")
    summary = tmp_path / "summary.json"
    summary.write_text("{}\n")
    assert before.count(b"\n") == 2
    # the state was built with num_perm 128: a run with 64 is refused, and every output is untouched
    proc = cli("dedup", str(small_input), "--out", str(out), "--state", str(state), "--num-perm", "64",
               "--rejects", str(rejects), "--summary-json", str(summary))
    assert proc.returncode == 2
    assert "different settings" in one_line_error(proc)
    assert out.read_bytes() == before
    assert rejects.read_text() == "earlier rejects\n"
    assert summary.read_text() == "{}\n"


def test_bad_later_output_does_not_truncate_out(small_input: Path, tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    out.write_text("keep me\n")
    proc = cli("dedup", str(small_input), "--out", str(out), "--summary-json", str(tmp_path / "nope" / "s.json"))
    assert proc.returncode == 2 and "--summary-json" in one_line_error(proc)
    assert out.read_text() == "keep me\n"


# --------------------------------------------------------------------- item 5: honest exit codes
def test_all_rejected_exits_1(tmp_path: Path) -> None:
    inp = tmp_path / "bad.jsonl"
    inp.write_bytes(b"not json\n{\"id\": 1}\n[1, 2]\n")
    proc = cli("dedup", str(inp), "--out", str(tmp_path / "o.jsonl"))
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "stream-dedup dedup: no record could be processed: all 3 were rejected" in proc.stderr.splitlines()
    assert len((tmp_path / "o.jsonl.rejects.jsonl").read_text().splitlines()) == 3
    # --quiet still says why it failed
    quiet = cli("dedup", str(inp), "--out", str(tmp_path / "o2.jsonl"), "-q")
    assert quiet.returncode == 1 and "no record could be processed" in quiet.stderr


def test_max_reject_rate(tmp_path: Path) -> None:
    inp = tmp_path / "half.jsonl"
    inp.write_bytes(GOOD + b"not json\n")
    assert cli("dedup", str(inp), "--out", str(tmp_path / "o.jsonl"), "-q").returncode == 0
    proc = cli("dedup", str(inp), "--out", str(tmp_path / "o.jsonl"), "-q", "--max-reject-rate", "0.25")
    assert proc.returncode == 1
    assert "50.0% of the records were rejected, over --max-reject-rate 0.25" in proc.stderr
    assert cli("dedup", str(inp), "--out", str(tmp_path / "o.jsonl"), "-q",
               "--max-reject-rate", "0.5").returncode == 0
    bad = cli("dedup", str(inp), "--out", str(tmp_path / "o.jsonl"), "--max-reject-rate", "7")
    assert bad.returncode == 2 and "--max-reject-rate 7.0: must be within [0, 1]" in one_line_error(bad)


def test_reject_lines_are_capped(tmp_path: Path) -> None:
    """Rejects of large bad lines stay smaller than the input (the full line only behind a flag)."""
    inp = tmp_path / "garbage.jsonl"
    # binary garbage and backslashes: the worst case for escaping
    line = (b"\xff\\\x01" * 20_000)[:50_000]
    inp.write_bytes(GOOD + (line + b"\n") * 20)
    rejects = tmp_path / "r.jsonl"
    assert cli("dedup", str(inp), "--out", str(tmp_path / "o.jsonl"), "--rejects", str(rejects),
               "-q").returncode == 0
    rows = [json.loads(x) for x in rejects.read_text().splitlines()]
    assert len(rows) == 20 and all(r["truncated"] for r in rows)
    assert rejects.stat().st_size < inp.stat().st_size / 10
    assert max(len(x) for x in rejects.read_bytes().splitlines()) < 4096
    full = tmp_path / "full.jsonl"
    assert cli("dedup", str(inp), "--out", str(tmp_path / "o2.jsonl"), "--rejects", str(full), "-q",
               "--rejects-full-record").returncode == 0
    rows = [json.loads(x) for x in full.read_text().splitlines()]
    assert not any(r["truncated"] for r in rows)
    assert len(rows[0]["record"]) >= len(line)  # every byte is there (invalid ones as \\xNN)


def test_report_needs_a_known_extension(small_input: Path, tmp_path: Path) -> None:
    proc = cli("dedup", str(small_input), "--out", str(tmp_path / "o.jsonl"), "--report", str(tmp_path / "r.pdf"))
    assert proc.returncode == 2 and "give a .html or .png file name" in one_line_error(proc)
    assert not (tmp_path / "o.jsonl").exists()


def test_report_png(small_input: Path, tmp_path: Path) -> None:
    png = tmp_path / "r.png"
    assert cli("dedup", str(small_input), "--out", str(tmp_path / "o.jsonl"), "-q", "--report", str(png)).returncode == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("which", ["--out", "--rejects"])
def test_write_error_mid_run_is_one_line(which: str, tmp_path: Path) -> None:
    """A full disk (/dev/full) while writing: one line naming the file, exit 1, no traceback."""
    inp = tmp_path / "in.jsonl"
    inp.write_bytes(GOOD + b"not json\n")
    other = "--rejects" if which == "--out" else "--out"
    proc = cli("dedup", str(inp), which, "/dev/full", other, str(tmp_path / "other.jsonl"), "-q")
    assert proc.returncode == 1
    line = one_line_error(proc)
    assert line.startswith("stream-dedup dedup: cannot write /dev/full: No space left on device (at input line ")


def test_bad_log_level_is_a_usage_error(small_input: Path, tmp_path: Path) -> None:
    proc = cli("dedup", str(small_input), "--out", str(tmp_path / "o.jsonl"), env={"STREAM_DEDUP_LOG_LEVEL": "loud"})
    assert proc.returncode == 2
    assert one_line_error(proc) == "stream-dedup dedup: STREAM_DEDUP_LOG_LEVEL=LOUD: use DEBUG, INFO, WARNING or ERROR"
    assert not (tmp_path / "o.jsonl").exists()


def test_awkward_records_print_no_traceback(tmp_path: Path) -> None:
    """Records that once escaped as exceptions (a lone surrogate id, a marked section html.parser cannot
    scan) are decided or rejected, with at most one warning line each, never a traceback."""
    inp = tmp_path / "in.jsonl"
    inp.write_bytes(GOOD + b'{"id": "sur\\ud800rogate", "text": "a record whose id cannot be encoded"}\n'
                    b'{"id": "page", "html": "<p>story</p><![ if [ x ]]><p>more</p>"}\n')
    proc = cli("dedup", str(inp), "--out", str(tmp_path / "o.jsonl"), "-q")
    assert proc.returncode == 0
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.splitlines()) <= 2


def test_state_in_use_by_another_run(small_input: Path, tmp_path: Path) -> None:
    """A state another process holds open (RocksDB's lock): one line, exit 1, --out untouched."""
    from stream_dedup.engine import Deduplicator

    out = tmp_path / "o.jsonl"
    out.write_text("keep me\n")
    with Deduplicator(None, tmp_path / "st"):
        proc = cli("dedup", str(small_input), "--out", str(out), "--state", str(tmp_path / "st"))
    assert proc.returncode == 1
    assert one_line_error(proc).startswith(f"stream-dedup dedup: cannot open the state in {tmp_path / 'st'}: ")
    assert out.read_text() == "keep me\n"


def test_state_in_an_older_format_is_refused_in_one_line(small_input: Path, tmp_path: Path) -> None:
    from rocksdict import Options, Rdict

    state = tmp_path / "state"
    assert cli("dedup", str(small_input), "--out", str(tmp_path / "a.jsonl"), "--state", str(state), "-q").returncode == 0
    db = Rdict(str(state), Options(raw_mode=True), column_families={n: Options(raw_mode=True)
                                                                    for n in Rdict.list_cf(str(state)) if n != "default"})
    settings = json.loads(db[b"Msettings"])
    db[b"Msettings"] = json.dumps({**settings, "schema": 3}, sort_keys=True).encode()  # what format 3 stored
    db.close()
    proc = cli("dedup", str(small_input), "--out", str(tmp_path / "b.jsonl"), "--state", str(state))
    assert proc.returncode == 2
    line = one_line_error(proc)
    assert "is in format 3" in line and "Rebuild the index in a new --state directory" in line
    assert not (tmp_path / "b.jsonl").exists()
