#!/usr/bin/env bash
# A local stand-in for the official python:3.11-slim-bookworm image, built from Debian's own
# packages, for machines that can reach Debian's archive but not a container registry.
# `make image` calls it only when the official image cannot be pulled. Prints the image's name.
#
#   hack/base-image.sh [IMAGE]      default configmirror-base:bookworm; reused when it exists
#
# Debian's python3 has no pip outside a venv (PEP 668); the Dockerfile installs into a venv,
# which python3-venv seeds with pip offline. Remove the image (docker rmi) to rebuild it with
# the archive's latest security updates.
set -euo pipefail
image=${1:-configmirror-base:bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}

if docker image inspect "$image" >/dev/null 2>&1; then
  echo "$image"
  exit 0
fi
if ! command -v mmdebstrap >/dev/null; then
  echo "base-image: mmdebstrap is missing (apt-get install mmdebstrap)" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "base-image: building $image from Debian bookworm packages (python3, python3-venv)" >&2
# minbase: essential packages and apt only; no recommended packages, no documentation,
# manual pages or translations. A merged /usr made by mmdebstrap's hook, as in Debian's own
# images, spares the usrmerge package and the perl it needs.
mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates \
  --aptopt='APT::Install-Recommends "false"' \
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  bookworm "$work/base.tar" \
  "deb $mirror bookworm main" "deb $mirror bookworm-updates main" \
  "deb $security bookworm-security main" >&2
docker import --change 'CMD ["python3"]' \
  --message "python3 and python3-venv from Debian bookworm (hack/base-image.sh)" \
  "$work/base.tar" "$image" >&2
echo "$image"
