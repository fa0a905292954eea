#!/usr/bin/env bash
# Ensure a helm v3 binary exists at ${STREAM_DEDUP_CACHE:-$HOME/.cache/stream-dedup}/bin/helm and print its path.
#
# Helm is built from source with the local Go toolchain (`go install` through the Go module
# proxy), so no release tarball download is needed.  The binary is cached: once built it is
# reused as long as it reports the pinned version.  A cold build takes a few minutes.
#
# Environment:
#   STREAM_DEDUP_CACHE  cache root (default: $HOME/.cache/stream-dedup)
#   HELM_VERSION        helm release to build (default below)
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
CACHE="${STREAM_DEDUP_CACHE:-$HOME/.cache/stream-dedup}"
BIN_DIR="$CACHE/bin"
HELM="$BIN_DIR/helm"

installed_version() {
    "$HELM" version --template '{{ .Version }}' 2>/dev/null || true
}

if [[ -x "$HELM" && "$(installed_version)" == "$HELM_VERSION" ]]; then
    echo "$HELM"
    exit 0
fi

if ! command -v go >/dev/null 2>&1; then
    echo "scripts/helm.sh: 'go' not found; install Go (https://go.dev/dl/) or put helm $HELM_VERSION at $HELM" >&2
    exit 1
fi

mkdir -p "$BIN_DIR"
echo "scripts/helm.sh: building helm $HELM_VERSION with $(go version | cut -d' ' -f3) into $BIN_DIR (one-time, a few minutes)" >&2
start=$(date +%s)
# Build into a temporary GOBIN and move into place, so an interrupted build never leaves a
# half-written binary at the cached path.
tmp_bin="$(mktemp -d "$BIN_DIR/.helm-build.XXXXXX")"
trap 'rm -rf "$tmp_bin"' EXIT
# Stamp what helm's own Makefile stamps (go install does not): the version `helm version`
# reports, and the Kubernetes version (from helm's client-go dependency, v0.N -> 1.N) that
# `helm template`/`helm lint` assume; unstamped, helm assumes Kubernetes 1.20.
gomod="$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
k8s_minor="$(sed -n 's#^[[:space:]]*k8s.io/client-go v0\.\([0-9]*\)\..*#\1#p' "$gomod" | head -n1)"
if [[ -z "$k8s_minor" ]]; then
    echo "scripts/helm.sh: cannot find the k8s.io/client-go version in $gomod" >&2
    exit 1
fi
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
for pkg in pkg/lint/rules pkg/chartutil; do
    ldflags+=" -X helm.sh/helm/v3/$pkg.k8sVersionMajor=1 -X helm.sh/helm/v3/$pkg.k8sVersionMinor=$k8s_minor"
done
GOBIN="$tmp_bin" CGO_ENABLED=0 go install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
mv -f "$tmp_bin/helm" "$HELM"
echo "scripts/helm.sh: built in $(( $(date +%s) - start ))s" >&2

if [[ "$(installed_version)" != "$HELM_VERSION" ]]; then
    echo "scripts/helm.sh: $HELM reports '$(installed_version)', expected $HELM_VERSION" >&2
    exit 1
fi
echo "$HELM"
