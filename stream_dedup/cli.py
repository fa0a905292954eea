"""``stream-dedup`` command line: ``dedup`` (embedded, no Kafka), ``worker`` (Kafka), ``tune``, ``config``.

Every engine/service setting is a flag here and an environment variable (see
:mod:`stream_dedup.config`); flags win over the environment.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import stat
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, NoReturn

# numpy loads OpenBLAS, which starts a thread per core when it loads (0.04 s of wall and 0.15 s of CPU
# of every start on 2 cores, measured); the engine does no linear algebra, so one thread is enough.
# Set before anything imports numpy; a value in the environment wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from . import __version__  # noqa: E402 - after the setting above
from .config import (  # noqa: E402
    KAFKA_CLIENT_FIELDS,
    EngineConfig,
    ServiceConfig,
    add_arguments,
    env_name,
    load,
    markdown_table,
    redacted,
)
from .engine import Deduplicator, lsh_params  # noqa: E402
from .lsh import candidate_probability, optimal_params  # noqa: E402
from .record import PROCESSING_ERROR, Article, RecordError, parse_record  # noqa: E402

log = logging.getLogger("stream_dedup")


class RunError(Exception):
    """A run that cannot start or go on (e.g. an output that cannot be opened): one line, exit 1."""


class UsageError(Exception):
    """A mistake in the command line (a bad path or value): one line on stderr, exit 2."""


class Interrupted(Exception):
    """Raised by the signal handler when no record is in hand (the run stops at once)."""


@dataclass
class Summary:
    lines: int = 0
    blank: int = 0
    new: int = 0
    duplicates: int = 0
    repeated_ids: int = 0
    rejects: Counter = field(default_factory=Counter)
    by_method: Counter = field(default_factory=Counter)
    seconds: float = 0.0
    skipped: int = 0                  # lines before the resume point (--resume)
    last_line: int = 0                # the last input line finished
    interrupted: str | None = None    # the signal that stopped the run
    kernel_seconds: float = 0.0       # loading (first time: compiling) the kernels, before the clock starts
    clusters: Counter = field(default_factory=Counter)    # root id -> duplicates of it in this run
    titles: dict = field(default_factory=dict)            # root id -> title (bounded)
    similarities: list = field(default_factory=list)      # Jaccard of each duplicate (bounded)

    @property
    def records(self) -> int:
        return self.new + self.duplicates

    @property
    def handled(self) -> int:
        return self.records + sum(self.rejects.values())

    def as_dict(self) -> dict:
        return {"lines": self.lines, "records": self.records, "new": self.new, "duplicates": self.duplicates,
                "repeated_ids": self.repeated_ids, "rejects": sum(self.rejects.values()),
                "rejects_by_reason": dict(self.rejects), "duplicates_by_method": dict(self.by_method),
                "blank_lines": self.blank, "seconds": round(self.seconds, 3),
                "records_per_second": round(self.lines / self.seconds, 1) if self.seconds else None,
                "skipped_lines": self.skipped, "last_line": self.last_line,
                "interrupted": self.interrupted is not None,
                "top_clusters": [{"id": k, "duplicates": n, "title": self.titles.get(k)}
                                 for k, n in self.top_clusters(10)]}

    def top_clusters(self, n: int) -> list[tuple[str, int]]:
        return sorted(self.clusters.items(), key=lambda kv: (-kv[1], kv[0]))[:n]

    def text(self, top: int = 5) -> str:
        """The summary printed at the end of a run: a small table, then the largest clusters."""
        d = self.as_dict()
        reasons = ", ".join(f"{k} {v:,}" for k, v in sorted(self.rejects.items()))
        methods = ", ".join(f"{k} {v:,}" for k, v in sorted(self.by_method.items(), key=lambda kv: -kv[1]))
        rate = f"{d['records_per_second'] or 0:,.0f} records/s"
        rows = [("lines", f"{d['lines']:,}" + (f" (after {self.skipped:,} done before: resumed)" if self.skipped else "")),
                ("new", f"{d['new']:,}"),
                ("duplicates", f"{d['duplicates']:,}" + (f" ({methods})" if methods else "")),
                ("repeated ids", f"{d['repeated_ids']:,} (ids seen before: their first decision again)"),
                ("rejects", f"{d['rejects']:,}" + (f" ({reasons})" if reasons else "")),
                ("blank lines", f"{d['blank_lines']:,}"),
                ("time", f"{d['seconds']:.1f} s, {rate}" + (f" (after {self.kernel_seconds:.1f} s loading the "
                                                                  f"compiled kernels)" if self.kernel_seconds >= 0.05
                                                                 else ""))]
        width = max(len(k) for k, _ in rows)
        out = [f"  {k:<{width}}  {v}" for k, v in rows]
        clusters = self.top_clusters(top)
        if clusters:
            out.append("  largest clusters (duplicates in this run, first article, title):")
            for root, n in clusters:
                title = self.titles.get(root) or ""
                title = title if len(title) <= 60 else title[:59] + "…"
                out.append(f"  {n:>6,}  {root}  {title}")
        return "\n".join(out)


#: titles kept for the cluster table and similarities kept for the report (memory bound on huge inputs)
MAX_TITLES = 200_000
MAX_SIMILARITIES = 1_000_000
#: bytes of a rejected line copied into its reject record (all of it with --rejects-full-record)
REJECT_SAMPLE_BYTES = 512
BATCH_RECORDS = 256  # records decided at once by `dedup` (Deduplicator.process_batch), input from a file


class Progress:
    """A tqdm progress bar on stderr (bytes read, rate, ETA); off when stderr is no terminal or with -q."""

    def __init__(self, total_bytes: int | None, enabled: bool, initial: int = 0) -> None:
        self.bar = None
        self.pending = 0
        if enabled:
            from tqdm import tqdm

            # the size as the terminal reports it; one that reports 0 x 0 (a fresh pty) counts as 80 x 24
            size = shutil.get_terminal_size((80, 24))
            self.bar = tqdm(total=total_bytes, initial=initial, unit="B", unit_scale=True, unit_divisor=1024,
                            file=sys.stderr, ncols=size.columns, nrows=size.lines, mininterval=0.2,
                            leave=False, desc="stream-dedup")

    def update(self, summary: Summary, nbytes: int) -> None:
        if self.bar is None:
            return
        self.pending += nbytes
        if summary.lines % 64 == 0:
            self.bar.update(self.pending)
            self.pending = 0
            dup = summary.duplicates / summary.records if summary.records else 0.0
            self.bar.set_postfix_str(f"{summary.lines:,} lines, duplicates {dup:.1%}, "
                                     f"rejects {sum(summary.rejects.values()):,}", refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.update(self.pending)
            self.bar.close()


def rss_bytes() -> int:
    """Resident set size of this process now (Linux /proc; elsewhere the peak)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class StatsLines:
    """``--stats-every N``: one JSON line on stderr per N input lines, for benchmarks and monitoring.

    Fields: ``lines`` and ``seconds`` so far, ``chunk_records_per_second`` over the last chunk,
    ``cpu_seconds`` of the process since the clock started (RocksDB's compaction threads included), ``rss_bytes``, ``index_articles``, ``index_bytes`` (on disk), ``memory_budget_bytes``,
    ``block_cache_usage_bytes`` and ``block_cache_hit_rate`` over the chunk.
    """

    def __init__(self, dedup: Deduplicator, t0: float) -> None:
        self.dedup = dedup
        self.last = (t0, 0, 0, 0)  # time, lines, cache hits, cache misses
        self.t0 = t0
        self.cpu0 = sum(os.times()[:2])

    def emit(self, summary: Summary) -> None:
        now = time.perf_counter()
        t, lines, hits, misses = self.last
        mem = self.dedup.memory_stats()
        dh, dm = mem["block_cache_hits"] - hits, mem["block_cache_misses"] - misses
        line = {"stats": "chunk", "lines": summary.lines, "seconds": round(now - self.t0, 3),
                "chunk_records_per_second": round((summary.lines - lines) / max(now - t, 1e-9), 1),
                "cpu_seconds": round(sum(os.times()[:2]) - self.cpu0, 2),
                "rss_bytes": rss_bytes(), "index_articles": len(self.dedup), "index_bytes": self.dedup.disk_bytes(),
                "memory_budget_bytes": mem["memory_budget_bytes"],
                "block_cache_usage_bytes": mem["block_cache_usage_bytes"],
                "block_cache_hit_rate": round(dh / (dh + dm), 4) if dh + dm else None}
        print(json.dumps(line), file=sys.stderr, flush=True)
        self.last = (time.perf_counter(), summary.lines, mem["block_cache_hits"], mem["block_cache_misses"])


