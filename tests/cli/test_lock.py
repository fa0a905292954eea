"""Issue 14, item 13: the lock files in requirements/ match pyproject.toml, and make install, the
Docker image and CI install from them."""

from __future__ import annotations

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import re
import subprocess
import sys

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from .conftest import REPO_ROOT

REQ = REPO_ROOT / "requirements"
PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
LOCKS = {"dev": REQ / "dev.lock", "runtime": REQ / "runtime.lock", "uv": REQ / "uv.txt"}


def pins(path) -> dict[str, list[tuple[str, str, str]]]:
    """name -> [(version, marker, the whole entry)] of a hashed requirements file."""
    text = path.read_text()
    out: dict[str, list[tuple[str, str, str]]] = {}
    for entry in re.split(r"\n(?=[A-Za-z0-9])", "\n".join(x for x in text.splitlines() if not x.startswith("#"))):
        if not entry.strip():
            continue
        head = entry.split("\\")[0].strip()
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^\s;]+)\s*(?:;\s*(.*))?", head)
        assert m, f"{path.name}: not an exact pin: {head!r}"
        out.setdefault(canonicalize_name(m.group(1)), []).append((m.group(2), m.group(3) or "", entry))
    return out


def stamp() -> str:
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "lock_stamp.py")], capture_output=True,
                          text=True, check=True)
    return proc.stdout.strip()


@pytest.mark.parametrize("name", sorted(LOCKS))
def test_lock_is_stamped_with_the_current_pyproject(name: str) -> None:
    """A change to pyproject.toml's dependencies without `make lock` fails here."""
    first = LOCKS[name].read_text().splitlines()[0]
    assert first == f"# pyproject-dependencies-sha256: {stamp()}", f"{LOCKS[name].name} is stale: run `make lock`"


@pytest.mark.parametrize("name", sorted(LOCKS))
def test_every_entry_is_pinned_with_hashes(name: str) -> None:
    for versions in pins(LOCKS[name]).values():
        for _, _, entry in versions:
            assert "--hash=sha256:" in entry, entry.splitlines()[0]


def satisfied(lock: dict, requirement: str, extra: str | None = None) -> None:
    req = Requirement(requirement)
    env = {**default_environment(), "extra": extra or ""}
    if req.marker is not None and not req.marker.evaluate(env):
        return
    here = [(v, mk) for v, mk, _ in lock.get(canonicalize_name(req.name), [])
            if not mk or Requirement(f"x; {mk}").marker.evaluate(default_environment())]
    assert here, f"{req.name} is not in the lock for this interpreter: run `make lock`"
    for version, _ in here:
        assert req.specifier.contains(version, prereleases=True), f"{req.name}=={version} does not satisfy {req}"


def test_dev_lock_satisfies_every_requirement() -> None:
    lock = pins(LOCKS["dev"])
    project = PYPROJECT["project"]
    for r in project["dependencies"] + PYPROJECT["build-system"]["requires"]:
        satisfied(lock, r)
    for extra in ("test", "bench", "plot"):
        for r in project["optional-dependencies"][extra]:
            satisfied(lock, r, extra)


def test_runtime_lock_has_the_dependencies_and_no_test_tools() -> None:
    lock = pins(LOCKS["runtime"])
    for r in PYPROJECT["project"]["dependencies"] + PYPROJECT["build-system"]["requires"]:
        satisfied(lock, r)
    assert not {"pytest", "hypothesis", "ruff", "datasketch", "matplotlib"} & set(lock)
    # the same version of every package in both locks
    dev = pins(LOCKS["dev"])
    for name, versions in lock.items():
        assert {v for v, _, _ in versions} <= {v for v, _, _ in dev[name]}, name


def test_this_environment_is_the_lock() -> None:
    """The venv the tests run in was installed from dev.lock (make install): every locked version is installed."""
    from importlib.metadata import PackageNotFoundError, version

    for name, versions in pins(LOCKS["dev"]).items():
        wanted = [v for v, mk, _ in versions if not mk or Requirement(f"x; {mk}").marker.evaluate()]
        if not wanted:
            continue
        try:
            have = version(name)
        except PackageNotFoundError:
            pytest.fail(f"{name} is locked but not installed: run `make install`")
        assert have in wanted, f"{name} {have} installed, the lock says {wanted}"


def test_make_install_ci_and_lock_use_the_lock_files() -> None:
    make = subprocess.run(["make", "-n", "-B", "install", "VENV=/nonexistent/venv"], cwd=REPO_ROOT,
                          capture_output=True, text=True, check=True).stdout
    assert "--require-hashes -r requirements/uv.txt" in make
    assert "--require-hashes -r requirements/dev.lock" in make
    assert "--no-deps --no-build-isolation -e ." in make
    assert not re.search(r"pip install(?![^\n]*(--require-hashes|--no-deps))", make), make
    lock = subprocess.run(["make", "-n", "-B", "lock"], cwd=REPO_ROOT, capture_output=True, text=True,
                          check=True).stdout
    for out in ("requirements/uv.txt", "requirements/dev.lock", "requirements/runtime.lock"):
        assert f"-o {out}" in lock.replace("\\\n\t", "")
    assert "make test" in (REPO_ROOT / ".ci" / "run").read_text()
    assert re.search(r"^test: install\b", (REPO_ROOT / "Makefile").read_text(), re.M)
