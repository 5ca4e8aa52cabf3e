#!/usr/bin/env bash
# configmirror's wheel: what `pip install` takes (`make dist`, hack/wheels.sh, the release).
#
#   hack/release/wheel.sh DEST [PIP_WHEEL_ARGS...]     prints DEST/configmirror-<version>-py3-none-any.whl
#
# `pip install DEST/configmirror-*.whl` gives the commands configmirror and kubectl-configmirror
# with the run-time dependencies only (pyproject.toml's [project] dependencies; the test, lint
# and bench extras are never installed unless asked for). No dev venv is needed: any python3
# with pip builds it (PYTHON=..., else .venv/bin/python when there is one, else python3), and
# pip fetches the build backend (setuptools) into an isolated build environment.
#
# It is built from a fresh copy of what the wheel is made of (pyproject.toml, README.md,
# LICENSE, src/ without caches): a build/lib left by an earlier build (a module since deleted)
# never lands in it, and two builds at once share nothing. SOURCE_DATE_EPOCH fixes the zip
# times: same source, same bytes.
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=${1:?usage: hack/release/wheel.sh DEST [PIP_WHEEL_ARGS...]}
shift
python=${PYTHON:-}
if [ -z "$python" ]; then
  if [ -x .venv/bin/python ]; then python=.venv/bin/python; else python=python3; fi
fi
[[ "$python" == */* ]] && python=$(realpath -s "$python")
"$python" -m pip --version >/dev/null 2>&1 || {
  echo "wheel: $python has no pip: PYTHON=/path/to/a/python3 with pip (apt-get install" \
    "python3-pip, or any venv)" >&2
  exit 1
}
version=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' src/configmirror/__init__.py)
mkdir -p "$dest"
dest=$(realpath "$dest")
source=$(mktemp -d)
trap 'rm -rf "$source"' EXIT
tar --create --exclude=__pycache__ --exclude='*.egg-info' --exclude='*.pyc' \
  pyproject.toml README.md LICENSE src | tar --extract --directory "$source"
rm -f "$dest/configmirror-$version-"*.whl
(cd "$source" && SOURCE_DATE_EPOCH=315532800 "$python" -m pip wheel --quiet \
  --disable-pip-version-check --no-deps --wheel-dir "$dest" "$@" .)
ls "$dest/configmirror-$version-"*.whl
