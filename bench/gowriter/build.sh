#!/usr/bin/env bash
# Build (once) or find the Go client-go writer of the benchmarks, and print the path of its
# binary as the last line of output, like hack/controlplane/build.sh.
#
#   CONFIGMIRROR_CACHE=/dir   cache root (default: ${XDG_CACHE_HOME:-~/.cache}/configmirror)
#   CONFIGMIRROR_FIND_ONLY=1  only report a finished build; never start one
#
# The binary is cached under a digest of this folder's sources, so an edit rebuilds it. Its
# modules are the ones the control-plane build already fetched (client-go v0.36.3).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log() { echo "gowriter: $*" >&2; }

digest=$(cat "$here/go.mod" "$here/go.sum" "$here/main.go" | sha256sum | cut -c1-12)
cache_root=${CONFIGMIRROR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/configmirror}
out="$cache_root/gowriter/$digest"
if [ -x "$out/gowriter" ]; then
  log "cached in $out"
  echo "$out/gowriter"
  exit 0
fi

if [ -n "${CONFIGMIRROR_FIND_ONLY:-}" ]; then log "not built yet: run bench/gowriter/build.sh"; exit 1; fi
command -v go >/dev/null || { log "Go is needed to build the writer (the control plane needs it too)"; exit 1; }
mkdir -p "$out"
exec 9>"$out/.lock"
flock 9   # two benchmarks at once build once
if [ -x "$out/gowriter" ]; then echo "$out/gowriter"; exit 0; fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false
start=$SECONDS
log "go build (client-go $(sed -n 's/^[[:space:]]*k8s.io\/client-go \(v[^ ]*\).*/\1/p' "$here/go.mod"))"
(cd "$here" && go build -trimpath -ldflags "-s -w" -o "$out/gowriter.tmp" .)
mv "$out/gowriter.tmp" "$out/gowriter"
log "built in $((SECONDS - start)) s"
echo "$out/gowriter"
