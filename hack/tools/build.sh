#!/usr/bin/env bash
# Build (once) or find one of the release tools, and print the binary's path as the last line
# of output (make cosign, make crane, make syft, make actionlint).
#
#   hack/tools/build.sh cosign|crane|syft|actionlint
#
#   CONFIGMIRROR_CACHE=/dir   cache root (default: ${XDG_CACHE_HOME:-~/.cache}/configmirror)
#   CONFIGMIRROR_FIND_ONLY=1  only report a finished build; never start one
#
# Like hack/helm/build.sh: `go install MODULE@VERSION` builds each tool with exactly the
# dependencies its release's go.mod and go.sum pin (no module of ours, nothing in the repo), into
# $cache/<tool>/<version>/<tool>, reused on every later run. A flock makes two builds at once
# build once.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

tool=${1:?usage: hack/tools/build.sh cosign|crane|syft|actionlint}
# package, version, and the -X flags that make `TOOL version` print the release's version
# (each project's own release build sets the same variables).
case "$tool" in
  cosign)
    version=$COSIGN_VERSION
    package=github.com/sigstore/cosign/v3/cmd/cosign
    xflags="-X sigs.k8s.io/release-utils/version.gitVersion=v$version -X sigs.k8s.io/release-utils/version.gitTreeState=clean" ;;
  crane)
    version=$CRANE_VERSION
    package=github.com/google/go-containerregistry/cmd/crane
    xflags="-X github.com/google/go-containerregistry/cmd/crane/cmd.Version=v$version" ;;
  syft)
    version=$SYFT_VERSION
    package=github.com/anchore/syft/cmd/syft
    xflags="-X main.version=$version -X main.gitTreeState=clean" ;;
  actionlint)
    version=$ACTIONLINT_VERSION
    package=github.com/rhysd/actionlint/cmd/actionlint
    xflags="-X github.com/rhysd/actionlint.version=$version" ;;
  *) echo "usage: $0 cosign|crane|syft|actionlint" >&2; exit 2 ;;
esac

log() { echo "$tool: $*" >&2; }

cache_root=${CONFIGMIRROR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/configmirror}
out="$cache_root/$tool/$version"
if [ -x "$out/$tool" ]; then
  log "cached in $out"
  echo "$out/$tool"
  exit 0
fi

if [ -n "${CONFIGMIRROR_FIND_ONLY:-}" ]; then log "not built yet: run make $tool"; exit 1; fi
command -v go >/dev/null || { log "Go is needed to build $tool"; exit 1; }
mkdir -p "$out"
exec 9>"$out/.lock"
flock 9   # two runs at once build once
if [ -x "$out/$tool" ]; then echo "$out/$tool"; exit 0; fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false
work="$out/src"
rm -rf "$work"; mkdir -p "$work"
start=$SECONDS
log "v$version: go install $package from the module proxy (minutes on a cold cache)"
GOBIN="$work" go install -trimpath -ldflags "-s -w $xflags" "$package@v$version"
mv "$work/$tool" "$out/$tool"
rm -rf "$work"
log "built in $((SECONDS - start)) s"
echo "$out/$tool"
