"""``stream-dedup`` command line: ``dedup`` (embedded, no Kafka), ``worker`` (Kafka), ``tune``, ``config``.

Every engine/service setting is a flag here and an environment variable (see
:mod:`stream_dedup.config`); flags win over the environment.

This module holds :func:`main`, the parser (:func:`build_parser`, from the table
:data:`SUBCOMMANDS`) and how errors become exit statuses. Each subcommand is defined, its
arguments and its run, in a module of this package imported only when that subcommand is chosen:
:mod:`.dedup` (with :mod:`.summary` and :mod:`.progress`), :mod:`.kafka_commands` (``worker``,
``produce``, ``tail``), :mod:`.tune`, :mod:`.explain` and :mod:`.config_command`.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from typing import NamedTuple

# numpy loads OpenBLAS, which starts a thread per core when it loads (0.04 s of wall and 0.15 s of CPU
# of every start on 2 cores, measured); the engine does no linear algebra, so one thread is enough.
# Set before anything imports numpy; a value in the environment wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from .. import __version__  # noqa: E402 - after the setting above
from ..gc_tuning import collect_rarely  # noqa: E402
from .errors import RunError, UsageError  # noqa: E402
from .process_end import LEFT_OPEN, end_process  # noqa: E402


class Subcommand(NamedTuple):
    """What ``--help`` says of a subcommand, and where it is defined."""

    help: str
    description: str | None
    module: str     # the module of this package that defines it, imported only when it is chosen
    configure: str  # the function of that module that adds its arguments and sets ``func``, its run


#: the subcommands, in the order ``stream-dedup --help`` lists them
SUBCOMMANDS: dict[str, Subcommand] = {
    "dedup": Subcommand(
        "decide new / duplicate-of for every record of a JSONL file (no Kafka)",
        "Decide new / duplicate-of for every record of a JSONL file, in input order, without Kafka. Exit "
        "status: 0 done, 1 no record could be processed (or over --max-reject-rate), 2 usage error, 130/143 "
        "interrupted by SIGINT/SIGTERM (rerun with --resume), 141 output pipe closed.",
        "dedup", "configure_dedup_parser"),
    "worker": Subcommand("run the Kafka stream processor (Faust)", None,
                         "kafka_commands", "configure_worker_parser"),
    "produce": Subcommand(
        "send a JSONL file to a Kafka topic (one message per line)",
        "Send a JSONL file to a Kafka topic, one message per line (bad lines too, to watch them reach the "
        "DLQ). Creates the topic when it does not exist.",
        "kafka_commands", "configure_produce_parser"),
    "tail": Subcommand("print the events of the output topics (new, duplicates, DLQ)",
                       "Print the messages of Kafka topics as JSON lines with their headers.",
                       "kafka_commands", "configure_tail_parser"),
    "tune": Subcommand(
        "choose LSH bands/rows for a threshold, print and plot the S-curve",
        "Choose the LSH bands and rows for a threshold (or evaluate given ones), print the candidate "
        "probability at several similarities, and plot the S-curve.",
        "tune", "configure_tune_parser"),
    "explain": Subcommand(
        "why a record is (not) a duplicate of another: every measure of the pair",
        "Decide on NEW after EARLIER on an empty temporary index, exactly as dedup would, and print the "
        "decision with every measure the rules read (Jaccard, containment both ways, passage anchors shared, "
        "SimHash distance, short-text status, identity agreement) and the rules that pass, as JSON. Each file "
        "holds one JSON record (the first line of a JSONL file).",
        "explain", "configure_explain_parser"),
    "config": Subcommand(
        "print the effective configuration (secrets masked)",
        "Print the effective configuration as JSON (flags over environment over defaults; secrets masked), "
        "or the reference table of all settings.",
        "config_command", "configure_config_parser"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser. With ``command``, only that subcommand gets its arguments (the others are
    listed, without theirs): adding all ~250 of them took 0.02 s of every start."""
    parser = argparse.ArgumentParser(prog="stream-dedup", description="Streaming near-duplicate detection for text.")
    parser.add_argument("--version", action="version", version=f"stream-dedup {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, subcommand in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=subcommand.help, description=subcommand.description)
        if command in (None, name):
            module = importlib.import_module(f"{__name__}.{subcommand.module}")
            getattr(module, subcommand.configure)(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default: this process's arguments) and return its exit status.

    Called without ``argv`` (the console script, ``python -m stream_dedup.cli``), the process ends
    here once everything is written: a ``dedup`` run without ``--state`` deletes its temporary index
    without closing it (see :func:`.process_end.release_state`).
    """
    process = argv is None
    if process:  # (the imports ahead collect rarely; not a caller's process)
        collect_rarely()
    argv = sys.argv[1:] if process else argv
    # the subcommand is the first argument (the only options before it are --help and --version)
    args = build_parser(argv[0] if argv and not argv[0].startswith("-") else None).parse_args(argv)
    args.process_ends = process
    code = _run(args)
    if LEFT_OPEN:
        end_process(code)
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

