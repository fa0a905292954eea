#!/usr/bin/env python3
"""The stamp that ties the lock files in requirements/ to pyproject.toml.

    python scripts/lock_stamp.py              # print the stamp of the current pyproject.toml
    python scripts/lock_stamp.py --write F..  # append it to lock files (``make lock`` does this)

The stamp is a SHA-256 of the dependency tables of pyproject.toml (``build-system.requires``,
``requires-python``, ``dependencies``, ``optional-dependencies``). tests/deploy/test_lock.py checks that
every lock file carries the stamp of the current pyproject.toml, so a dependency change without
``make lock`` fails the tests.
"""

from __future__ import annotations

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import hashlib
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PREFIX = "# pyproject-dependencies-sha256: "
NOTE = "# made by `make lock` (uv pip compile, see the Makefile) from pyproject.toml; do not edit"


def stamp(pyproject: Path = REPO / "pyproject.toml") -> str:
    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    project = data["project"]
    tables = {"build": data["build-system"]["requires"], "python": project.get("requires-python"),
              "dependencies": project.get("dependencies", []),
              "optional": project.get("optional-dependencies", {})}
    return hashlib.sha256(json.dumps(tables, sort_keys=True).encode()).hexdigest()


def main(argv: list[str]) -> int:
    value = stamp()
    if argv[:1] == ["--write"]:
        for name in argv[1:]:
            path = Path(name)
            lines = [x for x in path.read_text(encoding="utf-8").splitlines() if not x.startswith(PREFIX)]
            lines = [x for x in lines if x != NOTE]
            path.write_text("\n".join([PREFIX + value, NOTE, *lines]) + "\n", encoding="utf-8")
        return 0
    print(value)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
