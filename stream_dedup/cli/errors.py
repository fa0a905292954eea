"""How a command refuses or fails: :class:`UsageError` (exit 2) and :class:`RunError` (exit 1), each
one line on stderr (see :func:`stream_dedup.cli.main`), and :func:`check_writable`, the check of an
output path that every command writing a file makes before it opens anything."""

from __future__ import annotations

import os
from pathlib import Path


class RunError(Exception):
    """A run that cannot start or go on (e.g. an output that cannot be opened): one line, exit 1."""


class UsageError(Exception):
    """A mistake in the command line (a bad path or value): one line on stderr, exit 2."""


def check_writable(flag: str, path_text: str) -> Path:
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
