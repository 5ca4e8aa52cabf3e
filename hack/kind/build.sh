#!/usr/bin/env bash
# Build (once) or find kind for `make kind-test` and the node tier, and print the folder that
# holds it as the last line of output, like hack/helm/build.sh.
#
#   CONFIGMIRROR_CACHE=/dir   cache root (default: ${XDG_CACHE_HOME:-~/.cache}/configmirror)
#   CONFIGMIRROR_FIND_ONLY=1  only report a finished build; never start one
#
# kind is built with `go install sigs.k8s.io/kind@vX`, so its dependencies are exactly the ones
# its release's go.mod and go.sum pin; the result lands in $cache/kind/<version>/kind. The module
# itself stays in Go's module cache: hack/kind/node-image.sh reads kind's node-image files
# (images/base/files) from there.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

log() { echo "kind: $*" >&2; }

cache_root=${CONFIGMIRROR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/configmirror}
out="$cache_root/kind/$KIND_VERSION"
if [ -x "$out/kind" ]; then
  log "cached in $out"
  echo "$out"
  exit 0
fi

if [ -n "${CONFIGMIRROR_FIND_ONLY:-}" ]; then log "not built yet: run make kind"; exit 1; fi
command -v go >/dev/null || { log "Go is needed to build kind"; exit 1; }
mkdir -p "$out"
exec 9>"$out/.lock"
flock 9   # two test runs at once build once
if [ -x "$out/kind" ]; then echo "$out"; exit 0; fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false
work="$out/src"
rm -rf "$work"; mkdir -p "$work"
start=$SECONDS
log "kind v$KIND_VERSION: go install from the module proxy"
GOBIN="$work" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kind@v$KIND_VERSION"
mv "$work/kind" "$out/kind"
rm -rf "$work"
log "built in $((SECONDS - start)) s: $("$out/kind" version)"
echo "$out"
