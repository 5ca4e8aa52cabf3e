#!/usr/bin/env bash
# Build (once) or find the kind node image made of our own Kubernetes build, and print its name
# as the last line of output: configmirror-kind-node:v<Kubernetes version>.
#
#   CONFIGMIRROR_CACHE=/dir   cache root (default: ${XDG_CACHE_HOME:-~/.cache}/configmirror)
#   CONFIGMIRROR_FIND_ONLY=1  only report an image built (or saved) before; never build one
#   DEBIAN_MIRROR=URL         Debian archive for the base (default http://deb.debian.org/debian)
#
# It follows the layout `kind build node-image` makes (kind's images/base files, the binaries in
# /usr/bin, /kind/version, /kind/manifests, every image the cluster needs imported into the
# node's containerd and pinned), but does the build itself: kind's builder fetches etcd,
# CoreDNS, pause, kindnetd and its storage provisioner from registries this machine cannot reach.
# Everything here comes from the Go module proxy and Debian's archive:
#
#   base          Debian $DEBIAN_SUITE (mmdebstrap): systemd, containerd, runc, the CNI plugins,
#                 iptables; kind's node files (entrypoint, units, containerd config) from kind's
#                 module, as kind's images/base Dockerfile lays them out
#   binaries      kubeadm, kubelet, kubectl (hack/controlplane/build.sh --node)
#   images        registry.k8s.io/{kube-apiserver,kube-controller-manager,kube-scheduler,
#                 kube-proxy}:v$KUBERNETES_VERSION, etcd:$ETCD_VERSION-0, pause:$PAUSE_VERSION
#                 (the same build), coredns/coredns:v$COREDNS_VERSION (its Go module, with the
#                 plugins kubeadm's Corefile uses: hack/kind/coredns.sh), tagged as kubeadm
#                 names them, so nothing is pulled
#   pod network   no kindnetd (its module is not served): containerd writes the node's CNI
#                 config from hack/kind/node/cni.template (ptp + host-local); one node
#   storage       kind's fallback StorageClass (no local-path-provisioner image)
#
# The image is labelled with a key of its inputs (the versions, this script, hack/kind/node/)
# and saved to $cache/kind/node-image-<key>.tar: a later run, or a fresh Docker daemon, loads
# that instead of building again.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=../lib/cache.sh
source "$repo/hack/lib/cache.sh"
# shellcheck source=../controlplane/versions.env
source "$repo/hack/controlplane/versions.env"
# shellcheck source=versions.env
source "$here/versions.env"
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}

cache_init kind-node-image
quietly() {  # run a command; show what it printed only when it fails
  local out
  out=$("$@" 2>&1) || { echo "$out" >&2; log "failed: $*"; return 1; }
}

