#!/usr/bin/env bash
# `make test`: every tier but the node one (`make cluster-test`), in three lanes side by side.
#
#   PY=.venv/bin/python OLDEST_TESTS="tests/integration/test_x.py ..." PYTEST_ARGS="..." hack/test.sh
#
# tests/integration waits on the API servers it starts, against deadlines of seconds: it runs
# in the first lane, at full CPU priority. The rest has no such deadline and is cut into four
# parts, each its own pytest process: tests/release (builds, Docker, qemu), tests/image
# (Docker), tests/unit (pure CPU) and the oldest Kubernetes' run (its build, which .ci/run
# starts beside at the lowest priority, waited for before its pytest starts: a build waited
# for inside a test's set-up would meet pytest-timeout's 300 s). Two more lanes, at nice 10 so
# that they take only the CPU the first leaves idle, each take the parts in their own order,
# every part that no lane has taken yet; the first lane, once tests/integration is done, takes
# what is left. So a fresh machine, whose release and oldest builds take many minutes, and a
# warm one, where tests/integration is the longest part, both finish with the lanes nearly
# even. Each part's report follows tests/integration's, in a fixed order; any part failing
# fails `make test`, and so does a part that ran no test (pytest's exit code 5).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

: "${PY:?the Python of the venv}" "${OLDEST_TESTS:?the test modules of the oldest Kubernetes}"
read -r -a args <<<"${PYTEST_ARGS:-}"
parts=(release image unit oldest)
work=$(mktemp -d)
lanes=()
# shellcheck disable=SC2317  # run by the trap
stop_lanes() {
  local pid
  # The whole group: the lane's shell (so that it starts no further part), its pytest, and
  # what that started (a control plane's processes also die with their parent).
  for pid in "${lanes[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  for pid in "${lanes[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap stop_lanes EXIT
trap 'exit 143' TERM INT

part() {
  case $1 in
    release|image|unit)
      CONFIGMIRROR_BUILD=1 "$PY" -m pytest -m "not node" -p no:cacheprovider "tests/$1" \
        "${args[@]}" ;;
    oldest)
      hack/controlplane/build.sh --oldest >/dev/null || true
      # shellcheck disable=SC2086  # a list of paths
      CONFIGMIRROR_BUILD=1 CONFIGMIRROR_KUBERNETES=oldest "$PY" -m pytest -m "not node" \
        -p no:cacheprovider $OLDEST_TESTS "${args[@]}" ;;
  esac
}

# lane NAME PART...: run each PART no lane has claimed yet (mkdir is the claim), in this order.
lane() {
  local name=$1 part_name start status
  shift
  for part_name in "$@"; do
    mkdir "$work/$part_name.claim" 2>/dev/null || continue
    start=$SECONDS
    part "$part_name" >"$work/$part_name.log" 2>&1
    status=$?
    echo "$status $((SECONDS - start)) $name" >"$work/$part_name.exit"
  done
}

# The two lanes beside: each a process group of its own (setsid), stopped whole if make test is
# interrupted, at nice 10 (their children inherit it).
for order in "release image unit oldest" "oldest unit image release"; do
  setsid nice -n 10 bash -c "$(declare -f part lane)
    args=(${args[*]@Q}) work=${work@Q} PY=${PY@Q} OLDEST_TESTS=${OLDEST_TESTS@Q}
    lane 'a lane at nice 10' $order" &
  lanes+=($!)
done

CONFIGMIRROR_BUILD=1 "$PY" -m pytest -m "not node" tests/integration "${args[@]}"
suite=$?
lane "tests/integration's lane, once it was done" unit image oldest release
for pid in "${lanes[@]}"; do wait "$pid"; done
lanes=()

failed=$suite
for name in "${parts[@]}"; do
  read -r status seconds where <"$work/$name.exit" 2>/dev/null || status=1 seconds='?' where=none
  echo "== make test: $name, exit $status in $seconds s ($where):"
  cat "$work/$name.log" 2>/dev/null
  [ "$status" = 0 ] || failed=1
done
exit "$failed"
