"""Does ``stream-dedup dedup`` keep its rate as the index grows? (issue 13)

    python bench/scale.py [--articles 1000000] [--chunk 20000] [--memory 2GB] [--data ../shared/data]
                          [--stream FILE] [--keep-state DIR] [--json FILE] [-- EXTRA DEDUP FLAGS]

1. Builds a long stream from rounds of the shared dev stream (7,431 records): round r suffixes every
   word of every record with ``r`` and r in three digits (``r000``, ``r001``, ...; the id too), so no
   round matches another, each round has the dev stream's own duplicates, and every round's records
   are as long as every other's (a suffix that grew with r made round 121's records 30 % longer in
   bytes than round 1's, and ~5 % slower to decide on an empty index: part of the slope the table
   measured was the input's). It is written once to ``--stream`` (default: a file in the temporary
   directory, reused by later runs that ask for as many articles or fewer).
2. Runs the whole ``dedup`` command on it as a subprocess (``python -m stream_dedup.cli dedup``,
   this tree's code), with ``--stats-every CHUNK`` and ``--memory``, into a fresh ``--state``.
3. Prints one row per chunk: records/s over the chunk, CPU time per record (the process's, RocksDB
   compaction threads included: unlike the rate, it does not depend on what else runs), RSS, index bytes on disk per article,
   block cache use and hit rate, the memory of the LSH buckets and passage lists; then whether every chunk's rate stayed within 20 % of the
   first's, the bytes per article of the closed index, and how long the whole command takes for one
   more record on the full index: with its in-memory lists loaded from the snapshot its close wrote,
   and built again from RocksDB.

Run anything longer than ~30 s under the shared lock: ``flock /work/bench.lock python bench/scale.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SNAPSHOT_FILE = "memory-lists.npz"  # stream_dedup.memory_lists.SNAPSHOT_FILE (not imported: this runs the CLI)
DEFAULT_DATA = REPO.parent / "shared" / "data"
WORD = re.compile(r"(\w+)")
TAG = re.compile(r"(<[^>]*>)")
FLAT = 0.8  # every chunk at least this share of the first chunk's rate
LIST_BYTES = ("band_table_bytes", "passage_lists_bytes", "simhash_table_bytes")  # the in-memory lists of a stats line


MARK = "\x00"  # where a round's suffix goes; json.dumps writes it as the escape below
MARK_JSON = b"\\u0000"


def template(line: bytes) -> bytes:
    """One record as JSON with a mark after every word of its text, html (outside tags) and title, and
    after ``~`` at the end of its id: :func:`suffixed` fills the marks in (the source has no NULs)."""
    obj = json.loads(line)
    sub = r"\1" + MARK
    for key in ("text", "title"):
        if isinstance(obj.get(key), str):
            obj[key] = WORD.sub(sub, obj[key])
    if isinstance(obj.get("html"), str):
        obj["html"] = "".join(p if p.startswith("<") else WORD.sub(sub, p) for p in TAG.split(obj["html"]))
    obj["id"] = f"{obj['id']}~{MARK}"
    return json.dumps(obj, ensure_ascii=False).encode()


ROUND_DIGITS = 3  # every round's suffix is as long: r000 ... r999
MAX_ROUNDS = 10**ROUND_DIGITS


def suffixed(tmpl: bytes, r: int) -> bytes:
    """Round ``r`` of one record: every word and the id + ``r`` and ``r`` in :data:`ROUND_DIGITS` digits."""
    return tmpl.replace(MARK_JSON, f"r{r:0{ROUND_DIGITS}d}".encode())


def build_stream(source: Path, target: Path, articles: int) -> None:
    """Write ``articles`` records: rounds 0, 1, 2, ... of ``source`` (kept when already long enough)."""
    count = target.with_suffix(".count")
    if target.exists() and count.exists() and int(count.read_text()) >= articles:
        return
    lines = [ln.rstrip(b"\n") for ln in source.open("rb") if ln.strip()]
    if any(MARK_JSON in ln for ln in lines):
        raise SystemExit(f"{source} holds escaped NULs: they would take a round's suffix")
    templates = [template(ln) for ln in lines]
    if articles > MAX_ROUNDS * len(templates):
        raise SystemExit(f"{articles:,} articles need more than {MAX_ROUNDS} rounds of {len(templates):,} records")
    t0 = time.perf_counter()
    n = r = 0
    with open(f"{target}.part", "wb") as out:
        while n < articles:
            for tmpl in templates[: articles - n]:
                out.write(suffixed(tmpl, r) + b"\n")
            n += min(len(lines), articles - n)
            r += 1
    os.replace(f"{target}.part", target)
    count.write_text(str(n))
    print(f"built {target}: {n:,} records, {r} rounds, {target.stat().st_size / 1e9:.2f} GB "
          f"in {time.perf_counter() - t0:.0f} s", file=sys.stderr)


def run(stream: Path, articles: int, chunk: int, memory: str, state: Path, extra: list[str]) -> tuple[list[dict], str]:
    """Run ``dedup`` on the first ``articles`` lines of ``stream``; return its stats lines and summary."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    cmd = [sys.executable, "-m", "stream_dedup.cli", "dedup", "-", "--out", str(state) + ".events.jsonl", "--state", str(state),
           "--stats-every", str(chunk), "--memory", memory, *extra]
    print(f"$ head -n {articles} {stream} | PYTHONPATH={REPO} python {' '.join(cmd[1:])}", file=sys.stderr)
    head = subprocess.Popen(["head", "-n", str(articles), str(stream)], stdout=subprocess.PIPE)
    proc = subprocess.Popen(cmd, stdin=head.stdout, stderr=subprocess.PIPE, text=True, env=env)
    head.stdout.close()
    stats, rest = [], []
    print_header()
    for line in proc.stderr:
        if line.startswith('{"stats"'):
            stats.append(json.loads(line))
            print_row(stats[-1], stats[0], stats[-2] if len(stats) > 1 else None)
        else:
            rest.append(line)
    if proc.wait() != 0:
        raise SystemExit(f"dedup failed ({proc.returncode}):\n{''.join(rest)}")
    return stats, "".join(rest)


