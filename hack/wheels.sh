#!/usr/bin/env bash
# The wheels an image installs (hack/image.sh, hack/release/release.sh): configmirror's own in
# DEST/app, its dependencies for one Python and CPU in DEST/deps (the Dockerfile installs them
# in two layers).
#
#   hack/wheels.sh DEST PYTHON_VERSION ARCH      e.g. hack/wheels.sh build/image/wheels 3.11 aarch64
#
# ARCH is the base's `platform.machine()` (x86_64, aarch64). They are built or downloaded here,
# with this host's pip and its trust store, so the image build is offline: it needs no registry
# access and no CA bundle, and bakes in neither. configmirror's wheel is hack/release/wheel.sh's
# (`make dist`'s): same source, same bytes, so a builder's cache reuses the install instead of
# piling up a new layer per build. Any python3 with pip does it (PYTHON=..., else .venv/bin/python
# when there is one, else python3): `make image` needs no dev venv.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:?usage: hack/wheels.sh DEST PYTHON_VERSION ARCH}
pyver=${2:?usage: hack/wheels.sh DEST PYTHON_VERSION ARCH}
arch=${3:?usage: hack/wheels.sh DEST PYTHON_VERSION ARCH}
python=${PYTHON:-}
if [ -z "$python" ]; then
  if [ -x .venv/bin/python ]; then python=.venv/bin/python; else python=python3; fi
fi
rm -rf "$dest"
mkdir -p "$dest/app" "$dest/deps"
PYTHON=$python hack/release/wheel.sh "$dest/app" >/dev/null
"$python" -m pip download --quiet --disable-pip-version-check --dest "$dest/deps" \
  --only-binary=:all: --implementation cp --python-version "$pyver" \
  --platform "manylinux2014_$arch" --platform "manylinux_2_28_$arch" \
  "$dest"/app/configmirror-*.whl
rm "$dest"/deps/configmirror-*.whl
