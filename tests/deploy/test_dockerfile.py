"""Static checks of the Dockerfile and .dockerignore (no Docker engine needed)."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
PYPROJECT = ROOT / "pyproject.toml"


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]

    def last(self, keyword: str) -> str | None:
        found = self.all(keyword)
        return found[-1] if found else None


def logical_lines(text: str) -> list[str]:
    """Instructions with comments removed and backslash continuations joined."""
    lines, current = [], ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and current):
            continue  # comments (and blank lines) may sit inside a continued instruction
        if stripped.endswith("\\"):
            current += stripped[:-1].rstrip() + " "
            continue
        current += stripped
        if current.strip():
            lines.append(current.strip())
        current = ""
    assert not current.strip(), "Dockerfile ends inside a continued instruction"
    return lines


def substitute(text: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), m.group(0)), text)


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical_lines(text):
        keyword, _, args = line.partition(" ")
        keyword, args = keyword.upper(), args.strip()
        if keyword == "FROM":
            words = [w for w in args.split() if not w.startswith("--")]
            base = substitute(words[0], global_args)
            name = words[2] if len(words) >= 3 and words[1].lower() == "as" else None
            stages.append(Stage(base, name))
        elif not stages:
            assert keyword == "ARG", f"only ARG may precede the first FROM, got {keyword}"
            key, _, default = args.partition("=")
            global_args[key.strip()] = default.strip().strip('"')
        else:
            stages[-1].instructions.append((keyword, args))
    return global_args, stages


def env_of(stage: Stage) -> dict[str, str]:
    env: dict[str, str] = {}
    for args in stage.all("ENV"):
        words = shlex.split(args)
        if words and "=" not in words[0]:  # legacy form: ENV KEY value
            env[words[0]] = " ".join(words[1:])
            continue
        for word in words:
            key, _, value = word.partition("=")
            env[key] = value
    return env


def exec_form(args: str | None) -> list[str]:
    assert args is not None
    value = json.loads(args)  # shell form would run the worker under /bin/sh, not as PID 1
    assert isinstance(value, list) and all(isinstance(v, str) for v in value)
    return value


@pytest.fixture(scope="module")
def parsed() -> tuple[dict[str, str], list[Stage]]:
    return parse(DOCKERFILE.read_text())


@pytest.fixture(scope="module")
def stages(parsed) -> list[Stage]:
    return parsed[1]


@pytest.fixture(scope="module")
def final(stages: list[Stage]) -> Stage:
    return stages[-1]


def is_pinned(image: str) -> bool:
    """``repo:tag`` with a concrete version tag (or ``@sha256:`` digest), never latest/bare."""
    if re.search(r"@sha256:[0-9a-f]{64}$", image):
        return True
    name = image.rsplit("/", 1)[-1]
    if ":" not in name or "$" in image:
        return False
    tag = name.split(":", 1)[1]
    # A tag that names an exact release: at least major.minor.patch (e.g. 3.11.13-slim-bookworm).
    return tag != "latest" and re.match(r"\d+\.\d+\.\d+", tag) is not None


def test_multi_stage(stages: list[Stage]) -> None:
    assert len(stages) >= 2
    assert stages[0].name, "the build stage should be named so the final stage can COPY --from it"


def test_every_from_is_pinned(stages: list[Stage]) -> None:
    names = {s.name for s in stages if s.name}
    for stage in stages:
        if stage.base in names:
            continue  # FROM <earlier stage>
        assert is_pinned(stage.base), f"FROM {stage.base} is not pinned to a specific version tag"


@pytest.mark.parametrize("image, pinned", [
    ("python:3.11.13-slim-bookworm", True),
    ("python@sha256:" + "a" * 64, True),
    ("python", False),
    ("python:latest", False),
    ("python:3.11-slim", False),
    ("python:slim", False),
    ("${PYTHON_IMAGE}", False),
])
def test_pin_check_itself(image: str, pinned: bool) -> None:
    assert is_pinned(image) is pinned


def test_final_stage_same_base_and_copies_venv(stages: list[Stage], final: Stage) -> None:
    assert final.base == stages[0].base, "the venv must run on the base it was built on"
    copies = [c for c in final.all("COPY") if c.startswith("--from=")]
    assert copies, "final stage must copy the built environment from the builder"
    assert not any(re.search(r"build-essential|gcc", r) for r in final.all("RUN")), \
        "compilers belong to the builder stage only"


def test_builder_installs_the_project(stages: list[Stage]) -> None:
    runs = " ".join(r for s in stages[:-1] for r in s.all("RUN"))
    assert re.search(r"pip install[^&;]*\s\.(\s|$)", runs), "builder must `pip install .`"


def test_final_user_is_non_root(final: Stage) -> None:
    user = final.last("USER")
    assert user is not None, "final stage runs as root"
    uid = user.split(":")[0]
    assert uid not in ("root", "0")
    assert uid == "10001"


def test_runs_the_worker(final: Stage) -> None:
    command = exec_form(final.last("ENTRYPOINT")) + exec_form(final.last("CMD"))
    assert command == ["stream-dedup", "worker"]


def test_entrypoint_is_the_console_script() -> None:
    tomllib = pytest.importorskip("tomllib")
    scripts = tomllib.loads(PYPROJECT.read_text())["project"]["scripts"]
    assert "stream-dedup" in scripts


def test_healthcheck_hits_healthz(final: Stage) -> None:
    check = final.last("HEALTHCHECK")
    assert check is not None and not check.upper().startswith("NONE")
    assert "/healthz" in check
    assert "9108" in check
    assert "127.0.0.1" in check or "localhost" in check
    assert not re.search(r"\b(curl|wget)\b", check), "slim images have neither curl nor wget"
    assert re.search(r"\bpython3?\b", check)


def test_exposes_metrics_port(final: Stage) -> None:
    ports = {p.split("/")[0] for args in final.all("EXPOSE") for p in args.split()}
    assert "9108" in ports


def test_data_dir_is_a_volume(final: Stage) -> None:
    data_dir = env_of(final).get("STREAM_DEDUP_DATA_DIR")
    assert data_dir == "/data"
    volumes = set()
    for args in final.all("VOLUME"):
        volumes.update(json.loads(args) if args.startswith("[") else args.split())
    assert data_dir in volumes


def test_parser_handles_continuations_and_comments() -> None:
    _, (stage,) = parse("ARG B=img:1.2.3\nFROM ${B} AS b\n# c\nRUN a \\\n  # inner\n  && b\nENV X=1 Y=\"2 3\"\n")
    assert stage.base == "img:1.2.3" and stage.name == "b"
    assert stage.all("RUN") == ["a && b"]
    assert env_of(stage) == {"X": "1", "Y": "2 3"}


# ------------------------------------------------------------------------------ .dockerignore

def ignore_patterns() -> list[str]:
    lines = [line.strip() for line in DOCKERIGNORE.read_text().splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def ignored(path: str, patterns: list[str]) -> bool:
    """Simplified Docker semantics: the last matching pattern wins, ``!`` re-includes."""
    result = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatch(p, pattern) or fnmatch.fnmatch(p, pattern.removeprefix("**/")) for p in prefixes):
            result = not negate
    return result


@pytest.mark.parametrize("path", [".venv", ".git", ".venv/lib/python3.11/site-packages/x.py", ".git/HEAD",
                                  ".pytest_cache", ".ruff_cache", "stream_dedup/cli/__pycache__/dedup.cpython-311.pyc",
                                  "data/index/000001.sst"])
def test_dockerignore_excludes(path: str) -> None:
    assert ignored(path, ignore_patterns()), f"{path} would be sent to the Docker build context"


def test_dockerignore_keeps_what_copy_needs(stages: list[Stage]) -> None:
    patterns = ignore_patterns()
    for stage in stages:
        for args in stage.all("COPY"):
            if args.startswith("--from="):
                continue
            *sources, _dest = [w for w in args.split() if not w.startswith("--")]
            for source in sources:
                matches = [p.relative_to(ROOT).as_posix() for p in ROOT.glob(source)]
                if not any(ch in source for ch in "*?["):
                    assert matches, f"COPY source {source} does not exist"
                for match in matches:
                    assert not ignored(match, patterns), f"COPY {source}: excluded by .dockerignore"
    assert not ignored("stream_dedup/config.py", patterns)
    assert not ignored("pyproject.toml", patterns)


# --------------------------------------------------------------------------- installs from the lock

def test_builder_installs_dependencies_from_the_lock(stages: list[Stage]) -> None:
    """Issue 14 item 13: dependencies come only from requirements/runtime.lock (versions and hashes,
    wheels only), then the package alone; no unpinned pip or apt install."""
    builder = stages[0]
    runs = builder.all("RUN")
    lock_installs = [r for r in runs if "-r requirements/runtime.lock" in r]
    assert lock_installs, "the builder must install requirements/runtime.lock"
    assert all("--require-hashes" in r and "--only-binary=:all:" in r and "--no-deps" in r for r in lock_installs)
    assert any("COPY" == kw and "requirements/runtime.lock" in args for kw, args in builder.instructions)
    for run in runs:
        for cmd in re.split(r"&&|;", run):
            if re.search(r"\bpip install\b", cmd):
                assert "--require-hashes" in cmd or ("--no-deps" in cmd and "--no-build-isolation" in cmd), \
                    f"unpinned pip install: {cmd.strip()}"
            assert not re.search(r"\bapt-get install\b", cmd) or re.search(r"\S+=\S+", cmd), \
                f"unpinned apt install: {cmd.strip()}"
    # the lock is installed before the sources are copied (a source edit keeps the dependency layer cached)
    order = [args for kw, args in builder.instructions if kw in ("COPY", "RUN")]
    lock_at = next(i for i, a in enumerate(order) if "-r requirements/runtime.lock" in a)
    src_at = next(i for i, a in enumerate(order) if a.startswith("stream_dedup"))
    assert lock_at < src_at
    assert (ROOT / "requirements" / "runtime.lock").is_file()
