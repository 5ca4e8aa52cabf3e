#!/usr/bin/env bash
# Build (once) or find one of the pinned Go tools of hack/tools/pinned.txt, and print the
# binary's path as the last line of output (make helm, make kind, make cosign, make crane,
# make syft, make actionlint; hack/promtool/build.sh for promtool).
#
#   hack/tools/build.sh TOOL      helm | kind | promtool | cosign | crane | syft | actionlint
#
#   CONFIGMIRROR_CACHE=/dir   cache root (default: ${XDG_CACHE_HOME:-~/.cache}/configmirror)
#   CONFIGMIRROR_FIND_ONLY=1  only report a finished build; never start one
#
# `go install PACKAGE@VERSION` builds each tool with exactly the dependencies its release's
# go.mod and go.sum pin (no module of ours, nothing in the repo), into $cache/TOOL/VERSION/TOOL,
# reused on every later run (hack/lib/cache.sh: the cache, its lock, the build).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib/cache.sh
source "$here/../lib/cache.sh"

tool=${1:-}
if [ -z "$tool" ] || ! pinned "$tool" 2>/dev/null; then
  echo "usage: $0 $(pinned_tools | paste -sd '|')" >&2
  exit 2
fi
cache_init "$tool"
out=$(cache_dir "$tool" "$pinned_version")
cache_or_lock "$out/$tool" "$out" "make $tool" [ -x "$out/$tool" ]

start=$SECONDS
log "v$pinned_version: go install $pinned_package from the module proxy (minutes on a cold cache)"
go_install "$out" "$pinned_package" "${pinned_flags[@]}"
log "built in $(took "$start"): $("$out/$tool" version 2>/dev/null | head -n 1 || true)"
echo "$out/$tool"
