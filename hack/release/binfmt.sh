#!/usr/bin/env bash
# Make this machine run arm64 binaries (the arm64 image's build steps, its base's package
# scripts, its tests) under emulation: qemu-user-static through binfmt_misc.
#
#   hack/release/binfmt.sh [aarch64]
#
# Mounts binfmt_misc when it is absent and registers Debian's qemu-user-static interpreter
# (/usr/lib/binfmt.d/qemu-<arch>.conf) when no interpreter for the architecture is
# registered: a change to the running kernel, so root. The F flag ("fix binary": the kernel
# opens the interpreter once, at registration) is what lets a container, whose filesystem has
# no qemu, run foreign binaries; a registration without it is refused here. A registration that
# exists (systemd-binfmt's, GitHub's setup-qemu-action's) is kept as it is.
set -euo pipefail
arch=${1:-aarch64}
dir=/proc/sys/fs/binfmt_misc
entry=$dir/qemu-$arch
conf=/usr/lib/binfmt.d/qemu-$arch.conf

log() { echo "binfmt: $*" >&2; }
as_root() { [ "$(id -u)" = 0 ] || { log "$1 needs root (run it as root, or: sudo $0 $arch)"; exit 1; }; }

# One registration at a time (a release beside another: the release tier and the node tier's):
# the second finds the entry made.
exec 9>"${TMPDIR:-/tmp}/configmirror-binfmt.lock"
flock 9
if [ ! -e "$dir/register" ]; then
  as_root "mounting binfmt_misc on $dir"
  log "mounting binfmt_misc on $dir"
  mount -t binfmt_misc binfmt_misc "$dir"
fi
if [ ! -e "$entry" ]; then
  [ -r "$conf" ] || { log "no $conf: apt-get install qemu-user-static"; exit 1; }
  as_root "registering $conf"
  log "registering qemu-$arch from $conf"
  # The .conf holds the one line the register file takes (escapes and all).
  tr -d '\n' <"$conf" >"$dir/register"
fi
[ "$(head -n 1 "$entry")" = enabled ] || { log "$entry is registered but disabled"; exit 1; }
flags=$(sed -n 's/^flags: //p' "$entry")
[[ "$flags" == *F* ]] || {
  log "$entry has flags '$flags', without F: containers cannot find its interpreter" \
      "(echo -1 >$entry, then run this again)"; exit 1; }
log "$arch binaries run through $(sed -n 's/^interpreter //p' "$entry") (flags $flags)"
