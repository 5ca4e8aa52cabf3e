#!/usr/bin/env bash
# Build (once) or find CoreDNS for the kind node image, with the plugins the cluster's Corefile
# uses, and print the binary's path as the last line of output.
#
#   CONFIGMIRROR_CACHE=/dir   cache root (default: ${XDG_CACHE_HOME:-~/.cache}/configmirror)
#   CONFIGMIRROR_FIND_ONLY=1  only report a finished build; never start one
#
# The Corefile is the one kubeadm deploys (`kubeadm init phase addon coredns --print-manifest`,
# our kubeadm, hack/controlplane/build.sh --node); kind deploys it unchanged. Each directive is mapped to its package through CoreDNS's own
# plugin.cfg, and a main of coremain and those packages is built in a throwaway module that
# requires github.com/coredns/coredns at COREDNS_VERSION only, so every dependency is at the
# version CoreDNS's release pins. That is CoreDNS's documented way to choose plugins at build
# time (plugin.cfg, or a main of your own). The full build also compiles the route53, azure,
# clouddns, dnstap, trace (Datadog), geoip, etcd and nomad plugins with their SDKs: measured
# cold on 2 cores, several times the CPU of this one (see the commit that added this script).
# The plugin chain's order is CoreDNS's (dnsserver.Directives), whatever the imports' order.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=../lib/cache.sh
source "$repo/hack/lib/cache.sh"
# shellcheck source=../controlplane/versions.env
source "$repo/hack/controlplane/versions.env"
# shellcheck source=versions.env
source "$here/versions.env"

cache_init coredns

assets=$("$repo/hack/controlplane/build.sh" --node | tail -n 1) \
  || { log "kubeadm is needed to read the Corefile it deploys (make node)"; exit 1; }

# The directives of kubeadm's Corefile (those at the top level of each server block).
manifest=$("$assets/kubeadm" init phase addon coredns --print-manifest \
           --kubernetes-version "v$KUBERNETES_VERSION" 2>/dev/null) \
  || { log "kubeadm init phase addon coredns --print-manifest failed"; exit 1; }
directives=$(python3 -c '
import re, sys
lines = sys.stdin.read().splitlines()
# The ConfigMap'"'"'s "Corefile: |" block: the lines indented deeper than its key.
start = next(i for i, line in enumerate(lines) if line.strip() == "Corefile: |")
indent = len(lines[start]) - len(lines[start].lstrip())
names, depth = [], 0
for line in lines[start + 1:]:
    if line.strip() and len(line) - len(line.lstrip()) <= indent:
        break
    text = line.split("#", 1)[0].strip()
    if not text:
        continue
    if depth == 1 and text != "}":
        names.append(text.split()[0])
    depth += text.count("{") - text.count("}")
if not names or depth != 0:
    sys.exit(f"no server block of directives in the Corefile kubeadm prints (depth {depth})")
print(" ".join(dict.fromkeys(names)))
' <<<"$manifest") || { log "could not read the directives of kubeadm's Corefile"; exit 1; }
read -r -a plugins <<<"$directives"

key=$(printf '%s\n' "$COREDNS_VERSION" "${plugins[@]}" | cat - "$0" | sha256sum | cut -c1-12)
out=$(cache_dir kind "coredns-$COREDNS_VERSION-$key")
cache_or_lock "$out/coredns" "$out" "make kind-node-image" [ -x "$out/coredns" ]

go_env
work="$out/src"
rm -rf "$work"; mkdir -p "$work"
start=$SECONDS
cd "$work"
module=github.com/coredns/coredns
dir=$(go mod download -json "$module@v$COREDNS_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
[ -f "$dir/plugin.cfg" ] || { log "no plugin.cfg in $dir"; exit 1; }
imports=()
for name in "${plugins[@]}"; do
  # plugin.cfg: NAME:PACKAGE, a package under plugin/ or a full import path.
  package=$(sed -n "s|^$name:\(.*\)$|\1|p" "$dir/plugin.cfg")
  [ -n "$package" ] || { log "the Corefile names $name, which CoreDNS v$COREDNS_VERSION's plugin.cfg lacks"; exit 1; }
  [[ "$package" == */* ]] || package="$module/plugin/$package"
  imports+=("$package")
done
{
  echo "// CoreDNS with the plugins of the kind node's Corefile (hack/kind/coredns.sh)."
  echo "package main"
  echo
  echo "import ("
  printf '\t_ "%s"\n' "${imports[@]}"
  echo
  echo "	\"$module/coremain\""
  echo ")"
  echo
  echo "func main() { coremain.Run() }"
} >main.go
cat >go.mod <<EOF
module local/coredns-bin

go 1.26.0
EOF
log "v$COREDNS_VERSION with ${plugins[*]}: go build from the module proxy"
go get "$module@v$COREDNS_VERSION" >/dev/null 2>&1 || go get "$module@v$COREDNS_VERSION"
go mod tidy
go build -trimpath -ldflags "-s -w -X $module/coremain.GitCommit=v$COREDNS_VERSION" -o coredns .
# Every directive of the Corefile is compiled in (coredns -plugins lists one a line).
listed=$(./coredns -plugins)
for name in "${plugins[@]}"; do
  grep -qx "$name" <<<"$listed" || { log "the build lacks plugin $name:"; echo "$listed" >&2; exit 1; }
done
mv coredns "$out/coredns"
cd "$out"; rm -rf "$work"
log "built in $(took "$start"): $("$out/coredns" -version | sed -n 1p)"
echo "$out/coredns"
