"""``stream-dedup config``: the effective configuration as JSON (secrets masked), or the reference
table of all settings (``--markdown``)."""

from __future__ import annotations

import argparse
import json

from ..config import EngineConfig, ServiceConfig, add_arguments, load, markdown_table, redacted


def configure_config_parser(p: argparse.ArgumentParser) -> None:
    """The arguments of ``config``, and :func:`run_config` as the function that runs it."""
    p.add_argument("--markdown", action="store_true", help="print the reference table of all settings")
    add_arguments(p, EngineConfig)
    add_arguments(p, ServiceConfig)
    p.set_defaults(func=run_config)


def run_config(args: argparse.Namespace) -> int:
    if args.markdown:
        print(markdown_table())
        return 0
    print(json.dumps({"engine": redacted(load(EngineConfig, args)), "service": redacted(load(ServiceConfig, args))},
                     indent=2, default=str))
    return 0
