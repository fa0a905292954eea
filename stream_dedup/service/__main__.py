"""``python -m stream_dedup.service [flags]``: the worker (same as ``stream-dedup worker``)."""

from __future__ import annotations

import argparse
import sys

from stream_dedup.config import EngineConfig, ServiceConfig, add_arguments, load


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m stream_dedup.service",
        description="Kafka worker: articles -> new / duplicate-of events (see stream_dedup.service).")
    add_arguments(parser, ServiceConfig)
    add_arguments(parser, EngineConfig)
    args = parser.parse_args(argv)
    try:
        service = load(ServiceConfig, args)
        engine = load(EngineConfig, args)
    except ValueError as exc:
        parser.error(str(exc))
    from . import run_worker

    return run_worker(service, engine)


if __name__ == "__main__":
    sys.exit(main())
