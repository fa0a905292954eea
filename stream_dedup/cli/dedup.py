"""``stream-dedup dedup``: decide new / duplicate-of for every record of a JSONL file, without Kafka.

Its arguments (:func:`configure_dedup_parser`) and the run (:func:`run_dedup`): validation, the
state (a kept ``--state`` or a temporary index), batches of records decided in input order,
the outputs and rejects, SIGINT/SIGTERM (finish the batch in hand, then stop) and the checkpoint
that ``--resume`` continues from. What the run counts and shows is in :mod:`.summary` and
:mod:`.progress`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import stat
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import IO, TYPE_CHECKING

from ..config import EngineConfig, ServiceConfig, add_arguments, load
from ..gc_tuning import relax_collector
from ..record import PROCESSING_ERROR, Article, RecordError, parse_record
from .batches import (
    AUTO_POOL_BYTES,
    INPUT_BUFFER,
    BatchDecider,
    Decided,
    InputForecast,
    Line,
    fingerprint_pool,
    lines_with_readiness,
)
from .errors import RunError, UsageError, check_writable
from .process_end import release_state
from .progress import Progress, StatsLines
from .summary import Summary, write_report

if TYPE_CHECKING:
    from ..engine import Deduplicator

log = logging.getLogger("stream_dedup")

#: bytes of a rejected line copied into its reject record (all of it with --rejects-full-record)
REJECT_SAMPLE_BYTES = 512
BATCH_RECORDS = 256  # records decided at once by `dedup` at most (Deduplicator.process_batch)


class Interrupted(Exception):
    """Raised by the signal handler when no record is in hand (the run stops at once)."""


def configure_dedup_parser(p: argparse.ArgumentParser) -> None:
    """The arguments of ``dedup``, and :func:`run_dedup` as the function that runs it."""
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
    p.add_argument("--fingerprint-processes", type=int, default=None, metavar="N",
                   help="child processes that read, parse and fingerprint the next batches of an input file while "
                        "the older ones are decided (0 = none, all in this process; default: 1 for an input file over "
                        f"{AUTO_POOL_BYTES // 2**20} MB on a machine with 2 cores or more, else 0). The decisions "
                        "are the same")
    p.add_argument("--expect-records", type=int, default=None, metavar="N",
                   help="the records the input holds, for a pipe (zcat big.jsonl.gz | ...): once 512 lines are "
                        "decided the in-memory lists are prepared for the rest at once instead of growing step by "
                        "step (default: from an input file's size; none for a pipe). The decisions are the same")
    p.add_argument("--stats-every", type=int, default=0, metavar="N",
                   help="print a JSON line of statistics to stderr every N input lines: records/s over those "
                        "lines, RSS, index size, memory budget, block cache usage and hit rate (default: never)")
    add_arguments(p, EngineConfig)
    add_arguments(p, ServiceConfig, only=DEDUP_SERVICE_FIELDS)
    p.set_defaults(func=run_dedup)


#: the settings of the Configuration table that ``dedup`` shares with the worker
DEDUP_SERVICE_FIELDS = ("lists_snapshot_every",)


def _snapshot_done(done: tuple[bool, float, float] | None) -> None:
    """Log the lists' snapshot that ended (:meth:`~stream_dedup.lists_snapshot.SnapshotSchedule.tick`)."""
    if done is not None:
        written, took, paused = done
        if written:
            log.info("wrote the snapshot of the index's in-memory lists in %.2f s, deciding nothing for %.2f s of it",
                     took, paused)
        else:
            log.warning("the snapshot of the index's in-memory lists was not written (see the log before)")


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
    from ..engine import Deduplicator  # the parser (--help, every subcommand) does without the engine

    # 1. validate everything: settings, input, state and every output path, before opening any output
    config = load(EngineConfig, args)
    snapshot_every = load(ServiceConfig, args).lists_snapshot_every  # (seconds; None: only at the end)
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
        check_writable(flag, value)
        if args.input != "-" and _same_file(value, args.input):
            raise UsageError(f"{flag} {value}: is the input file")
    if args.stats_every < 0:
        raise UsageError(f"--stats-every {args.stats_every}: must be >= 0")
    if args.fingerprint_processes is not None and args.fingerprint_processes < 0:
        raise UsageError(f"--fingerprint-processes {args.fingerprint_processes}: must be >= 0")
    if args.expect_records is not None and args.expect_records < 0:
        raise UsageError(f"--expect-records {args.expect_records}: must be >= 0")
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
        dedup.index.snapshot_on_close = bool(state_arg)  # a temporary index is not reopened
        # when the process ends next, the state is not closed (see main): a temporary one is deleted, a
        # kept one's write-ahead log is synced (the next open replays it)
        leave_open = getattr(args, "process_ends", False)
        kept = bool(state_arg)
        stack.push(lambda exc_type, *_: release_state(dedup, leave_open and exc_type is None, kept))
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
                source = stack.enter_context(open(args.input, "rb", buffering=INPUT_BUFFER))  # noqa: SIM115
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
        stack.callback(relax_collector())  # as in the Kafka worker; undone when the run ends
        t0 = time.perf_counter()
        stats = StatsLines(dedup, t0) if args.stats_every else None
        lineno = 0
        out_name = "stdout" if args.out == "-" else args.out
        target = out_name  # the file written last, named if writing fails
        # a batch of records is decided at once (one index write); a pipe or terminal is read as it arrives,
        # and a batch is what has arrived (up to BATCH_RECORDS), so each event is written as soon as its
        # record's line is complete and nothing is waiting behind it
        is_file = _is_file(source)
        lines = ((line, True) for line in source) if is_file else lines_with_readiness(source)
        pending: list[Line] = []  # lines read, not yet sent to be decided
        # a file's next batch is fingerprinted in a child process meanwhile (a pipe's batch is decided at once)
        decider = BatchDecider(dedup, fingerprint_pool(args.fingerprint_processes, dedup, total, source.fileno())
                               if is_file else None, ckpt)
        stack.callback(decider.close)
        # (the lists prepared for the whole input: its size in records, or a file's in bytes)
        forecast = InputForecast(dedup, total if is_file else None, args.expect_records, start_after)
        parses_elsewhere = decider.parses  # (the pool's processes parse the lines)
        # byte offsets in the file: where the next line starts, where the pending lines do
        offset = pending_at = source.tell() if is_file else 0
        # the lists' snapshot now and then, between batches (the last one at the end: Index.close)
        from ..lists_snapshot import SnapshotSchedule
        snapshots = SnapshotSchedule(dedup.index, snapshot_every) if state_arg and snapshot_every else None

        def send_pending() -> None:
            """Hand the pending records on; write what is decided."""
            batch = pending.copy()
            pending.clear()
            for decided in decider.send(batch, pending_at):
                write(decided)
            if batch:
                forecast.sent(pending_at, offset, batch[-1][0] - start_after, summary.lines)

        def write_events(events: list[str]) -> None:
            """Write ``events`` (one line each) to the output, and forget them."""
            nonlocal target
            if events:
                target = out_name
                out.write("\n".join(events) + "\n")
                events.clear()

        def write(decided: Decided) -> None:
            """Write a decided batch's events and rejects and count its lines in input order, as if one at a time."""
            nonlocal rejects, target, lineno
            batch, decisions = decided
            counted = not isinstance(decisions, list)  # (an EventBatch: counted at once)
            if counted:
                summary.count_events(decisions, [article for _, _, _, article, _ in batch if article is not None])
                decisions = decisions.items
                if stats is None and len(decisions) == len(batch):  # (every line a record: its event at once)
                    written = _events_of(decisions)
                    if written is not None:
                        lineno = batch[-1][0]
                        summary.lines += len(batch)
                        summary.last_line = lineno
                        progress.update(summary, sum([nbytes for _, nbytes, _, _, _ in batch]), now=True)
                        write_events(written)
                        if signals.received is not None:
                            raise Interrupted()
                        return
            results = iter(decisions)
            events: list[str] = []  # written together (one write of the batch's events, not one per record)
            for lineno, nbytes, raw, article, error in batch:  # noqa: B007 - lineno: the line written last
                summary.lines += 1
                if article is None and error is None:  # (a blank line: every other line parsed or failed)
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
                        event = decision if type(decision) is str else decision.event_json()
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
                        if not counted:
                            summary.count(article, decision)
                        events.append(event)
                summary.last_line = lineno
                progress.update(summary, nbytes)
                if stats is not None and summary.lines % args.stats_every == 0:
                    write_events(events)
                    stats.emit(summary)
            write_events(events)
            if signals.received is not None:  # a batch sent on is abandoned: --resume reads its lines again
                raise Interrupted()

        try:
            try:
                for lineno, (raw, more) in enumerate(lines, 1):  # noqa: B007 - lineno: the resume point after the loop
                    if not pending:
                        pending_at = offset
                    offset += len(raw)
                    if lineno <= start_after:
                        summary.skipped += 1
                        progress.update(summary, len(raw))
                        continue
                    signals.busy = True  # until the batch is handled: a signal stops the run after it
                    nbytes = len(raw)
                    raw = raw.rstrip(b"\r\n")
                    article, error = None, None
                    if not parses_elsewhere and raw.strip():
                        try:
                            article = parse_record(raw, config)
                        except (RecordError, UnicodeEncodeError) as err:
                            error = err
                    pending.append((lineno, nbytes, raw, article, error))
                    read = summary.lines + len(pending)
                    if more and len(pending) < BATCH_RECORDS and not (args.stats_every and read % args.stats_every == 0):
                        continue
                    send_pending()
                    if snapshots is not None:
                        _snapshot_done(snapshots.tick())
                    signals.busy = decider.busy
                    if signals.received is not None:
                        raise Interrupted()
                if pending:
                    send_pending()  # the last, partial batch
                for decided in decider.drain():
                    write(decided)
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


def _events_of(items: list) -> list[str] | None:
    """The event of each of a batch's items (written compiled, or a decision's), or None if one
    fails (the batch is then handled a line at a time: that record rejected, with its reason)."""
    try:
        return [d if type(d) is str else d.event_json() for d in items]
    except Exception:  # noqa: BLE001 - handled again one line at a time
        return None


def _is_file(source: IO[bytes]) -> bool:
    """Whether ``source`` reads a regular file (a redirected stdin too), not a pipe or terminal."""
    try:
        return stat.S_ISREG(os.fstat(source.fileno()).st_mode)
    except (OSError, ValueError, AttributeError):  # no file descriptor (e.g. a test's stdin)
        return False
