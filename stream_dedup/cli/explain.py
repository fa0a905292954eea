"""``stream-dedup explain A.json B.json``: the decision on B after A, and every measure of the pair
(computed by :mod:`stream_dedup.explain`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..config import EngineConfig, add_arguments, load
from ..record import RecordError, parse_record
from .errors import UsageError


def configure_explain_parser(p: argparse.ArgumentParser) -> None:
    """The arguments of ``explain``, and :func:`run_explain` as the function that runs it."""
    p.add_argument("earlier", help="JSON file of the earlier record")
    p.add_argument("new", help="JSON file of the new record")
    add_arguments(p, EngineConfig)
    p.set_defaults(func=run_explain)


def run_explain(args: argparse.Namespace) -> int:
    """``stream-dedup explain A.json B.json``: the decision on B after A, and every measure of the pair."""
    from ..explain import explain

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
