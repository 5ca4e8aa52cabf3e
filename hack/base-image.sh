#!/usr/bin/env bash
# A local stand-in for the official python:3.11-slim-bookworm image, built from Debian's own
# packages, for machines that can reach Debian's archive but not a container registry.
# `make image` calls it only when the official image cannot be pulled (into Docker);
# `make release` for each platform of a release (into buildah's storage). Prints the image's
# name.
#
#   hack/base-image.sh [--arch ARCH] [--buildah] [IMAGE]
#
# ARCH is a Debian architecture (amd64, arm64; default: this machine's). IMAGE defaults to
# configmirror-base:bookworm for this machine's architecture, configmirror-base:bookworm-ARCH
# for another; it is reused when it exists. A foreign architecture's packages are configured
# under emulation (hack/release/binfmt.sh registers qemu-user-static), and only buildah can
# hold its image: Docker 20.10's `docker import` records no architecture but its own.
#
# Debian's python3 has no pip outside a venv (PEP 668); the Dockerfile installs into a venv,
# which python3-venv seeds with pip offline. Remove the image (docker rmi, buildah rmi) to
# rebuild it with the archive's latest security updates.
set -euo pipefail
native=$(dpkg --print-architecture)
arch=$native store=docker
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) arch=${2:?--arch needs a Debian architecture}; shift 2 ;;
    --buildah) store=buildah; shift ;;
    *) break ;;
  esac
done
if [ "$arch" = "$native" ]; then image=${1:-configmirror-base:bookworm}
else image=${1:-configmirror-base:bookworm-$arch}; fi
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}

if [ "$store" = docker ] && [ "$arch" != "$native" ]; then
  echo "base-image: Docker cannot hold a $arch image made here (docker import records $native): use --buildah" >&2
  exit 1
fi
built() {
  { [ "$store" = docker ] && docker image inspect "$image" >/dev/null 2>&1; } \
    || { [ "$store" = buildah ] && buildah inspect --type image "$image" >/dev/null 2>&1; }
}
# Found, or built once under a lock (the image's tests, the release tier and the node tier's
# release may all want it at once): the one that waited finds it built (hack/lib/cache.sh).
# shellcheck source=hack/lib/cache.sh
source "$(dirname "$0")/lib/cache.sh"
cache_init base-image
cache_or_lock "$image" "$(cache_dir base-image "${image//[^A-Za-z0-9._-]/_}.$store")" \
  "hack/base-image.sh" built
if ! command -v mmdebstrap >/dev/null; then
  echo "base-image: mmdebstrap is missing (apt-get install mmdebstrap)" >&2
  exit 1
fi
if [ "$arch" != "$native" ]; then
  "$(dirname "$0")/release/binfmt.sh" "$(case "$arch" in arm64) echo aarch64 ;; *) echo "$arch" ;; esac)"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "base-image: building $image ($arch) from Debian bookworm packages (python3, python3-venv)" >&2
# minbase: essential packages and apt only; no recommended packages, no documentation,
# manual pages or translations. A merged /usr made by mmdebstrap's hook, as in Debian's own
# images, spares the usrmerge package and the perl it needs. dpkg does not fsync each file it
# unpacks (force-unsafe-io, which stays in /etc/dpkg/dpkg.cfg.d/ as in Debian's own images):
# the root becomes a tar, and on a busy disk the fsyncs took half of the wall time.
mmdebstrap --quiet --variant=minbase --architectures="$arch" \
  --include=python3,python3-venv,ca-certificates \
  --aptopt='APT::Install-Recommends "false"' --dpkgopt=force-unsafe-io \
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  bookworm "$work/base.tar" \
  "deb $mirror bookworm main" "deb $mirror bookworm-updates main" \
  "deb $security bookworm-security main" >&2
message="python3 and python3-venv from Debian bookworm (hack/base-image.sh)"
if [ "$store" = docker ]; then
  docker import --change 'CMD ["python3"]' --message "$message" "$work/base.tar" "$image" >&2
else
  container=$(buildah from --arch "$arch" --os linux scratch)
  buildah add --quiet "$container" "$work/base.tar" / >&2
  buildah config --arch "$arch" --os linux --cmd python3 --created-by "$message" "$container" >&2
  buildah commit --quiet --rm "$container" "$image" >/dev/null
fi
echo "$image"