def _check_writable(flag: str, path_text: str) -> Path:
    """Refuse an output path that cannot be written, before anything is opened or truncated."""
    path = Path(path_text)
    if path.is_dir():
        raise UsageError(f"{flag} {path_text}: is a directory, not a file")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"{flag} {path_text}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UsageError(f"{flag} {path_text}: not writable")
    return path


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


class _Signals:
    """SIGINT/SIGTERM: finish the record in hand, then stop (raise at once when none is in hand)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.busy = False
        self._old: dict[int, object] = {}

    def _handle(self, signum: int, _frame: object) -> None:
        if self.received is None:
            self.received = signum
        if not self.busy:
            raise Interrupted()

    def __enter__(self) -> _Signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def _quietly_closed(stack: ExitStack, fh: IO[str]) -> IO[str]:
    """Close ``fh`` when ``stack`` unwinds, ignoring errors: a run that ends normally closes its outputs
    itself first (so a failed last write is reported), and one that failed has reported already."""

    def close() -> None:
        try:
            fh.close()
        except OSError:
            pass

    stack.callback(close)
    return fh


def _store_checkpoint(dedup: Deduplicator, name: str, offset: int) -> None:
    """Record how far the input was handled (rejected and blank lines after the last article too)."""
    index = dedup.index
    if hasattr(index, "mark"):
        index.mark((name, offset))
    else:
        index.set_checkpoint(name, offset)


def _checkpoint_name(input_arg: str) -> str:
    return "dedup-line:" + ("-" if input_arg == "-" else str(Path(input_arg).resolve()))


def run_dedup(args: argparse.Namespace) -> int:
    # 1. validate everything: settings, input, state and every output path, before opening any output
    config = load(EngineConfig, args)
    if args.max_reject_rate is not None and not 0.0 <= args.max_reject_rate <= 1.0:
        raise UsageError(f"--max-reject-rate {args.max_reject_rate}: must be within [0, 1]")
    if args.input != "-":
        path = Path(args.input)
        if not path.is_file():
            raise UsageError(f"no such input file: {path}")
        if not os.access(path, os.R_OK):
            raise UsageError(f"input file {path} is not readable")
    state_arg = args.state or os.environ.get("STREAM_DEDUP_STATE") or None
    if args.resume and not state_arg:
        raise UsageError("--resume needs --state DIR (the state of the interrupted run)")
    if state_arg:
        state_path = Path(state_arg)
        if state_path.exists() and not state_path.is_dir():
            raise UsageError(f"--state {state_arg}: is a file, not a directory")
        if not state_path.exists() and not state_path.parent.is_dir():
            raise UsageError(f"--state {state_arg}: directory {state_path.parent} does not exist")
    outputs = {"--out": args.out if args.out != "-" else None, "--rejects": None,
               "--summary-json": args.summary_json, "--report": args.report}
    rejects_path = args.rejects or (f"{args.out}.rejects.jsonl" if args.out != "-" else "rejects.jsonl")
    outputs["--rejects"] = rejects_path
    for flag, value in outputs.items():
        if value is None:
            continue
        _check_writable(flag, value)
        if args.input != "-" and _same_file(value, args.input):
            raise UsageError(f"{flag} {value}: is the input file")
    if args.stats_every < 0:
        raise UsageError(f"--stats-every {args.stats_every}: must be >= 0")
    if args.report and not args.report.endswith((".html", ".htm", ".png")):
        raise UsageError(f"--report {args.report}: give a .html or .png file name")

    summary = Summary()
    with ExitStack() as stack:
        if state_arg:
            state_dir = state_arg
            state_note = f"{state_arg} (kept; a later run with --state {state_arg} remembers these articles)"
        else:
            state_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="stream-dedup-state-"))
            state_note = "temporary, deleted at exit (--state DIR keeps the index for later runs)"
        # 2. the state: refuses here (ValueError) when it was built with other settings; nothing written yet
        try:
            dedup = Deduplicator(config, state_dir)
        except ValueError:
            raise
        except Exception as exc:  # noqa: BLE001 - RocksDB reports e.g. a held lock or a bad directory
            raise RunError(f"cannot open the state in {state_dir}: {exc}") from None
        # a temporary state is deleted next: when the process ends next too, it is not closed (see main)
        leave_open = not state_arg and getattr(args, "process_ends", False)
        stack.push(lambda exc_type, *_: _release_state(dedup, leave_open and exc_type is None))
        ckpt = _checkpoint_name(args.input)
        start_after = (dedup.index.checkpoint(ckpt) or 0) if args.resume else 0
        if args.resume and not args.quiet:
            print(f"stream-dedup dedup: resuming after input line {start_after:,}" if start_after else
                  f"stream-dedup dedup: no checkpoint for {args.input} in {state_arg}: starting at line 1",
                  file=sys.stderr)
        # 3. outputs: appended to when resuming, else written afresh
        mode = "a" if args.resume else "w"
        try:
            if args.input == "-":
                source: IO[bytes] = sys.stdin.buffer
                total = None
            else:
                source = stack.enter_context(open(args.input, "rb"))  # noqa: SIM115
                total = os.fstat(source.fileno()).st_size
            out: IO[str] = sys.stdout if args.out == "-" else _quietly_closed(
                stack, open(args.out, mode, encoding="utf-8"))  # noqa: SIM115
        except OSError as exc:
            raise RunError(f"cannot open {exc.filename}: {exc.strerror}") from None
        rejects: IO[str] | None = None
        progress = Progress(total, enabled=not args.quiet and sys.stderr.isatty())
        stack.callback(progress.close)
        signals = stack.enter_context(_Signals())
        # load (on a new install: compile) the numba kernels before the clock starts, and say how long it took
        t_load = time.perf_counter()
        dedup.fingerprint(Article(id="warm-up", text="stream-dedup loads its compiled kernels once per process"))
        summary.kernel_seconds = time.perf_counter() - t_load
        t0 = time.perf_counter()
        stats = StatsLines(dedup, t0) if args.stats_every else None
        lineno = 0
        out_name = "stdout" if args.out == "-" else args.out
        target = out_name  # the file written last, named if writing fails
        # a batch of records is decided at once (one index write); a pipe or terminal is read one record
        # at a time, so that each event is written as soon as its record arrives
        batch_size = BATCH_RECORDS if _is_file(source) else 1
        pending: list[tuple[int, int, bytes, Article | None, Exception | None]] = []  # lines read, not yet handled

        def handle_pending() -> None:
            """Decide the pending records in one batch, then write their events and rejects and
            count their lines in input order, as if one at a time."""
            nonlocal rejects, target, lineno
            articles = [art for _, _, _, art, _ in pending if art is not None]
            results = iter(_decide_batch(dedup, articles, [(ckpt, n) for n, _, _, art, _ in pending if art is not None]))
            for lineno, nbytes, raw, article, error in pending:  # noqa: B007 - lineno: the line written last
                summary.lines += 1
                if not raw.strip():
                    summary.blank += 1
                else:
                    try:
                        if error is not None:
                            raise error
                        decision = next(results)
                        if isinstance(decision, Exception):  # one record must never end the run
                            # one line (the reject record has the details); the traceback with STREAM_DEDUP_LOG_LEVEL=DEBUG
                            exc = decision
                            log.warning("line %d: processing failed: %s: %s", lineno, type(exc).__name__, exc)
                            log.debug("line %d: processing failed", lineno, exc_info=exc)
                            raise RecordError(PROCESSING_ERROR, f"{type(exc).__name__}: {exc}") from exc
                        event = json.dumps(decision.to_event(), ensure_ascii=False)
                    except (RecordError, UnicodeEncodeError) as err:
                        reason = err.reason if isinstance(err, RecordError) else PROCESSING_ERROR
                        summary.rejects[reason] += 1
                        target = rejects_path
                        if rejects is None:
                            rejects = _quietly_closed(stack, open(rejects_path, mode, encoding="utf-8"))  # noqa: SIM115
                        keep = len(raw) if args.rejects_full_record else REJECT_SAMPLE_BYTES
                        sample = raw[:keep].decode("utf-8", "backslashreplace")
                        rejects.write(json.dumps({"line": lineno, "reason": reason, "error": str(err)[:500],
                                                  "record": sample, "truncated": len(raw) > keep},
                                                 ensure_ascii=True) + "\n")
                    else:
                        _count(summary, article, decision)
                        target = out_name
                        out.write(event + "\n")
                summary.last_line = lineno
                progress.update(summary, nbytes)
                if stats is not None and summary.lines % args.stats_every == 0:
                    stats.emit(summary)
            pending.clear()

        try:
            try:
                for lineno, raw in enumerate(source, 1):  # noqa: B007 - lineno is the resume point after the loop
                    if lineno <= start_after:
                        summary.skipped += 1
                        progress.update(summary, len(raw))
                        continue
                    signals.busy = True  # until the batch is handled: a signal stops the run after it
                    nbytes = len(raw)
                    raw = raw.rstrip(b"\r\n")
                    article, error = None, None
                    if raw.strip():
                        try:
                            article = parse_record(raw, config)
                        except (RecordError, UnicodeEncodeError) as err:
                            error = err
                    pending.append((lineno, nbytes, raw, article, error))
                    read = summary.lines + len(pending)
                    if len(pending) < batch_size and not (args.stats_every and read % args.stats_every == 0):
                        continue
                    handle_pending()
                    signals.busy = False
                    if signals.received is not None:
                        raise Interrupted()
                handle_pending()  # the last, partial batch
            except Interrupted:
                summary.interrupted = signal.Signals(signals.received or signal.SIGINT).name
            signals.busy = True  # from here on a signal only takes note: the outputs and state must be flushed
            summary.last_line = max(summary.last_line, start_after)
            summary.seconds = time.perf_counter() - t0
            # flush outputs first, then record in the state how far the input was handled
            target = out_name
            out.flush()
            if out is not sys.stdout:
                out.close()  # a file's last write can fail only here (e.g. a full disk)
            if rejects is not None:
                target = rejects_path
                rejects.close()
        except BrokenPipeError:
            raise
        except OSError as exc:  # a full disk, an I/O error: one line, and the run stops
            raise RunError(f"cannot write {exc.filename or target}: {exc.strerror or exc} (at input line "
                           f"{lineno:,}; that output is incomplete)") from None
        if stats is not None and summary.lines % args.stats_every:
            stats.emit(summary)  # the last, partial chunk
        _store_checkpoint(dedup, ckpt, summary.last_line)
    # the state is closed (and a temporary one deleted) here
    code = 0
    problem = None
    handled = summary.handled
    if summary.interrupted:
        code = 128 + int(signal.Signals[summary.interrupted])
    elif handled and not summary.records:
        code, problem = 1, f"no record could be processed: all {handled:,} were rejected"
    elif (args.max_reject_rate is not None and handled
          and sum(summary.rejects.values()) / handled > args.max_reject_rate):
        code, problem = 1, (f"{sum(summary.rejects.values()) / handled:.1%} of the records were rejected, "
                            f"over --max-reject-rate {args.max_reject_rate}")
    if not args.quiet or code:
        name = "stdin" if args.input == "-" else args.input
        print(f"stream-dedup dedup: {name} -> {'stdout' if args.out == '-' else args.out}", file=sys.stderr)
        print(summary.text(), file=sys.stderr)
        print(f"  state       {state_note}", file=sys.stderr)
        if summary.rejects:
            print(f"  rejected records written to {rejects_path}", file=sys.stderr)
        if summary.interrupted:
            how = (f"rerun with --resume --state {state_arg} to continue" if state_arg else
                   "the state was temporary: rerun with --state DIR to be able to resume")
            print(f"stream-dedup dedup: interrupted ({summary.interrupted}) at record {handled + summary.skipped:,}"
                  f" (input line {summary.last_line:,}): {how}", file=sys.stderr)
        if problem:
            print(f"stream-dedup dedup: {problem}", file=sys.stderr)
    if args.summary_json:
        Path(args.summary_json).write_text(json.dumps(summary.as_dict(), indent=2) + "\n")
    if args.report:
        write_report(args.report, summary, args.input)
        if not args.quiet:
            print(f"  report written to {args.report}", file=sys.stderr)
    return code


#: temporary indexes of finished runs, deleted but not closed, until the process ends (see :func:`main`)
_LEFT_OPEN: list[Deduplicator] = []


def _release_state(dedup: Deduplicator, leave_open: bool) -> None:
    """Close the index at the end of a run or, for a temporary state when the process ends next
    (``leave_open``), only stop its background work and keep it: closing flushes the memtables to
    SST files, ~0.07 s with the default 2 GB budget however little they hold (their hash tables are
    that size), for a directory deleted right after."""
    if leave_open:
        dedup.index.db.cancel_all_background(True)   # no flush or compaction writes into the directory
        _LEFT_OPEN.append(dedup)
    else:
        dedup.close()


def _end_process(code: int) -> NoReturn:
    """End the process with ``code`` without closing the indexes in ``_LEFT_OPEN`` (Python's own exit
    would drop them, and dropping flushes them); output streams and log handlers are flushed first."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    logging.shutdown()
    os._exit(code)