image="configmirror-kind-node:v$KUBERNETES_VERSION"
pinned kind
# The pinned versions (not their comments), this script, CoreDNS's and the node's own files.
key=$( (grep -hv '^#' "$repo/hack/controlplane/versions.env" "$here/versions.env"
        echo "KIND_VERSION=$pinned_version"
        cat "$0" "$here/coredns.sh" "$here"/node/*) | sha256sum | cut -c1-16)
cache=$(cache_dir kind)
tarball="$cache/node-image-$key.tar"

built_key() { docker image inspect --format '{{index .Config.Labels "io.configmirror.kind-node-key"}}' "$image" 2>/dev/null || true; }
found() {
  if [ "$(built_key)" = "$key" ]; then log "$image (inputs $key) is in Docker"; return 0; fi
  if [ -f "$tarball" ]; then
    log "loading $image from $tarball"
    docker load --quiet --input "$tarball" >&2
    [ "$(built_key)" = "$key" ] && return 0
    log "$tarball did not hold $image with inputs $key; building"
  fi
  return 1
}

docker info >/dev/null 2>&1 || { log "no Docker daemon answers (docker info failed)"; exit 1; }
for tool in mmdebstrap go; do
  [ -n "${CONFIGMIRROR_FIND_ONLY:-}" ] || require_command "$tool" "$tool is needed (apt-get install ${tool/go/golang})"
done
cache_or_lock "$image" "$cache/node-image" "make kind-node-image" found

start=$SECONDS
# A build container of a run that died (its daemon with it) holds the base: remove it.
docker ps --all --quiet --filter name=configmirror-kind-build- | xargs --no-run-if-empty docker rm --force >/dev/null
work=$(mktemp -d)
container=""
cleanup() {
  [ -z "$container" ] || docker rm --force --volumes "$container" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# -- what the image is made of -----------------------------------------------------------------
assets=$("$repo/hack/controlplane/build.sh" --node | tail -n 1)
"$repo/hack/tools/build.sh" kind >/dev/null   # kind itself, and its module (the node files) in Go's cache
go_env
kind_module=$(cd "$work" && go mod download -json "${pinned_package%%@*}@v$pinned_version" \
                | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
kind_files="$kind_module/images/base/files"
[ -f "$kind_files/usr/local/bin/entrypoint" ] || { log "no kind node files in $kind_files"; exit 1; }

coredns=$("$here/coredns.sh" | tail -n 1)   # with the plugins kubeadm's Corefile names

# -- Debian root filesystems -------------------------------------------------------------------
debian() {  # debian OUT.tar PACKAGES: a minbase $DEBIAN_SUITE with PACKAGES, no docs
  # force-unsafe-io: dpkg does not fsync every file it unpacks into a root that becomes a tar
  # (as Debian's own container images set it): on a busy disk that halved the wall time of
  # the kube-proxy base here (305 -> 174 s), for the same CPU time.
  if ! mmdebstrap --quiet --variant=minbase --include="$2" \
    --aptopt='APT::Install-Recommends "false"' --dpkgopt=force-unsafe-io \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    "$DEBIAN_SUITE" "$1" \
    "deb $mirror $DEBIAN_SUITE main" "deb $mirror $DEBIAN_SUITE-updates main" \
    "deb $security $DEBIAN_SUITE-security main" >"$1.log" 2>&1; then
    tail -n 30 "$1.log" >&2
    log "mmdebstrap failed (its log: above)"
    return 1
  fi
}
# Each is kept in Docker under its inputs' key until the node is built, so a build that failed
# later starts again from here.
base="configmirror-kind-base:$key"
proxy_base="configmirror-kind-proxy-base:$key"
t=$SECONDS
if ! docker image inspect "$base" >/dev/null 2>&1; then
  log "base: Debian $DEBIAN_SUITE with systemd, containerd, runc, the CNI plugins (mmdebstrap)"
  # kind's images/base package list, less what only other storage drivers, rootless mode or its
  # own tests use (nfs, iscsi, fuse-overlayfs, e2fsprogs, pigz); plus the container runtime and
  # the CNI plugins, which kind builds from source and Debian packages.
  debian "$work/base.tar" "systemd,containerd,runc,containernetworking-plugins,conntrack,\
iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,bash,ca-certificates,curl,\
jq,procps"
  # systemd learns from $container that it runs in one, and stops on SIGRTMIN+3 (SIGTERM
  # re-executes it), as in kind's base image. docker import takes no STOPSIGNAL: a build of
  # metadata only adds it, and no layer.
  docker import --change 'ENV container=docker' \
    --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' \
    --message "Debian $DEBIAN_SUITE for configmirror's kind node (hack/kind/node-image.sh)" \
    "$work/base.tar" "$base-rootfs" >/dev/null
  printf 'FROM %s\nSTOPSIGNAL SIGRTMIN+3\n' "$base-rootfs" | quietly docker build --tag "$base" -
  docker rmi "$base-rootfs" >/dev/null
fi
if ! docker image inspect "$proxy_base" >/dev/null 2>&1; then
  log "kube-proxy's base: Debian $DEBIAN_SUITE with iptables"
  debian "$work/proxy.tar" "iptables"
  docker import --message "Debian $DEBIAN_SUITE with iptables, for kube-proxy" \
    "$work/proxy.tar" "$proxy_base" >/dev/null
fi
rm -f "$work"/*.tar "$work"/*.log
log "Debian root filesystems in $(took "$t")"

# -- the images kubeadm names, from our binaries -------------------------------------------------
component() {  # component REF FROM ENTRYPOINT_JSON FILE=PATH...: a one-layer image in Docker
  local ref=$1 from=$2 entrypoint=$3 dir
  shift 3
  dir=$(mktemp -d -p "$work")
  {
    echo "FROM $from"
    for pair in "$@"; do
      cp "${pair%%=*}" "$dir/"
      echo "COPY $(basename "${pair%%=*}") ${pair#*=}"
    done
    echo "ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin"
    echo "ENTRYPOINT $entrypoint"
  } >"$dir/Dockerfile"
  quietly docker build --tag "$ref" "$dir"
  images+=("$ref")
}
images=()
k8s=registry.k8s.io
for b in kube-apiserver kube-controller-manager kube-scheduler; do
  component "$k8s/$b:v$KUBERNETES_VERSION" scratch "[\"/usr/local/bin/$b\"]" \
    "$assets/$b=/usr/local/bin/$b"
done
cp "$assets/kube-proxy" "$work/kube-proxy.bin"
component "$k8s/kube-proxy:v$KUBERNETES_VERSION" "$proxy_base" '["/usr/local/bin/kube-proxy"]' \
  "$work/kube-proxy.bin=/usr/local/bin/kube-proxy.bin" "$here/node/kube-proxy=/usr/local/bin/kube-proxy"
component "$k8s/etcd:$ETCD_VERSION-0" scratch '["/usr/local/bin/etcd"]' \
  "$assets/etcd=/usr/local/bin/etcd" "$assets/etcdctl=/usr/local/bin/etcdctl"
component "$k8s/pause:$PAUSE_VERSION" scratch '["/pause"]' "$assets/pause=/pause"
component "$k8s/coredns/coredns:v$COREDNS_VERSION" scratch '["/coredns"]' "$coredns=/coredns"

# -- the node: kind's layout, in a container of the base, then committed -------------------------
t=$SECONDS
container="configmirror-kind-build-$key-$$"
docker run --detach --name "$container" --entrypoint=sleep --security-opt seccomp=unconfined \
  "$base" infinity >/dev/null
in_node() { docker exec --interactive "$container" "$@"; }
copy_in() { docker cp "$1" "$container:$2"; }
# kind's images/base files, with the modes its Dockerfile gives them.
tar -C "$kind_files" -c usr/local/bin/entrypoint kind etc LICENSES | in_node tar -C / -x --no-same-owner
in_node bash -euc '
  chmod 0755 /usr/local/bin/entrypoint /kind /kind/bin /kind/bin/*
  find /etc/containerd /etc/default /etc/sysctl.d /etc/systemd/system /etc/crictl.yaml /kind/README.txt /LICENSES \
    -type f -exec chmod 0644 {} +
  # What kind builds from source, from the Debian packages: containerd where its unit looks,
  # the CNI plugins where containerd looks.
  ln -s /usr/bin/containerd /usr/local/bin/containerd
  mkdir -p /opt/cni && ln -s /usr/lib/cni /opt/cni/bin
  # kind images/base: only the units kind enables start; no kernel log in the journal.
  find /lib/systemd/system/sysinit.target.wants/ -name systemd-tmpfiles-setup.service -delete
  rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \
    /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \
    /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/*
  echo "ReadKMsg=no" >>/etc/systemd/journald.conf
  ln -sf /usr/lib/systemd/systemd /sbin/init
  systemctl enable kubelet.service containerd.service undo-mount-hacks.service
  systemctl mask systemd-binfmt.service
  mkdir -p /etc/kubernetes/manifests /kind/manifests
  ctr oci spec \
    | jq ".hooks.createContainer[.hooks.createContainer | length] |= . + {\"path\": \"/kind/bin/mount-product-files.sh\"}" \
    | jq "del(.process.rlimits)" >/etc/containerd/cri-base.json
'
# containerd: our pause; the pod network from the template; no process lowering its
# oom_score_adj below containerd's own (where root lacks CAP_SYS_RESOURCE, as on some CI
# machines, runc would fail every sandbox; elsewhere containerd runs at -999 and nothing changes).
in_node bash -euc "
  sed -i -e 's|sandbox_image = .*|sandbox_image = \"$k8s/pause:$PAUSE_VERSION\"|' \
    -e 's|restrict_oom_score_adj = false|restrict_oom_score_adj = true|' /etc/containerd/config.toml
  grep -q 'sandbox_image = \"$k8s/pause:$PAUSE_VERSION\"' /etc/containerd/config.toml
  grep -q 'restrict_oom_score_adj = true' /etc/containerd/config.toml
  printf '%s\n' '' '# the pod network: containerd writes it from the pod CIDR the kubelet hands over' \
    '[plugins.\"io.containerd.grpc.v1.cri\".cni]' \
    '  conf_template = \"/etc/containerd/cni.template\"' >>/etc/containerd/config.toml
"
copy_in "$here/node/cni.template" /etc/containerd/cni.template
copy_in "$here/node/default-cni.yaml" /kind/manifests/default-cni.yaml
for b in kubeadm kubelet kubectl; do copy_in "$assets/$b" "/usr/bin/$b"; done
in_node bash -euc "chown root:root /usr/bin/kubeadm /usr/bin/kubelet /usr/bin/kubectl /etc/containerd/cni.template /kind/manifests/default-cni.yaml
  chmod 0755 /usr/bin/kubeadm /usr/bin/kubelet /usr/bin/kubectl
  echo -n v$KUBERNETES_VERSION >/kind/version"
log "loading ${#images[@]} images into the node's containerd"
in_node bash -c 'nohup containerd >/tmp/containerd.log 2>&1 &'
in_node bash -euc 'for _ in $(seq 50); do [ -S /run/containerd/containerd.sock ] && ctr version >/dev/null 2>&1 && exit 0; sleep 0.2; done
  cat /tmp/containerd.log >&2; exit 1'
# Compressed as a registry would serve them (docker save writes plain tars): the node image
# is half the size.
docker save "${images[@]}" \
  | in_node ctr --namespace=k8s.io images import --all-platforms --no-unpack --digests --compress-blobs - >/dev/null
for ref in "${images[@]}"; do
  # Pinned, as kind pins what it imports: the kubelet's image GC never removes it.
  in_node ctr --namespace=k8s.io images label "$ref" io.cri-containerd.pinned=pinned >/dev/null
done
# containerd removes the plain layers --compress-blobs replaced only at its next garbage
# collection: a synchronous one now (removing an image runs it), or the image carries both.
in_node ctr --namespace=k8s.io images tag "$k8s/pause:$PAUSE_VERSION" configmirror-kind-gc:now >/dev/null
in_node ctr --namespace=k8s.io images rm --sync configmirror-kind-gc:now >/dev/null
# Stopped, and its database closed, before the commit (sleep, the build's PID 1, reaps no
# one: a zombie containerd is a stopped one).
in_node bash -euc 'pkill -x containerd
  for _ in $(seq 50); do ps -C containerd -o stat= | grep -qv "^Z" || exit 0; sleep 0.2; done; exit 1'
in_node rm -f /tmp/containerd.log
docker commit \
  --change 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]' \
  --change "LABEL io.configmirror.kind-node-key=$key" \
  --change "LABEL io.configmirror.kubernetes-version=v$KUBERNETES_VERSION" \
  "$container" "$image" >/dev/null
docker rm --force --volumes "$container" >/dev/null; container=""
docker rmi "$base" "$proxy_base" "${images[@]}" >/dev/null
log "node assembled in $(took "$t")"

# -- the cache: one tarball, of these inputs -------------------------------------------------------
t=$SECONDS
rm -f "$cache"/node-image-*.tar
docker save --output "$tarball.tmp" "$image"
mv "$tarball.tmp" "$tarball"
log "saved to $tarball ($(du -h "$tarball" | cut -f1)) in $(took "$t"); built in $(took "$start")"
echo "$image"
