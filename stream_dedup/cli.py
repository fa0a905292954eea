"""``stream-dedup`` command line: ``dedup`` (embedded, no Kafka), ``worker`` (Kafka), ``tune``, ``config``.

Every engine/service setting is a flag here and an environment variable (see
:mod:`stream_dedup.config`); flags win over the environment.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from . import __version__
from .config import EngineConfig, ServiceConfig, add_arguments, load, markdown_table, redacted
from .engine import Deduplicator, lsh_params
from .lsh import candidate_probability, optimal_params
from .record import PROCESSING_ERROR, RecordError, parse_record

log = logging.getLogger("stream_dedup")

REJECT_SAMPLE_BYTES = 65536


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

    @property
    def records(self) -> int:
        return self.new + self.duplicates

    def as_dict(self) -> dict:
        return {"lines": self.lines, "records": self.records, "new": self.new, "duplicates": self.duplicates,
                "repeated_ids": self.repeated_ids, "rejects": sum(self.rejects.values()),
                "rejects_by_reason": dict(self.rejects), "duplicates_by_method": dict(self.by_method),
                "blank_lines": self.blank, "seconds": round(self.seconds, 3),
                "records_per_second": round(self.lines / self.seconds, 1) if self.seconds else None}

    def text(self) -> str:
        d = self.as_dict()
        reasons = ", ".join(f"{k}={v}" for k, v in sorted(self.rejects.items())) or "none"
        methods = ", ".join(f"{k}={v}" for k, v in sorted(self.by_method.items())) or "none"
        return (f"lines {d['lines']:,}: records {d['records']:,} (new {d['new']:,}, duplicates {d['duplicates']:,}"
                f" [{methods}], repeated ids {d['repeated_ids']:,}), rejects {d['rejects']:,} [{reasons}], "
                f"blank {d['blank_lines']:,} | {d['seconds']:.1f} s, {d['records_per_second'] or 0:,.0f} records/s")


class Progress:
    """A one-line progress display on a terminal (stderr); silent otherwise."""

    def __init__(self, stream: IO[str], total_bytes: int | None, enabled: bool) -> None:
        self.stream, self.total, self.enabled = stream, total_bytes, enabled
        self.start = self.last = time.monotonic()

    def update(self, summary: Summary, done_bytes: int, force: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (not force and now - self.last < 0.2):
            return
        self.last = now
        rate = summary.lines / max(now - self.start, 1e-9)
        dup = summary.duplicates / summary.records if summary.records else 0.0
        bar = ""
        if self.total:
            frac = min(1.0, done_bytes / self.total)
            filled = int(frac * 30)
            bar = f" [{'#' * filled}{'.' * (30 - filled)}] {frac:6.1%}"
        self.stream.write(f"\r{summary.lines:>10,} lines {rate:>8,.0f}/s  duplicates {dup:6.1%}  "
                          f"rejects {sum(summary.rejects.values()):,}{bar}")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


def _read_lines(stream: IO[bytes]) -> Iterator[tuple[int, bytes, int]]:
    done = 0
    for lineno, raw in enumerate(stream, 1):
        done += len(raw)
        yield lineno, raw.rstrip(b"\r\n"), done


def run_dedup(args: argparse.Namespace) -> int:
    config = load(EngineConfig, args)
    summary = Summary()
    with ExitStack() as stack:
        if args.input == "-":
            source: IO[bytes] = sys.stdin.buffer
            total = None
        else:
            path = Path(args.input)
            if not path.is_file():
                print(f"stream-dedup dedup: no such input file: {path}", file=sys.stderr)
                return 2
            source = stack.enter_context(path.open("rb"))
            total = path.stat().st_size
        out: IO[str] = sys.stdout if args.out == "-" else stack.enter_context(
            open(args.out, "w", encoding="utf-8"))
        rejects_path = args.rejects or (f"{args.out}.rejects.jsonl" if args.out != "-" else "rejects.jsonl")
        rejects: IO[str] | None = None
        dedup = stack.enter_context(Deduplicator(config, args.state))
        progress = Progress(sys.stderr, total, enabled=not args.quiet and sys.stderr.isatty())
        t0 = time.perf_counter()
        for lineno, raw, done in _read_lines(source):
            summary.lines += 1
            if not raw.strip():
                summary.blank += 1
                continue
            try:
                article = parse_record(raw, config)
                try:
                    decision = dedup.process(article)
                except Exception as exc:  # one record must never end the run
                    log.exception("line %d: processing failed", lineno)
                    raise RecordError(PROCESSING_ERROR, f"{type(exc).__name__}: {exc}") from exc
            except RecordError as err:
                summary.rejects[err.reason] += 1
                if rejects is None:
                    rejects = stack.enter_context(open(rejects_path, "w", encoding="utf-8"))
                sample = raw[:REJECT_SAMPLE_BYTES].decode("utf-8", "backslashreplace")
                rejects.write(json.dumps({"line": lineno, "reason": err.reason, "error": str(err),
                                          "record": sample, "truncated": len(raw) > REJECT_SAMPLE_BYTES},
                                         ensure_ascii=False) + "\n")
                progress.update(summary, done)
                continue
            if decision.seen_before:
                summary.repeated_ids += 1
            if decision.is_duplicate:
                summary.duplicates += 1
                summary.by_method[decision.method] += 1
            else:
                summary.new += 1
            out.write(json.dumps(decision.to_event(), ensure_ascii=False) + "\n")
            progress.update(summary, done)
        summary.seconds = time.perf_counter() - t0
        progress.update(summary, total or 0, force=True)
        progress.close()
        out.flush()
    if not args.quiet:
        print(summary.text(), file=sys.stderr)
        if summary.rejects:
            print(f"rejected records written to {rejects_path}", file=sys.stderr)
    if args.summary_json:
        Path(args.summary_json).write_text(json.dumps(summary.as_dict(), indent=2) + "\n")
    return 0


def run_tune(args: argparse.Namespace) -> int:
    if args.bands or args.rows:
        if not (args.bands and args.rows):
            print("stream-dedup tune: give both --bands and --rows, or neither", file=sys.stderr)
            return 2
        config = EngineConfig(num_perm=args.num_perm, lsh_threshold=args.threshold,
                              lsh_bands=args.bands, lsh_rows=args.rows)
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
            print("stream-dedup tune: --plot needs matplotlib (pip install 'stream-dedup[plot]')", file=sys.stderr)
            return 2
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
    print(json.dumps({"engine": redacted(load(EngineConfig)), "service": redacted(load(ServiceConfig))},
                     indent=2, default=str))
    return 0


def _kafka_client(kind: str, service: ServiceConfig, **extra: object):
    """A confluent-kafka client whose logs go through Python logging, checked to reach the brokers."""
    import confluent_kafka

    from .service.kafka_config import confluent_config

    conf = confluent_config(service, **extra)
    conf["logger"] = logging.getLogger("stream_dedup.kafka")
    client = getattr(confluent_kafka, kind)(conf)
    try:
        client.list_topics(timeout=15)
    except confluent_kafka.KafkaException as err:
        raise SystemExit(f"stream-dedup: cannot reach Kafka at {service.bootstrap_servers}: {err}") from None
    return client


def run_produce(args: argparse.Namespace) -> int:
    """Send a JSONL file to a topic, one message per line (bad lines too: they test the DLQ)."""
    service = load(ServiceConfig, args)
    topic = args.topic or service.input_topic
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stream-dedup", description="Streaming near-duplicate detection for text.")
    parser.add_argument("--version", action="version", version=f"stream-dedup {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("dedup", help="decide new / duplicate-of for every record of a JSONL file (no Kafka)")
    p.add_argument("input", help="input JSONL file, or - for stdin")
    p.add_argument("--out", default="-", help="output JSONL of events, in input order (default: - = stdout)")
    p.add_argument("--state", default=os.environ.get("STREAM_DEDUP_STATE", "./stream-dedup-state"),
                   help="index directory (RocksDB); reused across runs [env STREAM_DEDUP_STATE]")
    p.add_argument("--rejects", help="where rejected records go (default: OUT.rejects.jsonl, or rejects.jsonl)")
    p.add_argument("--summary-json", help="also write the summary as JSON to this file")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar and no summary")
    add_arguments(p, EngineConfig)
    p.set_defaults(func=run_dedup)

    p = sub.add_parser("worker", help="run the Kafka stream processor (Faust)")
    add_arguments(p, ServiceConfig)
    add_arguments(p, EngineConfig)
    p.set_defaults(func=run_worker_command)

    p = sub.add_parser("produce", help="send a JSONL file to a Kafka topic (one message per line)")
    p.add_argument("input", help="JSONL file, or - for stdin")
    p.add_argument("--topic", help="topic (default: the input topic)")
    p.add_argument("--key-field", default="id", help="JSON field used as the message key")
    p.add_argument("--rate", type=float, default=0.0, help="messages per second (default: as fast as possible)")
    p.add_argument("--limit", type=int, default=0, help="stop after this many messages")
    add_arguments(p, ServiceConfig)
    p.set_defaults(func=run_produce)

    p = sub.add_parser("tail", help="print the events of the output topics (new, duplicates, DLQ)")
    p.add_argument("topics", nargs="*", help="topics (default: the new, duplicates and DLQ topics)")
    p.add_argument("--from-beginning", action="store_true")
    p.add_argument("--max-messages", type=int, default=0)
    p.add_argument("--idle-timeout", type=float, default=0.0, help="stop after this many seconds without messages")
    add_arguments(p, ServiceConfig)
    p.set_defaults(func=run_tail)

    p = sub.add_parser("tune", help="choose LSH bands/rows for a threshold, print and plot the S-curve")
    p.add_argument("--threshold", type=float, default=EngineConfig.lsh_threshold)
    p.add_argument("--num-perm", type=int, default=EngineConfig.num_perm)
    p.add_argument("--bands", type=int, default=0, help="evaluate these bands instead of optimising")
    p.add_argument("--rows", type=int, default=0, help="evaluate these rows instead of optimising")
    p.add_argument("--fp-weight", type=float, default=0.5)
    p.add_argument("--fn-weight", type=float, default=0.5)
    p.add_argument("--plot", help="write the S-curve to this PNG file")
    p.set_defaults(func=run_tune)

    p = sub.add_parser("config", help="print the effective configuration (secrets masked)")
    p.add_argument("--markdown", action="store_true", help="print the reference table of all settings")
    p.set_defaults(func=run_config)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=os.environ.get("STREAM_DEDUP_LOG_LEVEL", "INFO").upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except ValueError as err:  # configuration errors: say what is wrong, no traceback
        print(f"stream-dedup: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