def _is_file(source: IO[bytes]) -> bool:
    """Whether ``source`` reads a regular file (a redirected stdin too), not a pipe or terminal."""
    try:
        return stat.S_ISREG(os.fstat(source.fileno()).st_mode)
    except (OSError, ValueError, AttributeError):  # no file descriptor (e.g. a test's stdin)
        return False


def _decide_batch(dedup: Deduplicator, articles: list[Article],
                  checkpoints: list[tuple[str, int]]) -> list[object]:
    """Their decisions in one batch; if the batch raises (it then writes nothing), one at a time,
    so that a failing record gets its exception in place of a decision and the others are decided."""
    if not articles:
        return []
    try:
        return dedup.process_batch(articles, checkpoints=checkpoints)
    except Exception as exc:  # noqa: BLE001 - reported per record by the caller
        if len(articles) == 1:
            return [exc]
    out: list[object] = []
    for article, checkpoint in zip(articles, checkpoints, strict=True):
        try:
            out.append(dedup.process(article, checkpoint=checkpoint))
        except Exception as exc:  # noqa: BLE001
            out.append(exc)
    return out


def _count(summary: Summary, article: object, decision: object) -> None:
    if decision.seen_before:
        summary.repeated_ids += 1
    if decision.is_duplicate:
        summary.duplicates += 1
        summary.by_method[decision.method] += 1
        summary.clusters[decision.duplicate_of] += 1
        if len(summary.similarities) < MAX_SIMILARITIES and decision.similarity is not None:
            summary.similarities.append(decision.similarity)
    else:
        summary.new += 1
        if article.title and len(summary.titles) < MAX_TITLES:
            summary.titles[article.id] = article.title


