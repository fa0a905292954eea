"""Start-up of a small run (issue 13): ``stream-dedup dedup`` on one record, as a whole process.

Per run: the wall time of the whole process, the time to the first decision (its event read from
stdout), CPU time (user + system) and peak RSS. Variants (``NAME=PYTHONPATH``, e.g. a copy of the
package at another commit) are run in turn, round after round, so that a busy machine slows them
alike; with none, the code of this checkout. Run it under the shared lock:

    flock /work/bench.lock .venv/bin/python bench/startup.py --runs 15 [--no-state] [NAME=PYTHONPATH ...]

``--no-state``: no ``--state`` (a temporary index, deleted at exit); else a fresh ``--state``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bytecode import compile_tree

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("variants", nargs="*", metavar="NAME=PYTHONPATH")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--no-state", action="store_true", help="no --state: a temporary index")
    ap.add_argument("--input", default=str(REPO / "examples" / "news_sample.jsonl"),
                    help="its first line is the record (default: the sample stream)")
    args = ap.parse_args()
    variants = [tuple(v.split("=", 1)) for v in args.variants] or [("this", str(REPO))]
    for _, path in variants:
        compile_tree(Path(path))  # (as installed: no module compiled again per process)
    work = Path(tempfile.mkdtemp(prefix="startup-"))
    one = work / "one.jsonl"
    with open(args.input, "rb") as fh:
        one.write_bytes(fh.readline())
    state, tmp = work / "S", work / "tmp"
    tmp.mkdir()
    res = {name: {"whole": [], "first": [], "cpu": [], "rss": []} for name, _ in variants}
    for _ in range(args.runs):
        for name, path in variants:
            shutil.rmtree(state, ignore_errors=True)
            env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAM_DEDUP_", "OPENBLAS_"))}
            env.update(PYTHONPATH=path, TMPDIR=str(tmp))
            cmd = [sys.executable, "-m", "stream_dedup.cli", "dedup", str(one), "--out", "-", "-q"]
            cmd += [] if args.no_state else ["--state", str(state)]
            t = time.perf_counter()
            proc = subprocess.Popen(cmd, env=env, cwd=work, stdout=subprocess.PIPE)
            line = proc.stdout.readline()
            first = time.perf_counter() - t
            proc.stdout.read()
            _, status, usage = os.wait4(proc.pid, 0)
            whole = time.perf_counter() - t
            if status or not line.startswith(b"{") or any(tmp.iterdir()):
                raise SystemExit(f"{name}: exit status {status}, first line {line[:80]!r}, left {list(tmp.iterdir())}")
            r = res[name]
            r["whole"].append(whole)
            r["first"].append(first)
            r["cpu"].append(usage.ru_utime + usage.ru_stime)
            r["rss"].append(usage.ru_maxrss / 1024)
    shutil.rmtree(work, ignore_errors=True)
    for name, r in res.items():
        print(f"{name}: whole {_spread(r['whole'])} s, to the first decision {_spread(r['first'])} s, CPU "
              f"{_spread(r['cpu'])} s, peak RSS {max(r['rss']):.0f} MB (median (range) of {args.runs} runs)")


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


if __name__ == "__main__":
    main()
