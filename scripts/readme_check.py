#!/usr/bin/env python3
"""Check (or refresh) the README's sample outputs and command reference against the current code.

    python scripts/readme_check.py            # exit 1 and show a diff when the README is out of date
    python scripts/readme_check.py --write    # rewrite those parts of README.md from what the code prints

Checked parts of README.md:

* a ```console block right after ``<!-- readme-check -->``: each ``$ COMMAND`` line is run with
  bash (in a scratch directory holding ``examples/`` and ``.venv`` links and an empty ``out/``),
  and what it prints (stdout, then stderr) must be the lines that follow it. Durations and rates
  (``0.5 s``, ``769 records/s``) are compared as numbers of any value.
* a ```python block right after ``<!-- readme-check:python -->``: run with this interpreter; what it
  prints must be the ```text block that follows it.
* the command reference between ``<!-- commands:begin -->`` and ``<!-- commands:end -->``:
  generated from the argument parser of ``stream-dedup``.

``make readme-check`` runs it, and tests/cli/test_readme.py runs it under ``make test`` (CI).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
BLOCK = re.compile(r"<!-- readme-check -->\n```console\n(.*?)```\n", re.S)
PYBLOCK = re.compile(r"<!-- readme-check:python -->\n```python\n(.*?)```\n+```text\n(.*?)```\n", re.S)
COMMANDS = re.compile(r"(<!-- commands:begin -->\n)(.*?)(<!-- commands:end -->)", re.S)
TIMING = re.compile(r"\d[\d,]*(?:\.\d+)? s\b|[\d,]+ records/s")


def normalise(text: str) -> str:
    return TIMING.sub(lambda m: "N records/s" if m.group().endswith("/s") else "N s", text)


def command_reference() -> str:
    """Markdown: every flag of dedup, produce, tail, tune and config that is not a setting of the
    Configuration table (the worker takes only those)."""
    sys.path.insert(0, str(REPO))
    from stream_dedup import config
    from stream_dedup.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = []
    for name, p in sub.choices.items():
        if name == "worker":
            continue
        rows = []
        for group in p._action_groups:
            if group.title in ("EngineConfig", "ServiceConfig"):
                continue
            for a in group._group_actions:
                if a.dest == "help":
                    continue
                flag = ", ".join(f"`{o}`" for o in a.option_strings) if a.option_strings else f"`{a.metavar or a.dest}`"
                text = (a.help or "") % {"default": a.default} if a.help else ""
                rows.append(f"| {flag} | {text.replace('|', '&#124;')} |")
        settings = [g.title for g in p._action_groups if g.title in ("EngineConfig", "ServiceConfig")
                    and g._group_actions]
        more = ""
        if settings:
            shown = [a.option_strings[-1] for g in p._action_groups if g.title in settings for a in g._group_actions]
            everything = {"EngineConfig": "every engine setting", "ServiceConfig": "every worker setting"}
            if name in ("produce", "tail"):
                more = " Also the Kafka connection settings of the Configuration table: " + \
                    ", ".join(f"`{f}`" for f in shown) + "."
            else:  # (a command that takes some of the worker's settings names them)
                some = {s: [f"`{a.option_strings[-1]}`" for g in p._action_groups if g.title == s
                            for a in g._group_actions] for s in settings}
                more = " Also " + " and ".join(
                    everything[s] if len(some[s]) == len(dataclasses.fields(getattr(config, s))) else ", ".join(some[s])
                    for s in settings) + " of the Configuration table."
        out.append(f"**`stream-dedup {name}`**: {p.description or p.format_usage()}{more}\n\n"
                   "| argument | meaning |\n| --- | --- |\n" + "\n".join(rows) + "\n")
    return "\n".join(out)


def run_console(block: str, workdir: Path) -> str:
    """Run each ``$ command`` of a console block; return the block as the code prints it."""
    result = []
    for line in block.splitlines():
        if line.startswith("$ "):
            result.append(line)
            proc = subprocess.run(["bash", "-c", line[2:]], cwd=workdir, capture_output=True, text=True,
                                  timeout=600, env={**os.environ, "COLUMNS": "100"}, check=False)
            result.extend((proc.stdout + proc.stderr).splitlines())
    return "\n".join(result) + "\n"


def scratch_dir(tmp: Path) -> Path:
    venv = Path(sys.executable).resolve().parent.parent
    (tmp / "examples").symlink_to(REPO / "examples")
    (tmp / ".venv").symlink_to(venv if (venv / "bin" / "stream-dedup").exists() else REPO / ".venv")
    (tmp / "out").mkdir()
    return tmp


def refreshed(text: str) -> str:
    """README.md with every checked part as the current code prints it."""
    with tempfile.TemporaryDirectory(prefix="readme-check-") as tmp:
        work = scratch_dir(Path(tmp))

        def console(m: re.Match) -> str:
            return "<!-- readme-check -->\n```console\n" + run_console(m.group(1), work) + "```\n"

        def python(m: re.Match) -> str:
            proc = subprocess.run([sys.executable, "-c", m.group(1)], cwd=work, capture_output=True, text=True,
                                  timeout=600, check=False)
            return (f"<!-- readme-check:python -->\n```python\n{m.group(1)}```\n\n```text\n"
                    f"{proc.stdout + proc.stderr}```\n")

        text = BLOCK.sub(console, text)
        text = PYBLOCK.sub(python, text)
    return COMMANDS.sub(lambda m: m.group(1) + command_reference() + m.group(3), text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite README.md instead of checking it")
    args = ap.parse_args()
    text = README.read_text(encoding="utf-8")
    if not (BLOCK.search(text) and PYBLOCK.search(text) and COMMANDS.search(text)):
        print("readme-check: README.md has no checked blocks or command reference markers", file=sys.stderr)
        return 1
    new = refreshed(text)
    if args.write:
        README.write_text(new, encoding="utf-8")
        print("README.md refreshed from the current code", file=sys.stderr)
        return 0
    if normalise(new) == normalise(text):
        print("readme-check: README.md matches what the code prints", file=sys.stderr)
        return 0
    diff = difflib.unified_diff(normalise(text).splitlines(), normalise(new).splitlines(), "README.md",
                                "what the code prints", lineterm="", n=1)
    print("\n".join(diff))
    print("readme-check: README.md is out of date (refresh it with `make readme`)", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