def write_report(path: str, summary: Summary, source: str) -> None:
    """A picture of the run: cluster sizes and the similarity of duplicates (PNG, or HTML with the tables)."""
    import base64
    import html
    import io

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RunError("--report needs matplotlib (pip install 'stream-dedup[plot]')") from None
    sizes = Counter(n + 1 for n in summary.clusters.values())   # articles per cluster (first + duplicates)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), dpi=100)
    if sizes:
        xs = sorted(sizes)
        left.bar(xs, [sizes[x] for x in xs], color="tab:blue")
    left.set_xlabel("articles in the cluster (first + duplicates)")
    left.set_ylabel("clusters")
    left.set_title("cluster sizes")
    right.hist(summary.similarities, bins=[i / 40 for i in range(41)], color="tab:orange")
    right.set_xlabel("estimated Jaccard with the matched article")
    right.set_ylabel("duplicates")
    right.set_title("similarity of duplicates")
    for ax in (left, right):
        ax.grid(alpha=0.3)
    fig.suptitle(f"stream-dedup: {source} ({summary.records:,} records, {summary.duplicates:,} duplicates)")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    if path.lower().endswith(".png"):
        Path(path).write_bytes(buf.getvalue())
        return
    d = summary.as_dict()
    rows = [("lines", d["lines"]), ("records", d["records"]), ("new", d["new"]), ("duplicates", d["duplicates"]),
            *((f"duplicates by {m}", n) for m, n in sorted(summary.by_method.items(), key=lambda kv: -kv[1])),
            ("repeated ids", d["repeated_ids"]), ("rejects", d["rejects"]), ("blank lines", d["blank_lines"]),
            ("seconds", d["seconds"]), ("records/s", d["records_per_second"])]
    table = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{v}</td></tr>" for k, v in rows)
    top = "".join(f"<tr><td>{n + 1}</td><td>{html.escape(root)}</td><td>{html.escape(summary.titles.get(root) or '')}"
                  f"</td></tr>" for root, n in summary.top_clusters(20))
    image = base64.b64encode(buf.getvalue()).decode()
    Path(path).write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>stream-dedup report</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}</style></head><body>"
        f"<h1>stream-dedup: {html.escape(source)}</h1><table>{table}</table>"
        f"<img alt='cluster sizes and similarity histogram' src='data:image/png;base64,{image}'>"
        "<h2>largest clusters</h2><table><tr><th>articles</th><th>first article</th><th>title</th></tr>"
        f"{top}</table></body></html>\n", encoding="utf-8")