PROBE = b'{"id": "scale-reopen-probe", "text": "A record that matches nothing in the index, decided after it reopens."}\n'


def reopen_seconds(state: Path, memory: str, extra: list[str]) -> float:
    """Wall time of the whole ``dedup`` command deciding one new record on the index in ``state``
    (opening it, rebuilding its LSH buckets from the records, deciding, closing)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    cmd = [sys.executable, "-m", "stream_dedup.cli", "dedup", "-", "--out", os.devnull, "--state", str(state),
           "--memory", memory, "-q", *extra]
    t0 = time.perf_counter()
    subprocess.run(cmd, input=PROBE, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def print_header() -> None:
    print("| articles | records/s | vs first | CPU ms/record | RSS MB | index MB | bytes/article | cache used MB "
          "| hit rate | lists in memory MB |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |", flush=True)


def print_row(s: dict, first: dict, before: dict | None) -> None:
    """One chunk; CPU per record (compaction threads included) does not depend on other load on the machine."""
    rate, hit = s["chunk_records_per_second"], s["block_cache_hit_rate"]
    cpu = (s["cpu_seconds"] - (before["cpu_seconds"] if before else 0.0)) / (s["lines"] - (before["lines"] if before
                                                                                          else 0)) * 1000
    print(f"| {s['index_articles']:,} | {rate:,.0f} | {rate / first['chunk_records_per_second']:.0%} | {cpu:.2f} | "
          f"{s['rss_bytes'] / 2**20:,.0f} | {s['index_bytes'] / 2**20:,.0f} | "
          f"{s['index_bytes'] / max(1, s['index_articles']):,.0f} | {s['block_cache_usage_bytes'] / 2**20:,.0f} | "
          f"{'-' if hit is None else f'{hit:.1%}'} | {sum(s.get(k, 0) for k in LIST_BYTES) / 2**20:,.0f} |",
          flush=True)


def index_bytes(state: Path) -> int:
    """Bytes of every file in the index directory."""
    return sum(f.stat().st_size for f in state.iterdir() if f.is_file())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--articles", type=int, default=1_000_000)
    ap.add_argument("--chunk", type=int, default=20_000, help="records per row (default: 20000)")
    ap.add_argument("--memory", default="2GB", help="the dedup command's --memory (default: 2GB)")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--stream", type=Path, default=Path(tempfile.gettempdir()) / "stream-dedup-scale-r3.jsonl",
                    help="where the stream is built (kept for later runs; the name says its suffix format)")
    ap.add_argument("--keep-state", type=Path, help="index directory to keep (default: a temporary one)")
    ap.add_argument("--json", type=Path, help="also write the stats lines and the verdict here")
    ap.add_argument("extra", nargs="*", help="more dedup flags (after --)")
    args = ap.parse_args(argv)
    source = args.data / "news_stream.jsonl"
    if not source.exists():
        print(f"no shared data at {source}", file=sys.stderr)
        return 2
    build_stream(source, args.stream, args.articles)
    with tempfile.TemporaryDirectory(prefix="stream-dedup-scale-") as tmp:
        state = args.keep_state or Path(tmp) / "state"
        stats, summary = run(args.stream, args.articles, args.chunk, args.memory, state, args.extra)
        snapshot_bytes = (state / SNAPSHOT_FILE).stat().st_size if (state / SNAPSHOT_FILE).exists() else 0
        at_rest = index_bytes(state) - snapshot_bytes
        reopen = reopen_seconds(state, args.memory, args.extra)        # the lists loaded from the snapshot
        (state / SNAPSHOT_FILE).unlink(missing_ok=True)
        rebuild = reopen_seconds(state, args.memory, args.extra)       # the lists built from RocksDB
        fresh = reopen_seconds(Path(tmp) / "fresh", args.memory, args.extra)
    full = [s for s in stats if s["lines"] % args.chunk == 0] or stats  # the last partial chunk is noisy
    first = full[0]["chunk_records_per_second"]
    worst = min(full, key=lambda s: s["chunk_records_per_second"])
    met = worst["chunk_records_per_second"] >= FLAT * first
    print(f"\nslowest chunk: {worst['chunk_records_per_second']:,.0f} records/s at {worst['index_articles']:,} "
          f"articles = {worst['chunk_records_per_second'] / first:.0%} of the first ({first:,.0f} records/s)")
    print(f"flat within 20 % of the first chunk: {'met' if met else 'NOT met'}")
    cpu = [(s["cpu_seconds"] - p["cpu_seconds"]) / (s["lines"] - p["lines"]) for p, s in
           zip([{"cpu_seconds": 0.0, "lines": 0}, *full], full, strict=False)]
    cpu_met = max(cpu) <= cpu[0] / FLAT
    print(f"CPU per record: first chunk {cpu[0] * 1000:.2f} ms, highest {max(cpu) * 1000:.2f} ms "
          f"({max(cpu) / cpu[0]:.0%} of the first); within 1/0.8 of the first chunk's: "
          f"{'met' if cpu_met else 'NOT met'}")
    print(f"one more record, whole command, on this index ({stats[-1]['index_articles']:,} articles): "
          f"{reopen:.2f} s with the in-memory lists loaded from the snapshot of its close "
          f"({snapshot_bytes / 2**20:,.0f} MB), {rebuild:.2f} s built again from RocksDB; {fresh:.2f} s on an "
          f"empty index")
    articles = stats[-1]["index_articles"]
    print(f"index on disk after its close: {at_rest / 2**20:,.0f} MB = {at_rest / max(1, articles):,.0f} bytes per "
          f"article (every file of the index directory but the lists' snapshot; during the run the write-ahead "
          f"log, memtables not yet flushed and the inputs of running compactions add to it: the table's column)")
    print(summary.strip())
    if args.json:
        args.json.write_text(json.dumps({"articles": args.articles, "memory": args.memory, "stats": stats,
                                         "flat": met, "cpu_flat": cpu_met, "reopen_seconds": reopen,
                                         "rebuild_seconds": rebuild, "snapshot_bytes": snapshot_bytes,
                                         "fresh_seconds": fresh, "closed_index_bytes": at_rest}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
