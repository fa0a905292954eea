"""stream-dedup vs its peers, in the same run, each as a whole process on one core.

    python bench/throughput.py [--data ../shared/data] [--limit N] [--repeat 3]
                               [--streams dev,short,accented] [--tools stream-dedup,datasketch,rensa,gaoya]
                               [--short-words 40] [--rounds N] [--json FILE]
                               [--baseline DIR]
    python bench/throughput.py --in-process [--data ../shared/data] [--limit N] [--repeat 3]

**The peer table** (default). Every tool runs on the same records as its own subprocess, from a
cold start, pinned to one CPU (the first this process may use), and is timed by wall clock from
spawn to exit: interpreter start, imports, reading the input, one decision per record written to a
file. Best of --repeat; in each round every tool runs once on each stream, one after the other,
after one untimed run of stream-dedup (it fills numba's cache of compiled kernels on a new checkout).

* stream-dedup: the ``stream-dedup dedup`` console script (``python -m stream_dedup.cli`` when it
  is not installed) on this checkout's code, default configuration, a fresh ``--state`` directory,
  ``--out`` a file, ``-q``;
* stream-dedup-2cpu: the same command with ``--fingerprint-processes 1`` and not pinned: the
  next batches fingerprinted in a child process while the last is decided, on two CPUs (what
  ``dedup`` does by default on a file over 1 MB when it may use two cores; the peers have no such mode);
* datasketch, rensa, gaoya: ``bench/peers.py`` (MinHash + LSH over lower-cased word k-shingles
  with our k, num_perm and LSH bands x rows; candidates verified at our Jaccard threshold).

Streams: ``dev``, the shared news stream (news_stream.jsonl); ``short``, the same records cut to
short items: the title, then the first paragraph of at least 10 words of the text (HTML records:
of its extracted text), at most --short-words words of it; ``accented``, the dev stream with one word
in seven of each text and title (the same words everywhere) spelled with accents (``é``, ``à``, ``ü``, ``ç``, ...: the
character mix of news in French, Portuguese, German or Spanish, whose every article takes the
non-ASCII folding path). Each is written to a temporary directory. Printed per tool and stream: records/s, the ratios to datasketch and to rensa, peak RSS
of the process (wait4), the time of the same command on the stream's first record alone (start-up),
records/s after start-up ((records - 1) / (time - start-up)), duplicates, and on the dev stream
precision / recall of the duplicate decisions against news_stream.truth.jsonl (``score`` of
bench/quality.py). Then the targets: >= 10x datasketch on each stream, >= 1x rensa.

A peer that is not installed, or fails, keeps its rows, saying so.

**--rounds N**: each stream made N times as long, as ``bench/scale.py`` builds its stream: round
``r`` is the stream with ``r`` and three digits after every word and id, so no round matches
another and every round has the stream's own duplicates (the dev stream's 7,431 records take
~0.13 s of start-up of ours against 0.5-1 s of work: 10 rounds show the rate a longer feed sees,
with an index ten times larger). Precision / recall are only scored on one round (the truth's ids).

**--baseline DIR**: a checkout of another commit of stream-dedup (``git worktree add DIR REV``) runs
as one more tool, ``stream-dedup@REV`` (``python -m stream_dedup.cli dedup`` with ``PYTHONPATH=DIR``),
in the same rounds, after its own untimed warm-up run. The table then prints our records/s as a
change against it, whole process and after start-up (the per-record cost alone, which is what a
long run sees): the before/after of a change, measured in the same run.

**--in-process**: the older table: ``Deduplicator.process_batch`` on --batch records at a time
(256; 1: ``Deduplicator.process`` one at a time) in a loop vs datasketch in a loop,
each in its own process pinned to one CPU, timed inside the process after imports and the numba
warm-up; peak RSS, and the index bytes on disk per article.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEFAULT_DATA = ROOT.parent / "shared" / "data"
TWO_CPUS = "stream-dedup-2cpu"  # ours on every CPU this process may use, a fingerprint process beside it
PEERS = ("datasketch", "rensa", "gaoya")
TOOLS = ("stream-dedup", *PEERS, TWO_CPUS)
STREAMS = ("dev", "short", "accented")
NOT_INSTALLED = 3  # bench/peers.py's exit status when the peer's package is missing
TARGET_VS_DATASKETCH = 10.0
TARGET_VS_RENSA = 1.0


def _lines(data: Path, limit: int) -> list[bytes]:
    lines = (data / "news_stream.jsonl").read_bytes().splitlines()
    return lines[:limit] if limit else lines


def _cpu() -> int | None:
    try:
        return sorted(os.sched_getaffinity(0))[0]
    except (AttributeError, OSError):
        return None


# -- the peer table: whole processes ------------------------------------------------------------

def short_items(lines: list[bytes], max_words: int) -> list[bytes]:
    """Each record as a short item: its title, then the first paragraph of >= 10 words of its text
    (bylines are shorter), cut to ``max_words`` words. Ids are kept, so the truth rows still align."""
    from stream_dedup.html_text import html_to_text

    out = []
    for line in lines:
        rec = json.loads(line)
        body = rec.get("text")
        if body is None:
            body = html_to_text(rec.get("html") or "")
        paragraphs = [p for p in re.split(r"\n\s*\n", body) if p.strip()]
        lead = next((p for p in paragraphs if len(p.split()) >= 10), paragraphs[0] if paragraphs else "")
        title = rec.get("title") or ""
        text = title + "\n\n" + " ".join(lead.split()[:max_words])
        out.append(json.dumps({"id": rec["id"], "title": title, "text": text}, ensure_ascii=False).encode())
    return out


#: vowels (and c) as they carry accents in French, Portuguese, German and Spanish text
ACCENTS = str.maketrans({"a": "\u00e0", "e": "\u00e9", "i": "\u00ee", "o": "\u00f4", "u": "\u00fc", "c": "\u00e7",
                         "n": "\u00f1", "E": "\u00c9", "A": "\u00c0"})


def accented_items(lines: list[bytes], every: int = 7) -> list[bytes]:
    """Each record with the words of its text and title whose CRC-32 is a multiple of ``every``
    spelled with accents (:data:`ACCENTS`): the same words in every record, as a language spells
    them, so a copy keeps its original's spelling; the character mix of news in another
    Latin-script language, not a language. HTML records are kept as they are."""
    out = []
    for line in lines:
        rec = json.loads(line)
        for field in ("title", "text"):
            if isinstance(rec.get(field), str):
                rec[field] = accented(rec[field], every)
        out.append(json.dumps(rec, ensure_ascii=False).encode())
    return out


def accented(text: str, every: int = 7) -> str:
    """``text`` with its words whose CRC-32 is a multiple of ``every`` spelled with :data:`ACCENTS`."""
    return " ".join(w.translate(ACCENTS) if zlib.crc32(w.encode()) % every == 0 else w for w in text.split(" "))


def stream_records(stream: str, lines: list[bytes], short_words: int) -> list[bytes]:
    if stream == "short":
        return short_items(lines, short_words)
    return accented_items(lines) if stream == "accented" else lines


def ours_command() -> list[str]:
    script = Path(sys.executable).parent / "stream-dedup"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "stream_dedup.cli"]


def command(tool: str, source: Path, out: Path, state: Path) -> list[str]:
    from stream_dedup.config import EngineConfig
    from stream_dedup.engine import lsh_params

    if tool == "stream-dedup":
        return [*ours_command(), "dedup", str(source), "--out", str(out), "--state", str(state), "-q"]
    if tool == TWO_CPUS:
        return [*ours_command(), "dedup", str(source), "--out", str(out), "--state", str(state), "-q",
                "--fingerprint-processes", "1"]
    if tool.startswith("stream-dedup@"):  # the --baseline checkout, found through PYTHONPATH
        return [sys.executable, "-P", "-m", "stream_dedup.cli", "dedup", str(source), "--out", str(out),
                "--state", str(state), "-q"]
    c = EngineConfig()
    lsh = lsh_params(c)
    return [sys.executable, str(ROOT / "bench" / "peers.py"), tool, str(source), "--out", str(out),
            "--k", str(c.shingle_size), "--num-perm", str(c.num_perm), "--bands", str(lsh.bands),
            "--rows", str(lsh.rows), "--threshold", str(c.lsh_threshold), "--jaccard", str(c.jaccard_threshold),
            "--seed", str(c.seed)]


def child_env(tree: Path = ROOT) -> dict[str, str]:
    """The environment of a tool's process: stream-dedup's defaults, ``tree``'s code first, one thread."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAM_DEDUP_")}  # the defaults
    env["PYTHONPATH"] = os.pathsep.join([str(tree), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.update(NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", RAYON_NUM_THREADS="1")
    return env


# Runs one command and reports on it. A child's peak RSS (ru_maxrss) is at least the RSS high-water
# mark of the process that spawned it (Linux records the old address space's at exec), and this
# process holds numba and lxml: so a small interpreter, without site, pins itself to the CPU, spawns
# the command and reports its wall time, exit status and ru_maxrss as one JSON line.
LAUNCHER = """
import json, os, sys, time
cmd, cpu = json.loads(sys.argv[1]), int(sys.argv[2])
if cpu >= 0:
    os.sched_setaffinity(0, {cpu})
null = os.open(os.devnull, os.O_RDWR)
t0 = time.perf_counter()
pid = os.posix_spawn(cmd[0], cmd, os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, null, 1)])
_, status, usage = os.wait4(pid, 0)
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds, "code": os.waitstatus_to_exitcode(status), "peak_rss_bytes": usage.ru_maxrss * 1024}))
"""


def run_process(cmd: list[str], env: dict[str, str], cpu: int | None) -> dict:
    """Wall time from spawn to exit, exit status, peak RSS (of this child alone) and stderr's tail."""
    launcher = [sys.executable, "-S", "-c", LAUNCHER, json.dumps(cmd), str(-1 if cpu is None else cpu)]
    proc = subprocess.run(launcher, stdin=subprocess.DEVNULL, capture_output=True, env=env, check=False)
    tail = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-3:]
    if proc.returncode != 0:
        return {"code": proc.returncode, "stderr": " | ".join(tail), "seconds": 0.0, "peak_rss_bytes": 0}
    return dict(json.loads(proc.stdout), stderr=" | ".join(tail))


def read_decisions(path: Path) -> dict[str, dict]:
    decisions = {}
    with path.open("rb") as fh:
        for line in fh:
            if line.strip():
                d = json.loads(line)
                decisions[d["id"]] = d
    return decisions


def _rev(tree: Path) -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return tree.name


def in_rounds(records: list[bytes], rounds: int) -> list[bytes]:
    """``records`` ``rounds`` times over, round ``r`` suffixed by ``r`` (``bench/scale.py``'s rounds)."""
    if rounds <= 1:
        return records
    from scale import suffixed, template

    templates = [template(record) for record in records]
    return [suffixed(tmpl, r) for r in range(rounds) for tmpl in templates]


def peer_table(data: Path, limit: int, repeat: int, streams: list[str], tools: list[str],
               short_words: int, baseline: Path | None = None, rounds: int = 1) -> dict:
    """Runs every tool on every stream ``repeat`` times; the best run of each, scored."""
    sys.path.insert(0, str(ROOT / "bench"))
    from bytecode import compile_tree
    from quality import score

    cpu = _cpu()
    compile_tree(ROOT)  # (as installed: no module compiled again per process)
    if baseline is not None:
        compile_tree(baseline)
    envs = {tool: child_env() for tool in tools}
    if baseline is not None:
        tools = [*tools, f"stream-dedup@{_rev(baseline)}"]
        envs[tools[-1]] = child_env(baseline)
    lines = _lines(data, limit)
    truth = [json.loads(x) for x in (data / "news_stream.truth.jsonl").read_bytes().splitlines()[:len(lines)]]
    rows: dict[tuple[str, str], dict] = {}
    with tempfile.TemporaryDirectory(prefix="throughput-") as tmp_name:
        tmp = Path(tmp_name)
        sources = {}
        for stream in streams:
            records = in_rounds(stream_records(stream, lines, short_words), rounds)
            sources[stream] = (tmp / f"{stream}.jsonl", tmp / f"{stream}-first.jsonl", len(records))
            sources[stream][0].write_bytes(b"\n".join(records) + b"\n")
            sources[stream][1].write_bytes(records[0] + b"\n")
        for stream in streams:
            for tool in tools:
                rows[(stream, tool)] = {"tool": tool, "stream": stream, "records": sources[stream][2],
                                        "status": "ok", "command": command(tool, Path(f"{stream}.jsonl"),
                                                                           Path("OUT.jsonl"), Path("STATE"))}
        # one untimed run of ours first: numba's on-disk cache of compiled kernels is filled by the first
        # run of a new checkout (an install-time cost: ~30 s); the peers have nothing of the kind
        for tool in tools:
            if tool.startswith("stream-dedup"):
                first = sources[streams[0]][1]
                run_process(command(tool, first, tmp / "warm.out.jsonl", tmp / "state-warm"), envs[tool], cpu)
                shutil.rmtree(tmp / "state-warm", ignore_errors=True)
        for _ in range(repeat):
            for stream in streams:
                source, first, _n = sources[stream]
                for tool in tools:
                    row = rows[(stream, tool)]
                    if row["status"] != "ok":
                        continue
                    for what, path in (("run", source), ("start", first)):
                        out, state = tmp / f"{stream}-{tool}-{what}.out.jsonl", tmp / f"state-{stream}-{tool}"
                        r = run_process(command(tool, path, out, state), envs[tool], None if tool == TWO_CPUS else cpu)
                        shutil.rmtree(state, ignore_errors=True)
                        if r["code"] != 0:
                            row["status"] = (f"not installed ({r['stderr']})" if r["code"] == NOT_INSTALLED
                                             else f"failed, exit {r['code']}: {r['stderr']}")
                            break
                        if what == "run" and r["seconds"] < row.get("seconds", float("inf")):
                            row.update(seconds=r["seconds"], peak_rss_bytes=r["peak_rss_bytes"], out=out)
                        if what == "start":
                            row["start_seconds"] = min(r["seconds"], row.get("start_seconds", float("inf")))
        for (stream, _tool), row in rows.items():
            if row["status"] != "ok":
                continue
            decisions = read_decisions(row.pop("out"))
            row["decisions"] = len(decisions)
            row["duplicates"] = sum(d["type"] == "duplicate-of" for d in decisions.values())
            row["records_per_second"] = row["records"] / row["seconds"]
            row["after_start_per_second"] = ((row["records"] - 1) / (row["seconds"] - row["start_seconds"])
                                             if row["seconds"] > row["start_seconds"] else None)
            if stream == "dev" and rounds == 1:
                s = score(None, truth, decisions)
                row["precision"], row["recall"] = s["precision"], s["recall"]
    for (stream, _tool), row in rows.items():
        for peer in ("datasketch", "rensa"):
            other = rows.get((stream, peer))
            if row["status"] == "ok" and other and other["status"] == "ok":
                row[f"vs_{peer}"] = row["records_per_second"] / other["records_per_second"]
    result = {"cpu": cpu, "repeat": repeat, "records": len(lines) * max(rounds, 1), "rounds": max(rounds, 1),
              "rows": list(rows.values())}
    if baseline is not None:
        result["baseline"] = tools[-1]
    return result


def _commit() -> str:
    """The checkout's commit, with "+changes" when its tracked files differ from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def print_peer_table(result: dict) -> None:
    from stream_dedup.config import EngineConfig
    from stream_dedup.engine import lsh_params

    c = EngineConfig()
    lsh = lsh_params(c)
    print(f"word {c.shingle_size}-shingles, num_perm {c.num_perm} (rensa, gaoya: {lsh.bands * lsh.rows} = bands x rows), "
          f"LSH {lsh.bands} bands x {lsh.rows} rows (threshold {c.lsh_threshold}), duplicate at estimated "
          f"Jaccard >= {c.jaccard_threshold}; each tool a whole process pinned to CPU {result['cpu']}, "
          f"best of {result['repeat']}")
    print()
    print("| tool | stream | records | records/s | vs datasketch | vs rensa | peak RSS | start-up (1 record) | "
          "records/s after start-up | duplicates | precision / recall |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for row in result["rows"]:
        if row["status"] != "ok":
            print(f"| {row['tool']} | {row['stream']} | {row['records']:,} | {row['status']} | - | - | - | - | - | - | - |")
            continue
        pr = (f"{row['precision']:.4f} / {row['recall']:.4f}" if "precision" in row else "-")
        print(f"| {row['tool']} | {row['stream']} | {row['records']:,} | {row['records_per_second']:,.0f} | "
              f"{_fmt(row.get('vs_datasketch'), '.2f', '×')} | {_fmt(row.get('vs_rensa'), '.2f', '×')} | "
              f"{row['peak_rss_bytes'] / 2**20:,.0f} MiB | {row['start_seconds']:.2f} s | "
              f"{_fmt(row['after_start_per_second'], ',.0f')} | {row['duplicates']:,} | {pr} |")
    print()
    print("targets (stream-dedup, whole process, this run):")
    for row in result["rows"]:
        if row["tool"] != "stream-dedup":
            continue
        for peer, target in (("datasketch", TARGET_VS_DATASKETCH), ("rensa", TARGET_VS_RENSA)):
            ratio = row.get(f"vs_{peer}")
            if ratio is None:
                verdict = f"cannot be checked ({peer} or stream-dedup did not run)"
            else:
                verdict = f"{ratio:.2f}×: {'met' if ratio >= target else 'NOT met'}"
            print(f"* >= {target:g}× {peer} on the {row['stream']} stream: {verdict}")
    if "baseline" in result:
        print()
        print(f"stream-dedup against {result['baseline']} (records/s, same run):")
        by = {(row["stream"], row["tool"]): row for row in result["rows"]}
        for stream in dict.fromkeys(row["stream"] for row in result["rows"]):
            ours, base = by.get((stream, "stream-dedup")), by.get((stream, result["baseline"]))
            if not (ours and base and ours["status"] == base["status"] == "ok"):
                print(f"* {stream}: cannot be compared (a run failed)")
                continue
            change = ours["records_per_second"] / base["records_per_second"] - 1
            line = (f"* {stream}: {ours['records_per_second']:,.0f} vs {base['records_per_second']:,.0f} = "
                    f"{change:+.1%}")
            if ours["after_start_per_second"] and base["after_start_per_second"]:  # the per-record cost alone
                line += (f"; after start-up {ours['after_start_per_second']:,.0f} vs "
                         f"{base['after_start_per_second']:,.0f} = "
                         f"{ours['after_start_per_second'] / base['after_start_per_second'] - 1:+.1%}")
            print(line)
    print()
    print("commands (STATE a fresh directory, OUT a file, in the run's temporary directory):")
    seen = set()
    for row in result["rows"]:
        if row["tool"] not in seen:
            seen.add(row["tool"])
            print(f"* {row['tool']}: {' '.join(row['command'])}")


# -- the in-process table -----------------------------------------------------------------------



def run_engine(lines: list[bytes], batch: int = 1) -> dict:
    from stream_dedup.config import EngineConfig
    from stream_dedup.engine import Deduplicator
    from stream_dedup.record import parse_record

    config = EngineConfig()
    with tempfile.TemporaryDirectory() as tmp:
        warm = Deduplicator(config, Path(tmp) / "warm")  # compile the numba kernels outside the timing
        warm.process(parse_record(lines[0], config))
        warm.close()
        with Deduplicator(config, Path(tmp) / "index") as dedup:
            t0 = time.perf_counter()
            dups = 0
            if batch <= 1:
                for line in lines:
                    dups += dedup.process(parse_record(line, config)).is_duplicate
            else:
                for i in range(0, len(lines), batch):
                    decisions = dedup.process_batch([parse_record(line, config) for line in lines[i:i + batch]])
                    dups += sum(d.is_duplicate for d in decisions)
            elapsed = time.perf_counter() - t0
            dedup.index.flush()
            disk = dedup.disk_bytes()
            count = len(dedup)
    return {"seconds": elapsed, "duplicates": dups, "disk_bytes": disk, "indexed": count,
            "config": f"num_perm={config.num_perm} k={config.shingle_size} lsh_threshold={config.lsh_threshold} "
                      f"batch={batch}"}


def run_datasketch(lines: list[bytes]) -> dict:
    from datasketch import MinHash, MinHashLSH

    from stream_dedup.config import EngineConfig

    config = EngineConfig()
    word = re.compile(r"\w+")
    k = config.shingle_size
    lsh = MinHashLSH(threshold=config.lsh_threshold, num_perm=config.num_perm)
    t0 = time.perf_counter()
    dups = 0
    for line in lines:
        rec = json.loads(line)
        words = word.findall((rec.get("text") or rec.get("html") or "").lower())
        shingles = {" ".join(words[i:i + k]).encode() for i in range(max(1, len(words) - k + 1))}
        m = MinHash(num_perm=config.num_perm)
        m.update_batch(shingles)
        dups += bool(lsh.query(m))
        lsh.insert(rec["id"], m, check_duplication=False)
    return {"seconds": time.perf_counter() - t0, "duplicates": dups}




def child(which: str, data: Path, limit: int, batch: int = 1) -> None:
    cpu = _cpu()
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    lines = _lines(data, limit)
    result = run_engine(lines, batch) if which == "engine" else run_datasketch(lines)
    result["records"] = len(lines)
    result["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(result))


def measure(which: str, data: Path, limit: int, batch: int = 1) -> dict:
    env = dict(os.environ, NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    out = subprocess.run([sys.executable, __file__, "--child", which, "--data", str(data), "--limit", str(limit),
                          "--batch", str(batch)], check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def in_process_table(data: Path, limit: int, repeat: int, batch: int = 1) -> None:
    best: dict[str, dict] = {}
    for _ in range(repeat):
        for which in ("engine", "datasketch"):
            r = measure(which, data, limit, batch)
            if which not in best or r["seconds"] < best[which]["seconds"]:
                best[which] = r
    e, d = best["engine"], best["datasketch"]
    e_rps, d_rps = e["records"] / e["seconds"], d["records"] / d["seconds"]
    print(f"records: {e['records']}  ({e['config']}; best of {repeat}, one core each, in process)")
    print("| | records/s | peak RSS | duplicates flagged |")
    print("| --- | --- | --- | --- |")
    print(f"| stream-dedup engine (RocksDB index, MinHash + SimHash) | {e_rps:,.0f} | "
          f"{e['peak_rss_bytes'] / 2**20:,.0f} MiB | {e['duplicates']} |")
    print(f"| datasketch MinHash + MinHashLSH (in memory) | {d_rps:,.0f} | "
          f"{d['peak_rss_bytes'] / 2**20:,.0f} MiB | {d['duplicates']} |")
    print(f"speed ratio (stream-dedup / datasketch): {e_rps / d_rps:.2f}x")
    print(f"index on disk: {e['disk_bytes'] / 2**20:.1f} MiB for {e['indexed']} articles = "
          f"{e['disk_bytes'] / max(1, e['indexed']):,.0f} bytes/article")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA,
                    help="directory with news_stream.jsonl and news_stream.truth.jsonl")
    ap.add_argument("--limit", type=int, default=0, help="only the first N records")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--streams", default=",".join(STREAMS), help="of: " + ", ".join(STREAMS))
    ap.add_argument("--tools", default=",".join(TOOLS), help="of: " + ", ".join(TOOLS))
    ap.add_argument("--short-words", type=int, default=40, help="words of the first paragraph in a short item")
    ap.add_argument("--rounds", type=int, default=1,
                    help="each stream this many times over, every round's words and ids suffixed (bench/scale.py)")
    ap.add_argument("--json", type=Path, help="also write the peer table's figures to this file")
    ap.add_argument("--baseline", type=Path, metavar="DIR",
                    help="a checkout of another commit, run as one more tool (stream-dedup@REV) for a before/after")
    ap.add_argument("--in-process", action="store_true", help="the in-process engine vs datasketch table instead")
    ap.add_argument("--batch", type=int, default=256,
                    help="--in-process: records per Deduplicator.process_batch call (1: process one at a time)")
    ap.add_argument("--child", choices=["engine", "datasketch"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child, args.data, args.limit, args.batch)
        return 0
    if not (args.data / "news_stream.jsonl").exists():
        print(f"no shared data at {args.data}", file=sys.stderr)
        return 2
    if args.in_process:
        in_process_table(args.data, args.limit, args.repeat, args.batch)
        return 0
    streams = [s for s in args.streams.split(",") if s]
    tools = [t for t in args.tools.split(",") if t]
    unknown = sorted(set(streams) - set(STREAMS)) + sorted(set(tools) - set(TOOLS))
    if unknown:
        ap.error(f"unknown stream or tool: {', '.join(unknown)}")
    started = datetime.datetime.now(datetime.timezone.utc)
    load0 = os.getloadavg()
    if args.baseline is not None and not (args.baseline / "stream_dedup" / "cli.py").exists() \
            and not (args.baseline / "stream_dedup" / "cli").is_dir():
        ap.error(f"--baseline {args.baseline}: not a stream-dedup checkout")
    if not 1 <= args.rounds <= 1000:
        ap.error(f"--rounds {args.rounds}: from 1 to 1000")
    result = peer_table(args.data, args.limit, args.repeat, streams, tools, args.short_words, args.baseline,
                        args.rounds)
    load1 = os.getloadavg()
    result["started_utc"] = started.strftime("%Y-%m-%d %H:%M")
    result["seconds"] = round((datetime.datetime.now(datetime.timezone.utc) - started).total_seconds(), 1)
    result["commit"] = _commit()
    print(f"{result['started_utc']} UTC, code {result['commit']}, {result['seconds']:.0f} s, {os.cpu_count()} CPUs, load average "
          f"{load0[0]:.2f} at the start, {load1[0]:.2f} at the end; {result['records']:,} records per stream"
          + (f" ({result['rounds']} rounds)" if result["rounds"] > 1 else ""))
    print_peer_table(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