def run_tune(args: argparse.Namespace) -> int:
    if args.num_perm < 1:
        raise UsageError(f"--num-perm {args.num_perm}: must be at least 1")
    if not 0.0 < args.threshold < 1.0:
        raise UsageError(f"--threshold {args.threshold}: must be between 0 and 1 (exclusive)")
    if args.fp_weight < 0 or args.fn_weight < 0 or args.fp_weight + args.fn_weight <= 0:
        raise UsageError("--fp-weight and --fn-weight must be >= 0, and not both 0")
    if args.bands < 0 or args.rows < 0:
        raise UsageError("--bands and --rows must be positive")
    if args.plot:
        _check_writable("--plot", args.plot)
        if not args.plot.lower().endswith(".png"):
            raise UsageError(f"--plot {args.plot}: give a .png file name")
    if args.bands or args.rows:
        if not (args.bands and args.rows):
            raise UsageError("give both --bands and --rows, or neither")
        config = EngineConfig(num_perm=max(args.num_perm, 8), lsh_threshold=args.threshold,
                              lsh_bands=args.bands, lsh_rows=args.rows)
        if args.bands * args.rows > args.num_perm:
            raise ValueError("invalid engine configuration: lsh_bands * lsh_rows must be <= num_perm")
        params = lsh_params(config)
    else:
        params = optimal_params(args.threshold, args.num_perm, args.fp_weight, args.fn_weight)
    print(f"threshold {args.threshold}  num_perm {args.num_perm}  ->  bands b = {params.bands}, rows r = {params.rows} "
          f"(uses {params.bands * params.rows} of {args.num_perm} permutations)")
    print(f"S-curve P(candidate | s) = 1 - (1 - s^{params.rows})^{params.bands}; steepest near s = {params.inflection:.3f}")
    print(f"false-positive area {params.false_positive_area:.4f}, false-negative area {params.false_negative_area:.4f}")
    print("| similarity | P(candidate) |")
    print("| --- | --- |")
    for s in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95):
        print(f"| {s:.2f} | {float(candidate_probability(s, params.bands, params.rows)):.4f} |")
    if args.plot:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            import numpy as np
        except ImportError:
            raise RunError("--plot needs matplotlib (pip install 'stream-dedup[plot]')") from None
        s = np.linspace(0, 1, 501)
        fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
        ax.plot(s, candidate_probability(s, params.bands, params.rows), lw=2,
                label=f"b={params.bands}, r={params.rows}")
        ax.axvline(args.threshold, color="tab:red", ls="--", label=f"threshold {args.threshold}")
        ax.fill_between(s, 0, candidate_probability(s, params.bands, params.rows), where=s <= args.threshold,
                        color="tab:red", alpha=0.15, label="false-positive area")
        ax.fill_between(s, candidate_probability(s, params.bands, params.rows), 1, where=s >= args.threshold,
                        color="tab:orange", alpha=0.15, label="false-negative area")
        ax.set_xlabel("Jaccard similarity s")
        ax.set_ylabel("P(candidate)")
        ax.set_title(f"LSH S-curve 1 - (1 - s^{params.rows})^{params.bands}  (num_perm={args.num_perm})")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right")
        fig.tight_layout()
        fig.savefig(args.plot)
        plt.close(fig)
        print(f"plot written to {args.plot}")
    return 0


