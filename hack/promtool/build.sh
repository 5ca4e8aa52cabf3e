#!/usr/bin/env bash
# Build (once) or find promtool for the alert and dashboard tests, and print the folder that
# holds it as the last line of output. The folder also holds promql-selectors
# (selectors/main.go): the metric names and label matchers of PromQL expressions, read by
# Prometheus' own parser.
#
#   CONFIGMIRROR_CACHE=/dir   cache root (default: ${XDG_CACHE_HOME:-~/.cache}/configmirror)
#   CONFIGMIRROR_FIND_ONLY=1  only report a finished build; never start one
#
# promtool is hack/tools/build.sh's (pinned in hack/tools/pinned.txt); promql-selectors is built
# beside it in a throwaway module outside the repo that requires only that Prometheus release,
# so it parses with the same parser. An edit of selectors/main.go rebuilds only that helper.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib/cache.sh
source "$here/../lib/cache.sh"
cache_init promtool

promtool=$("$here/../tools/build.sh" promtool | tail -n 1)
out=$(dirname "$promtool")
digest=$(sha256sum "$here/selectors/main.go" | cut -c1-12)
built() {
  [ -x "$out/promql-selectors" ] && [ "$(cat "$out/promql-selectors.digest" 2>/dev/null)" = "$digest" ]
}
cache_or_lock "$out" "$out" "make promtool" built

pinned promtool
module=${pinned_package%/cmd/promtool@*}@${pinned_package#*@}
go_env
t=$SECONDS
log "promql-selectors: go build against $module"
work="$out/src-selectors"
rm -rf "$work"; mkdir -p "$work"
cp "$here/selectors/main.go" "$work/"
(
  cd "$work"
  go mod init configmirror.invalid/promql-selectors 2>/dev/null
  go mod edit -require="$module"
  go mod tidy
  go build -trimpath -ldflags "-s -w" -o "$work/promql-selectors" .
)
mv "$work/promql-selectors" "$out/promql-selectors"
echo "$digest" >"$out/promql-selectors.digest"
rm -rf "$work"
log "promql-selectors built in $(took "$t")"
echo "$out"
