# shellcheck shell=bash
# The one way a hack/*/build.sh finds or builds a tool (sourced; trust-manager's
# make/_shared/tools has the same shape): a cache folder per tool and version, a lock so that
# two runs at once build once, "already built?" answered before any build, and `go install` of
# a pinned module. Every build script prints what it found or built (a folder, a binary, an
# image) as the last line of its output; everything else goes to stderr.
#
#   CONFIGMIRROR_CACHE=/dir   cache root (default: ${XDG_CACHE_HOME:-~/.cache}/configmirror)
#   CONFIGMIRROR_FIND_ONLY=1  only report a finished build; never start one
#
#   source "$repo/hack/lib/cache.sh"
#   cache_init helm                     # the name log lines start with
#   out=$(cache_dir helm "$version")    # $CONFIGMIRROR_CACHE/helm/<version>
#   cache_or_lock "$out/helm" "$out" "make helm" [ -x "$out/helm" ]
#   ...build, knowing no other run is building it...
#   echo "$out/helm"

cache_init() {  # NAME: the name this script's log lines start with
  _cache_name=$1
}

log() { echo "${_cache_name:-$(basename "$0")}: $*" >&2; }

took() { echo "$((SECONDS - $1)) s"; }  # took START: seconds since START (a $SECONDS)

cache_root() {
  echo "${CONFIGMIRROR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/configmirror}"
}

cache_dir() {  # PART...: the cache folder $root/PART/... (not created)
  local IFS=/
  echo "$(cache_root)/$*"
}

# cache_or_lock RESULT DIR HINT CHECK...: when the command CHECK... succeeds (already built?),
# print RESULT and exit 0. Otherwise exit 1 under CONFIGMIRROR_FIND_ONLY (saying "run HINT"),
# else hold DIR/.lock (fd 9, until the script exits) and check again: the run that waited for
# another's build prints its result; the one that holds the lock returns to build.
cache_or_lock() {
  local result=$1 dir=$2 hint=$3
  shift 3
  if "$@"; then log "cached in $result"; echo "$result"; exit 0; fi
  if [ -n "${CONFIGMIRROR_FIND_ONLY:-}" ]; then log "not built yet: run $hint"; exit 1; fi
  mkdir -p "$dir"
  exec 9>"$dir/.lock"
  flock 9   # two runs at once build once
  if "$@"; then echo "$result"; exit 0; fi
}

require_command() {  # COMMAND WHY: exit 1 with WHY unless COMMAND is on PATH
  command -v "$1" >/dev/null || { log "$2"; exit 1; }
}

go_env() {  # the environment of every Go build here: the local Go, static, no VCS stamp
  require_command go "Go is needed to build ${_cache_name:-this} (Go 1.26+: apt-get install golang)"
  export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false
}

# go_install OUT PACKAGE@VERSION GO-INSTALL-FLAGS...: `go install` one pinned module's command
# into OUT, with exactly the dependencies its release's go.mod and go.sum pin (no module of
# ours, no tidy). The binary is moved into OUT only once whole.
go_install() {
  local out=$1 package=$2 binary
  shift 2
  binary=${package%@*}; binary=${binary##*/}
  go_env
  rm -rf "$out/src"; mkdir -p "$out/src"
  GOBIN="$out/src" go install -trimpath "$@" "$package"
  mv "$out/src/$binary" "$out/$binary"
  rm -rf "$out/src"
}

# pinned TOOL: its row of hack/tools/pinned.txt, as pinned_version, pinned_package
# (PACKAGE@VERSION) and pinned_flags (go install's: -tags, -ldflags with the -X variables).
pinned() {
  local table name version package tags var xflags=""
  table="$(cd "$(dirname "${BASH_SOURCE[0]}")/../tools" && pwd)/pinned.txt"
  while read -r name version package tags rest; do
    [ "$name" = "$1" ] || continue
    # shellcheck disable=SC2034  # pinned_*: what the caller reads
    pinned_version=$version
    # shellcheck disable=SC2034
    pinned_package=${package//\{v\}/$version}
    for var in $rest; do xflags+=" -X ${var//\{v\}/$version}"; done
    pinned_flags=(-ldflags "-s -w$xflags")
    [ "$tags" = - ] || pinned_flags+=(-tags "$tags")
    return 0
  done < <(grep -v '^[[:space:]]*\(#\|$\)' "$table")
  echo "no tool $1 in $table (it pins: $(pinned_tools | xargs))" >&2
  return 1
}

pinned_tools() {  # the tools hack/tools/pinned.txt pins, one a line
  grep -v '^[[:space:]]*\(#\|$\)' "$(dirname "${BASH_SOURCE[0]}")/../tools/pinned.txt" | awk '{print $1}'
}