def run_config(args: argparse.Namespace) -> int:
    if args.markdown:
        print(markdown_table())
        return 0
    print(json.dumps({"engine": redacted(load(EngineConfig, args)), "service": redacted(load(ServiceConfig, args))},
                     indent=2, default=str))
    return 0


def _quiet_logger() -> logging.Logger:
    """A logger that drops librdkafka's per-retry connection lines (we print one line of our own)."""
    quiet = logging.getLogger("stream_dedup.kafka.connect")
    quiet.propagate = False
    quiet.setLevel(logging.CRITICAL + 1)
    return quiet


def _kafka_admin(service: ServiceConfig, timeout: float):
    """An AdminClient checked to reach the brokers within ``timeout`` seconds (else one line, exit 1)."""
    import confluent_kafka
    from confluent_kafka.admin import AdminClient

    from .service.kafka_config import confluent_config

    if timeout <= 0:
        raise UsageError(f"--connect-timeout {timeout}: must be > 0")
    conf = confluent_config(service, **{"socket.connection.setup.timeout.ms": max(1000, int(timeout * 1000)),
                                        "log.connection.close": False})
    conf["logger"] = _quiet_logger()
    admin = AdminClient(conf)
    try:
        admin.list_topics(timeout=timeout)
    except confluent_kafka.KafkaException as err:
        raise RunError(f"cannot reach the Kafka broker at {service.bootstrap_servers} within {timeout:g} s "
                       f"({err.args[0].str() if err.args else err}); is it running? Set --bootstrap-servers "
                       f"or KAFKA_BOOTSTRAP_SERVERS") from None
    return admin


def _kafka_client(kind: str, service: ServiceConfig, **extra: object):
    """A confluent-kafka client whose logs go through Python logging (call after :func:`_kafka_admin`)."""
    import confluent_kafka

    from .service.kafka_config import confluent_config

    conf = confluent_config(service, **extra)
    conf["logger"] = logging.getLogger("stream_dedup.kafka")
    return getattr(confluent_kafka, kind)(conf)


def _ensure_topic(admin, topic: str, partitions: int | None, timeout: float) -> str:
    """Create ``topic`` with ``partitions`` (default 1) unless it exists; say what was done."""
    import confluent_kafka
    from confluent_kafka.admin import NewTopic

    meta = admin.list_topics(timeout=timeout)
    if topic in meta.topics and not meta.topics[topic].error:
        have = len(meta.topics[topic].partitions)
        note = f" (--partitions {partitions} ignored: an existing topic is left as it is)" \
            if partitions and partitions != have else ""
        return f"topic {topic} exists with {have} partition{'s' * (have != 1)}{note}"
    want = partitions or 1
    future = admin.create_topics([NewTopic(topic, num_partitions=want, replication_factor=-1)],
                                 operation_timeout=timeout, request_timeout=max(timeout, 10))[topic]
    try:
        future.result(timeout=max(timeout, 10) + 5)
    except confluent_kafka.KafkaException as err:
        kerr = err.args[0] if err.args else None
        if kerr is not None and kerr.code() == confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS:
            return f"topic {topic} exists (created concurrently)"
        raise RunError(f"cannot create topic {topic}: {kerr.str() if kerr is not None else err}") from None
    return f"created topic {topic} with {want} partition{'s' * (want != 1)}"


