"""Byte-compile the checkout a benchmark measures, as an install does.

pip and ``make`` (``compileall`` at install, Makefile) leave every module compiled, so a user's
process imports ``.pyc`` files. A checkout whose sources changed since their ``.pyc`` was written
compiles them again in every process when ``PYTHONDONTWRITEBYTECODE`` is set (as in the Docker
image and on the benchmark machine): measured 0.42 against 0.33 s for a one-record ``dedup``
run with every module stale, so a benchmark would charge a user's process for a compile it
never does. The benchmarks call :func:`compile_tree` on each tree they run before timing it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def compile_tree(tree: Path) -> None:
    """Write the ``.pyc`` of every module of ``tree``'s ``stream_dedup`` that is missing or stale."""
    package = Path(tree) / "stream_dedup"
    if package.is_dir():
        subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", str(package)], check=True,
                       stdout=subprocess.DEVNULL)
