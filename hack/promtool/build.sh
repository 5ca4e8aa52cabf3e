#!/usr/bin/env bash
# Build (once) or find promtool for the alert and dashboard tests, and print the folder that
# holds it as the last line of output, like hack/helm/build.sh. The folder also holds
# promql-selectors (selectors/main.go): the metric names and label matchers of PromQL
# expressions, read by Prometheus' own parser.
#
#   CONFIGMIRROR_CACHE=/dir   cache root (default: ${XDG_CACHE_HOME:-~/.cache}/configmirror)
#   CONFIGMIRROR_FIND_ONLY=1  only report a finished build; never start one
#
# promtool is built with `go install github.com/prometheus/prometheus/cmd/promtool@vX`, so its
# dependencies are exactly the ones its release's go.mod and go.sum pin (no module of ours, no
# tidy); promql-selectors is built in a throwaway module outside the repo that requires only
# that release, so it parses with the same parser. Both land in $cache/promtool/<version>/ and
# are reused on every later run; an edit of selectors/main.go rebuilds only that helper.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

log() { echo "promtool: $*" >&2; }

cache_root=${CONFIGMIRROR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/configmirror}
out="$cache_root/promtool/$PROMETHEUS_VERSION"
digest=$(sha256sum "$here/selectors/main.go" | cut -c1-12)
built() {
  [ -x "$out/promtool" ] && [ -x "$out/promql-selectors" ] &&
    [ "$(cat "$out/promql-selectors.digest" 2>/dev/null)" = "$digest" ]
}
if built; then
  log "cached in $out"
  echo "$out"
  exit 0
fi

if [ -n "${CONFIGMIRROR_FIND_ONLY:-}" ]; then log "not built yet: run make promtool"; exit 1; fi
command -v go >/dev/null || { log "Go is needed to build promtool"; exit 1; }
mkdir -p "$out"
exec 9>"$out/.lock"
flock 9   # two test runs at once build once
if built; then echo "$out"; exit 0; fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false
module="github.com/prometheus/prometheus@v$PROMETHEUS_MODULE_VERSION"
work="$out/src"
rm -rf "$work"; mkdir -p "$work"
start=$SECONDS
if [ ! -x "$out/promtool" ]; then
  log "Prometheus v$PROMETHEUS_VERSION ($module): go install cmd/promtool from the module proxy (minutes on a cold cache)"
  # remove_all_sd: Prometheus' own build tag that leaves out the service-discovery plugins
  # (AWS, Azure, GCE, ... SDKs: most of a full build's time); checking and unit-testing rules
  # needs none. The -X variables are the ones Prometheus' release build (promu) sets, so
  # `promtool --version` says which release it is.
  GOBIN="$work" go install -trimpath -tags remove_all_sd -ldflags "-s -w \
    -X github.com/prometheus/common/version.Version=$PROMETHEUS_VERSION \
    -X github.com/prometheus/common/version.Branch=HEAD \
    -X github.com/prometheus/common/version.BuildUser=configmirror" \
    "github.com/prometheus/prometheus/cmd/promtool@v$PROMETHEUS_MODULE_VERSION"
  mv "$work/promtool" "$out/promtool"
  log "promtool built in $((SECONDS - start)) s: $("$out/promtool" --version 2>&1 | sed -n 1p)"
fi
t=$SECONDS
log "promql-selectors: go build against $module"
mkdir -p "$work/selectors"
cp "$here/selectors/main.go" "$work/selectors/"
(
  cd "$work/selectors"
  go mod init configmirror.invalid/promql-selectors 2>/dev/null
  go mod edit -require="$module"
  go mod tidy
  go build -trimpath -ldflags "-s -w" -o "$work/promql-selectors" .
)
mv "$work/promql-selectors" "$out/promql-selectors"
echo "$digest" >"$out/promql-selectors.digest"
rm -rf "$work"
log "promql-selectors built in $((SECONDS - t)) s"
echo "$out"