def run_produce(args: argparse.Namespace) -> int:
    """Send a JSONL file to a topic, one message per line (bad lines too: they test the DLQ)."""
    service = load(ServiceConfig, args)
    topic = args.topic or service.input_topic
    if args.partitions is not None and args.partitions < 1:
        raise UsageError(f"--partitions {args.partitions}: must be at least 1")
    if args.rate < 0 or args.limit < 0:
        raise UsageError("--rate and --limit must be >= 0")
    if args.input != "-" and not Path(args.input).is_file():
        raise UsageError(f"no such input file: {args.input}")
    admin = _kafka_admin(service, args.connect_timeout)
    print(f"stream-dedup produce: {_ensure_topic(admin, topic, args.partitions, args.connect_timeout)}",
          file=sys.stderr)
    producer = _kafka_client("Producer", service, **{"linger.ms": 5, "enable.idempotence": True})
    failures: list[str] = []

    def delivered(err, _msg) -> None:
        if err is not None:
            failures.append(str(err))

    source = sys.stdin.buffer if args.input == "-" else open(args.input, "rb")  # noqa: SIM115
    sent = 0
    interval = 1.0 / args.rate if args.rate else 0.0
    next_at = time.monotonic()
    with source:
        for raw in source:
            raw = raw.rstrip(b"\r\n")
            if not raw.strip():
                continue
            key = None
            try:
                key = str(json.loads(raw)[args.key_field]).encode()
            except (ValueError, KeyError, TypeError, IndexError):
                pass
            while True:
                try:
                    producer.produce(topic, value=raw, key=key, on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
            sent += 1
            if args.limit and sent >= args.limit:
                break
            if interval:
                next_at += interval
                time.sleep(max(0.0, next_at - time.monotonic()))
    producer.flush(60)
    print(f"produced {sent} messages to {topic}" + (f", {len(failures)} failed: {failures[0]}" if failures else ""),
          file=sys.stderr)
    return 1 if failures else 0


def run_tail(args: argparse.Namespace) -> int:
    """Print the messages of the output topics as JSON lines (value parsed when it is JSON)."""
    import uuid

    service = load(ServiceConfig, args)
    topics = args.topics or [service.new_topic, service.duplicates_topic, service.dlq_topic]
    _kafka_admin(service, args.connect_timeout)
    consumer = _kafka_client("Consumer", service, **{
        "group.id": f"stream-dedup-tail-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
        "auto.offset.reset": "earliest" if args.from_beginning else "latest"})
    consumer.subscribe(topics)
    seen = 0
    idle_since = time.monotonic()
    try:
        while not args.max_messages or seen < args.max_messages:
            msg = consumer.poll(0.5)
            if msg is None:
                if args.idle_timeout and time.monotonic() - idle_since > args.idle_timeout:
                    break
                continue
            if msg.error():
                print(f"stream-dedup tail: {msg.error()}", file=sys.stderr)
                continue
            idle_since = time.monotonic()
            value: object = msg.value()
            try:
                value = json.loads(msg.value())
            except (ValueError, TypeError):
                value = msg.value().decode("utf-8", "backslashreplace")
            headers = {k: v.decode("utf-8", "backslashreplace") for k, v in (msg.headers() or [])}
            print(json.dumps({"topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset(),
                              "key": (msg.key() or b"").decode("utf-8", "backslashreplace"),
                              "headers": headers, "value": value}, ensure_ascii=False), flush=True)
            seen += 1
    finally:
        consumer.close()
    return 0


def run_worker_command(args: argparse.Namespace) -> int:
    from .service import run_worker  # imports faust only when the worker runs

    return run_worker(load(ServiceConfig, args), load(EngineConfig, args))


def run_explain(args: argparse.Namespace) -> int:
    """``stream-dedup explain A.json B.json``: the decision on B after A, and every measure of the pair."""
    from .explain import explain

    config = load(EngineConfig, args)
    articles = []
    for path in (args.earlier, args.new):
        try:
            raw = Path(path).read_bytes().strip()
        except OSError as err:
            raise UsageError(f"{path}: {err.strerror or err}") from None
        try:
            articles.append(parse_record(raw, config))
        except RecordError as err:
            try:  # a JSONL file: its first record
                articles.append(parse_record(raw.splitlines()[0] if raw else raw, config))
            except RecordError:
                raise UsageError(f"{path}: {err}") from None
    if articles[0].id == articles[1].id:
        raise UsageError("both records have the id " + repr(articles[0].id) + ": give them different ids")
    print(json.dumps(explain(config, *articles), indent=2, ensure_ascii=False))
    return 0


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser. With ``command``, only that subcommand gets its arguments (the others are
    listed, without theirs): adding all ~250 of them took 0.02 s of every start."""
    parser = argparse.ArgumentParser(prog="stream-dedup", description="Streaming near-duplicate detection for text.")
    parser.add_argument("--version", action="version", version=f"stream-dedup {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("dedup", help="decide new / duplicate-of for every record of a JSONL file (no Kafka)",
                       description="Decide new / duplicate-of for every record of a JSONL file, in input order, "
                                   "without Kafka. Exit status: 0 done, 1 no record could be processed (or over "
                                   "--max-reject-rate), 2 usage error, 130/143 interrupted by SIGINT/SIGTERM "
                                   "(rerun with --resume), 141 output pipe closed.")
    if command in (None, "dedup"):
        p.add_argument("input", help="input JSONL file, or - for stdin")
        p.add_argument("--out", default="-", help="output JSONL of events, in input order (default: - = stdout)")
        p.add_argument("--state", default=None,
                       help="index directory (RocksDB), kept and reused across runs; default: a temporary directory "
                            "deleted at exit [env STREAM_DEDUP_STATE]")
        p.add_argument("--resume", action="store_true",
                       help="continue an interrupted run: skip the input lines the --state already handled and "
                            "append to --out and the rejects file")
        p.add_argument("--rejects", help="where rejected records go (default: OUT.rejects.jsonl, or rejects.jsonl)")
        p.add_argument("--rejects-full-record", action="store_true",
                       help=f"copy the whole rejected line into its reject record (default: the first "
                            f"{REJECT_SAMPLE_BYTES} bytes)")
        p.add_argument("--max-reject-rate", type=float, default=None, metavar="RATE",
                       help="exit 1 when more than this share (0-1) of the records is rejected (default: only when "
                            "all are)")
        p.add_argument("--summary-json", metavar="FILE", help="also write the summary as JSON to this file")
        p.add_argument("--report", metavar="FILE",
                       help="write a picture of the run: cluster sizes and the similarity of duplicates "
                            "(FILE.png, or FILE.html with the summary table)")
        p.add_argument("-q", "--quiet", action="store_true",
                       help="no progress bar and no summary (errors are still printed)")
        p.add_argument("--stats-every", type=int, default=0, metavar="N",
                       help="print a JSON line of statistics to stderr every N input lines: records/s over those "
                            "lines, RSS, index size, memory budget, block cache usage and hit rate (default: never)")
        add_arguments(p, EngineConfig)
        p.set_defaults(func=run_dedup)

    p = sub.add_parser("worker", help="run the Kafka stream processor (Faust)")
    if command in (None, "worker"):
        add_arguments(p, ServiceConfig)
        add_arguments(p, EngineConfig)
        p.set_defaults(func=run_worker_command)

    p = sub.add_parser("produce", help="send a JSONL file to a Kafka topic (one message per line)",
                       description="Send a JSONL file to a Kafka topic, one message per line (bad lines too, "
                                   "to watch them reach the DLQ). Creates the topic when it does not exist.")
    if command in (None, "produce"):
        p.add_argument("input", help="JSONL file, or - for stdin")
        p.add_argument("--topic", help="topic (default: the input topic, --input-topic)")
        p.add_argument("--input-topic", dest="input_topic", default=None, metavar="INPUT_TOPIC",
                       help="the worker's input topic, used when --topic is not given [env STREAM_DEDUP_INPUT_TOPIC] "
                            "(default: 'articles')")
        p.add_argument("--partitions", type=int, default=None,
                       help="partitions of the topic when it has to be created (default: 1); an existing topic "
                            "is left as it is")
        p.add_argument("--key-field", default="id", help="JSON field used as the message key (default: %(default)s)")
        p.add_argument("--rate", type=float, default=0.0, help="messages per second (default: as fast as possible)")
        p.add_argument("--limit", type=int, default=0, help="stop after this many messages (default: all)")
        p.add_argument("--connect-timeout", type=float, default=5.0,
                       help="seconds to wait for the broker before giving up (default: %(default)s)")
        add_arguments(p, ServiceConfig, only=KAFKA_CLIENT_FIELDS)
        p.set_defaults(func=run_produce)

    p = sub.add_parser("tail", help="print the events of the output topics (new, duplicates, DLQ)",
                       description="Print the messages of Kafka topics as JSON lines with their headers.")
    if command in (None, "tail"):
        p.add_argument("topics", nargs="*", help="topics (default: the new, duplicates and DLQ topics)")
        for name in ("new_topic", "duplicates_topic", "dlq_topic"):
            f = ServiceConfig.__dataclass_fields__[name]
            p.add_argument("--" + name.replace("_", "-"), dest=name, default=None, metavar=name.upper(),
                           help=f"{f.metadata['help']} Read when no TOPIC is given. [env {env_name(f)}] "
                                f"(default: {f.default!r})")
        p.add_argument("--from-beginning", action="store_true", help="read the topics from their first message")
        p.add_argument("--max-messages", type=int, default=0, help="stop after this many messages (default: no limit)")
        p.add_argument("--idle-timeout", type=float, default=0.0,
                       help="stop after this many seconds without messages (default: never)")
        p.add_argument("--connect-timeout", type=float, default=5.0,
                       help="seconds to wait for the broker before giving up (default: %(default)s)")
        add_arguments(p, ServiceConfig, only=KAFKA_CLIENT_FIELDS)
        p.set_defaults(func=run_tail)

    p = sub.add_parser("tune", help="choose LSH bands/rows for a threshold, print and plot the S-curve",
                       description="Choose the LSH bands and rows for a threshold (or evaluate given ones), print "
                                   "the candidate probability at several similarities, and plot the S-curve.")
    if command in (None, "tune"):
        p.add_argument("--threshold", type=float, default=EngineConfig.lsh_threshold,
                       help="similarity at which LSH should start proposing candidates (default: %(default)s)")
        p.add_argument("--num-perm", type=int, default=EngineConfig.num_perm,
                       help="MinHash permutations available for bands x rows (default: %(default)s)")
        p.add_argument("--bands", type=int, default=0, help="evaluate these bands instead of optimising (with --rows)")
        p.add_argument("--rows", type=int, default=0, help="evaluate these rows instead of optimising (with --bands)")
        p.add_argument("--fp-weight", type=float, default=0.5,
                       help="weight of the false-positive area below the threshold when optimising (default: %(default)s)")
        p.add_argument("--fn-weight", type=float, default=0.5,
                       help="weight of the false-negative area above the threshold when optimising (default: %(default)s)")
        p.add_argument("--plot", metavar="FILE.png", help="write the S-curve to this PNG file")
        p.set_defaults(func=run_tune)

    p = sub.add_parser("explain", help="why a record is (not) a duplicate of another: every measure of the pair",
                       description="Decide on NEW after EARLIER on an empty temporary index, exactly as dedup "
                                   "would, and print the decision with every measure the rules read (Jaccard, "
                                   "containment both ways, passage anchors shared, SimHash distance, short-text status, identity "
                                   "agreement) and the rules that pass, as JSON. Each file holds one JSON record "
                                   "(the first line of a JSONL file).")
    if command in (None, "explain"):
        p.add_argument("earlier", help="JSON file of the earlier record")
        p.add_argument("new", help="JSON file of the new record")
        add_arguments(p, EngineConfig)
        p.set_defaults(func=run_explain)

    p = sub.add_parser("config", help="print the effective configuration (secrets masked)",
                       description="Print the effective configuration as JSON (flags over environment over "
                                   "defaults; secrets masked), or the reference table of all settings.")
    if command in (None, "config"):
        p.add_argument("--markdown", action="store_true", help="print the reference table of all settings")
        add_arguments(p, EngineConfig)
        add_arguments(p, ServiceConfig)
        p.set_defaults(func=run_config)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default: this process's arguments) and return its exit status.

    Called without ``argv`` (the console script, ``python -m stream_dedup.cli``), the process ends
    here once everything is written: a ``dedup`` run without ``--state`` deletes its temporary index
    without closing it (see :func:`_release_state`).
    """
    process = argv is None
    argv = sys.argv[1:] if process else argv
    # the subcommand is the first argument (the only options before it are --help and --version)
    args = build_parser(argv[0] if argv and not argv[0].startswith("-") else None).parse_args(argv)
    args.process_ends = process
    code = _run(args)
    if _LEFT_OPEN:
        _end_process(code)
    return code


def _run(args: argparse.Namespace) -> int:
    prog = f"stream-dedup {args.command}"
    try:
        level = os.environ.get("STREAM_DEDUP_LOG_LEVEL", "INFO").upper()
        if not isinstance(logging.getLevelName(level), int):
            raise UsageError(f"STREAM_DEDUP_LOG_LEVEL={level}: use DEBUG, INFO, WARNING or ERROR")
        logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        return args.func(args)
    except UsageError as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return 2
    except RunError as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # the reader went away (e.g. `| head`): stop quietly, and keep Python from complaining at exit
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 141
    except ValueError as err:  # configuration errors: say what is wrong, no traceback
        print(f"stream-dedup: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # a file that cannot be read or written mid-run
        where = f" {err.filename}" if err.filename else ""
        print(f"{prog}:{where} {err.strerror or err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
