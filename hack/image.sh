#!/usr/bin/env bash
# Build configmirror's image (`make image`): the wheels on this host, then `docker build`.
#
#   hack/image.sh IMAGE        e.g. hack/image.sh configmirror:0.1.0
#   hack/image.sh --base       only print the base it would build on (pulled or built first)
#
# The base is the Dockerfile's default (the official python image) when it can be pulled,
# else a local base built from Debian's packages (hack/base-image.sh). BASE_IMAGE=... forces
# one. The wheels (configmirror's own, and its dependencies for the base's Python and CPU)
# are built or downloaded here by hack/wheels.sh, so the build in Docker is offline: it needs
# no registry access and no CA bundle, and bakes in neither. It builds the Dockerfile's target
# `offline`, which the classic builder can build as well as BuildKit (plain `docker build .`
# makes the wheels inside the build instead, from PyPI).
set -euo pipefail
cd "$(dirname "$0")/.."
image=${1:?usage: hack/image.sh IMAGE | --base}
official=$(sed -n 's/^ARG BASE_IMAGE=//p' Dockerfile)
wheels=build/image/wheels

base=${BASE_IMAGE:-}
if [ -z "$base" ]; then
  if docker image inspect "$official" >/dev/null 2>&1 \
     || timeout 600 docker pull --quiet "$official" >&2; then
    base=$official
  else
    echo "image: cannot pull $official; using a base built from Debian's packages" >&2
    base=$(hack/base-image.sh)
  fi
fi

if [ "$image" = --base ]; then
  echo "$base"
  exit 0
fi

read -r pyver arch < <(docker run --rm --network none --entrypoint python3 "$base" -c \
  'import platform, sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}", platform.machine())')
echo "image: $image on $base (Python $pyver, $arch)" >&2
# One build at a time in this tree (the image's tests beside the node tier's): both fill
# build/image/wheels, which the Dockerfile copies.
mkdir -p build
exec 8>build/image.lock
flock 8
hack/wheels.sh "$wheels" "$pyver" "$arch"
docker build --build-arg BASE_IMAGE="$base" --target offline --tag "$image" .
