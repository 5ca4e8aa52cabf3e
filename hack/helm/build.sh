#!/usr/bin/env bash
# Build (once) or find helm for the chart tests, and print the folder that holds it as the last
# line of output, like hack/controlplane/build.sh.
#
#   CONFIGMIRROR_CACHE=/dir   cache root (default: ${XDG_CACHE_HOME:-~/.cache}/configmirror)
#   CONFIGMIRROR_FIND_ONLY=1  only report a finished build; never start one
#
# helm is built with `go install helm.sh/helm/v4/cmd/helm@vX`, so its dependencies are exactly
# the ones its release's go.mod and go.sum pin (no module of ours, no tidy); the result lands in
# $cache/helm/<version>/helm and is reused on every later run.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

log() { echo "helm: $*" >&2; }

cache_root=${CONFIGMIRROR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/configmirror}
out="$cache_root/helm/$HELM_VERSION"
if [ -x "$out/helm" ]; then
  log "cached in $out"
  echo "$out"
  exit 0
fi

if [ -n "${CONFIGMIRROR_FIND_ONLY:-}" ]; then log "not built yet: run make helm"; exit 1; fi
command -v go >/dev/null || { log "Go is needed to build helm"; exit 1; }
mkdir -p "$out"
exec 9>"$out/.lock"
flock 9   # two test runs at once build once
if [ -x "$out/helm" ]; then echo "$out"; exit 0; fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false
work="$out/src"
rm -rf "$work"; mkdir -p "$work"
start=$SECONDS
log "helm v$HELM_VERSION: go install from the module proxy (minutes on a cold cache)"
# The same ldflags as helm's own Makefile for a release tag, so `helm version` says v$HELM_VERSION.
GOBIN="$work" go install -trimpath -ldflags "-s -w \
  -X helm.sh/helm/v4/internal/version.version=v$HELM_VERSION \
  -X helm.sh/helm/v4/internal/version.metadata= \
  -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
  "helm.sh/helm/v4/cmd/helm@v$HELM_VERSION"
mv "$work/helm" "$out/helm"
rm -rf "$work"
log "built in $((SECONDS - start)) s: $("$out/helm" version --short)"
echo "$out"
