"""Issue 13, start-up of a small run: what a text run does not need is not imported, only the chosen
subcommand's parser is built, and a run whose process ends without closing its temporary index (see
``cli.process_end.release_state``) still writes its whole output, rejects and summary and deletes the index,
while a kept ``--state`` is left with its write-ahead log synced and its lists' snapshot written (not
flushed): the next run replays the log, reads every article, loads the snapshot, and ``--resume`` continues."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from stream_dedup import cli
from stream_dedup.cli import dedup as dedup_command
from stream_dedup.cli import process_end
from stream_dedup.config import EngineConfig
from stream_dedup.engine import Deduplicator
from stream_dedup.gc_tuning import YOUNG_THRESHOLD

from .conftest import SAMPLE
from .conftest import cli as run_cli

#: modules a plain-text ``dedup`` run never uses: imported only by the commands or inputs that need them
NOT_FOR_TEXT = ("lxml", "lxml.etree", "html.parser", "stream_dedup.html_text", "numba", "prometheus_client",
                "faust", "confluent_kafka", "matplotlib", "tqdm", "scipy")


def _in_subprocess(code: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAM_DEDUP_")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                          check=True)
    return json.loads(proc.stdout)


def test_importing_the_cli_loads_nothing_a_text_run_does_not_need() -> None:
    got = _in_subprocess(
        "import json, sys, stream_dedup.cli, stream_dedup.text as t; "
        f"print(json.dumps({{'loaded': [m for m in {NOT_FOR_TEXT!r} if m in sys.modules], "
        "'patterns': t._no_boundary.cache_info().currsize, 'blas': __import__('os').environ.get('OPENBLAS_NUM_THREADS')}))")
    assert got["loaded"] == []
    assert got["patterns"] == 0          # the no-boundary patterns are compiled on first non-ASCII text
    assert got["blas"] == "1"            # set before numpy loads OpenBLAS (a thread per core otherwise)


def test_the_whole_parser_imports_no_engine() -> None:
    """``stream-dedup --help`` builds every subcommand's arguments: their modules are imported, the engine
    (numpy, RocksDB) and the other heavy modules only when a subcommand runs."""
    heavy = ("stream_dedup.engine", "numpy", "rocksdict", *NOT_FOR_TEXT)
    got = _in_subprocess("import json, sys; from stream_dedup.cli import build_parser; build_parser(); "
                         f"print(json.dumps({{'loaded': [m for m in {heavy!r} if m in sys.modules]}}))")
    assert got == {"loaded": []}


def test_a_text_run_in_process_imports_no_html_parser(tmp_path: Path) -> None:
    code = (f"import json, sys; from stream_dedup import cli; "
            f"code = cli.main(['dedup', {str(SAMPLE)!r}, '--out', {str(tmp_path / 'o.jsonl')!r}, '-q']); "
            f"print(json.dumps({{'code': code, 'loaded': [m for m in {NOT_FOR_TEXT!r} if m in sys.modules]}}))")
    got = _in_subprocess(code)
    # the sample stream has HTML records: those load the HTML extractor, nothing else does
    assert got["code"] == 0 and set(got["loaded"]) <= {"lxml", "lxml.etree", "html.parser", "stream_dedup.html_text"}
    text_only = tmp_path / "text.jsonl"
    text_only.write_text("".join(line for line in SAMPLE.read_text(encoding="utf-8").splitlines(keepends=True)
                                 if '"html"' not in line)[:200_000].rsplit("\n", 1)[0] + "\n", encoding="utf-8")
    got = _in_subprocess(code.replace(repr(str(SAMPLE)), repr(str(text_only))))
    assert got == {"code": 0, "loaded": []}


def test_only_the_chosen_subcommand_gets_its_arguments() -> None:
    full = cli.build_parser()
    one = cli.build_parser("dedup")
    sub = {p.prog.split()[-1]: p for p in next(a for a in one._actions if a.dest == "command").choices.values()}
    assert len(sub["dedup"]._actions) == len(next(a for a in full._actions if a.dest == "command").choices["dedup"]
                                              ._actions)
    assert len(sub["worker"]._actions) == 1   # -h only
    assert one.parse_args(["dedup", "x.jsonl", "--num-perm", "64"]).num_perm == "64"  # typed by config.load


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_a_process_that_leaves_its_temporary_index_open_loses_nothing(tmp_path: Path) -> None:
    lines = SAMPLE.read_text(encoding="utf-8").splitlines(keepends=True)
    inp, out, ref = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "ref.jsonl"
    inp.write_text("".join(lines[:60]) + "{not json\n" + "".join(lines[60:120]), encoding="utf-8")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = run_cli("dedup", str(inp), "--out", str(out), "--summary-json", str(tmp_path / "s.json"),
                   env={"TMPDIR": str(tmp)})
    assert proc.returncode == 0, proc.stderr
    assert "rejects       1" in proc.stderr and "state       temporary, deleted at exit" in proc.stderr  # summary
    assert list(tmp.iterdir()) == []                      # the temporary index was deleted
    assert [r["line"] for r in _events(Path(f"{out}.rejects.jsonl"))] == [61]
    assert json.loads((tmp_path / "s.json").read_text())["records"] == 120
    # the same events as an in-process run, which closes its index
    assert cli.main(["dedup", str(inp), "--out", str(ref), "-q"]) == 0 and process_end.LEFT_OPEN == []
    assert _events(out) == _events(ref) and len(_events(out)) == 120


def test_a_kept_state_is_synced_and_read_by_the_next_run(tmp_path: Path) -> None:
    lines = SAMPLE.read_text(encoding="utf-8").splitlines(keepends=True)
    state, inp, out = tmp_path / "S", tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text("".join(lines[:40]) + "{not json\n", encoding="utf-8")
    proc = run_cli("dedup", str(inp), "--out", str(out), "--state", str(state))
    assert proc.returncode == 0, proc.stderr
    # not closed: no memtable flushed to an SST file, every write in the write-ahead log, the lists' snapshot
    assert not list(state.glob("*.sst")) and sum(p.stat().st_size for p in state.glob("*.log")) > 40 * 300
    assert (state / "memory-lists-3.bin").is_file()
    again = tmp_path / "again.jsonl"
    proc = run_cli("dedup", str(inp), "--out", str(again), "--state", str(state), "--summary-json",
                   str(tmp_path / "s.json"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "s.json").read_text())["repeated_ids"] == 40
    assert "in-memory lists of 40 articles loaded from their snapshot" in proc.stderr  # (its token was in the log)
    # --resume after the lines the state handled appends the rest, as one uninterrupted run writes them
    inp.write_text("".join(lines[:40]) + "{not json\n" + "".join(lines[40:80]), encoding="utf-8")
    proc = run_cli("dedup", str(inp), "--out", str(out), "--state", str(state), "--resume")
    assert proc.returncode == 0 and "resuming after input line 41" in proc.stderr, proc.stderr
    reference = tmp_path / "ref.jsonl"
    proc = run_cli("dedup", str(inp), "--out", str(reference), "--state", str(tmp_path / "R"))
    assert proc.returncode == 0, proc.stderr
    assert _events(out) == _events(reference)
    with Deduplicator(EngineConfig(), state) as dedup:
        assert dedup.index.checkpoint(dedup_command._checkpoint_name(str(inp))) == 81


def test_in_process_runs_close_their_index(tmp_path: Path) -> None:
    """``main(argv)`` returns (a test, a caller): the index is closed, nothing is left open."""
    state = tmp_path / "S"
    assert cli.main(["dedup", str(SAMPLE), "--out", str(tmp_path / "o.jsonl"), "--state", str(state), "-q"]) == 0
    assert process_end.LEFT_OPEN == [] and list(state.glob("*.sst"))
    with Deduplicator(EngineConfig(), state) as dedup:   # its lock was released
        assert len(dedup) > 0


def test_the_command_line_process_collects_rarely_from_its_start() -> None:
    """The console script's process sets the collector's threshold before the subcommand's imports
    (``gc_tuning.collect_rarely``: ~50 collections fewer during them); a caller's process that runs
    :func:`~stream_dedup.cli.main` with arguments keeps its own."""
    code = ("import contextlib, gc, io, json, sys; from stream_dedup import cli; "
            "sys.argv = ['stream-dedup', '--version']; before = gc.get_threshold()\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n    cli.main()\n"
            "after = gc.get_threshold(); gc.set_threshold(*before)\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
            "    cli.main(['--version'])\n"
            "print(json.dumps({'before': before, 'after': after, 'caller': gc.get_threshold()}))")
    got = _in_subprocess(code)
    assert got["before"] == [700, 10, 10]  # (Python's default)
    assert got["after"] == list(YOUNG_THRESHOLD)
    assert got["caller"] == got["before"]
