"""Fixtures of the deployment tests (Dockerfile, Helm chart, Grafana dashboard).

``helm``: path of a helm v3 binary, from ``$HELM`` (``make test`` sets it to the one
``scripts/helm.sh`` builds) or else ``helm`` on ``PATH``.  If ``$HELM`` is set but unusable the
tests FAIL; if there is no helm at all they FAIL under CI (``$CI`` set) and are skipped
otherwise, saying how to get one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = REPO_ROOT / "helm" / "stream-dedup"
RELEASE = "sd"
NAMESPACE = "dedup-test"

Helm = Callable[..., subprocess.CompletedProcess]


def _find_helm() -> str:
    from_env = os.environ.get("HELM", "").strip()
    if from_env:
        path = shutil.which(from_env) or from_env
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            pytest.fail(f"HELM={from_env!r} is not an executable file (run `bash scripts/helm.sh`)",
                        pytrace=False)
        return path
    path = shutil.which("helm")
    if path:
        return path
    message = ("helm not found: set HELM=/path/to/helm or run `make test` "
               "(scripts/helm.sh builds helm v3 into $STREAM_DEDUP_CACHE/bin)")
    if os.environ.get("CI"):
        pytest.fail(message + " [CI is set, so this is an error]", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def helm_path() -> str:
    path = _find_helm()
    proc = subprocess.run([path, "version", "--template", "{{ .Version }}"], capture_output=True,
                          text=True, timeout=60, check=False)
    if proc.returncode != 0 or not proc.stdout.startswith("v3."):
        pytest.fail(f"{path} is not a working helm v3 (version: {proc.stdout!r}, {proc.stderr.strip()!r})",
                    pytrace=False)
    return path


@pytest.fixture(scope="session")
def helm(helm_path: str, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """``helm(*args)`` runs helm isolated from the user's config/cache and returns the process."""
    home = tmp_path_factory.mktemp("helm-home")
    env = {
        **os.environ,
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_DATA_HOME": str(home / "data"),
        "KUBECONFIG": str(home / "kubeconfig-unused"),
    }

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([helm_path, *args], capture_output=True, text=True, env=env,
                              cwd=REPO_ROOT, timeout=120, check=False)

    return run


@pytest.fixture(scope="session")
def render(helm: Helm) -> Callable[..., list[dict[str, Any]]]:
    """``render(*extra_args)``: ``helm template`` of the chart, parsed into a list of manifests."""

    def do(*args: str) -> list[dict[str, Any]]:
        proc = helm("template", RELEASE, str(CHART_DIR), "--namespace", NAMESPACE, *args)
        assert proc.returncode == 0, f"helm template {' '.join(args)} failed:\n{proc.stderr}"
        return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]

    return do
