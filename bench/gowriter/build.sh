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
# shellcheck source=../../hack/lib/cache.sh
source "$here/../../hack/lib/cache.sh"
cache_init gowriter

digest=$(cat "$here/go.mod" "$here/go.sum" "$here/main.go" | sha256sum | cut -c1-12)
out=$(cache_dir gowriter "$digest")
cache_or_lock "$out/gowriter" "$out" "bench/gowriter/build.sh" [ -x "$out/gowriter" ]

go_env
start=$SECONDS
log "go build (client-go $(sed -n 's/^[[:space:]]*k8s.io\/client-go \(v[^ ]*\).*/\1/p' "$here/go.mod"))"
(cd "$here" && go build -trimpath -ldflags "-s -w" -o "$out/gowriter.tmp" .)
mv "$out/gowriter.tmp" "$out/gowriter"
log "built in $(took "$start")"
echo "$out/gowriter"
