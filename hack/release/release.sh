#!/usr/bin/env bash
# `make release`: configmirror as users install it, published to a registry.
#
#   REGISTRY=HOST[:PORT][/PATH] VERSION=X.Y.Z [COSIGN_KEY=cosign.key COSIGN_PASSWORD=...] \
#     hack/release/release.sh                          (or UNSIGNED=1 instead of the key)
#
# 1. REGISTRY/configmirror:VERSION, an OCI image index of one image per platform (PLATFORMS,
#    default linux/amd64,linux/arm64), each built from the Dockerfile as `make image` builds it
#    (same base rule, the wheels for that platform), with buildah. A foreign platform's build
#    steps run under qemu-user-static (hack/release/binfmt.sh).
# 2. A cosign signature of the index and of each image, and an attestation of each image's SBOM
#    (COSIGN_KEY, a cosign key file; COSIGN_PASSWORD its password; no transparency log entry).
#    COSIGN_KEYLESS=1 signs with the ambient OIDC identity instead (GitHub Actions: a Fulcio
#    certificate and a Rekor entry; COSIGN_CERTIFICATE_IDENTITY and
#    COSIGN_CERTIFICATE_OIDC_ISSUER name it for the check at the end). Without either the
#    release is refused unless UNSIGNED=1, and then says it is unsigned.
# 3. The chart at oci://REGISTRY/charts/configmirror:VERSION, its default image
#    REGISTRY/configmirror:VERSION (signed too).
# 4. dist/: install.yaml (`kubectl kustomize deploy/` with the image pinned by digest), one SBOM
#    per platform (CycloneDX JSON, by syft, read back from the registry), the chart's .tgz,
#    configmirror's wheel (`pip install` it: the CLI, run-time dependencies only), the kubectl
#    plugin for krew (configmirror.yaml, its manifest, and one kubectl-configmirror-VERSION-OS-
#    ARCH.tar.gz per platform it names: hack/release/krew.py says what they hold) and
#    checksums.txt (sha256sum -c checksums.txt). The wheel and the plugin are made first: they
#    need only pip and the package index.
#
# A registry on a loopback address (127.0.0.1:5000, localhost:5000) is spoken to over plain
# HTTP, as Docker does; PLAIN_HTTP=1 forces that for another, PLAIN_HTTP=0 forbids it. Other
# knobs: BASE_IMAGE (one base for every platform, e.g. the official python image; default: the
# official image where it can be pulled, else one built from Debian's packages per platform),
# DIST (default dist), KUBECTL, PYTHON (a python3 with pip; `make release` passes the venv's).
# The plugin's: KREW_PLATFORMS (default linux/amd64,linux/arm64,darwin/amd64,darwin/arm64),
# KREW_PYTHONS (the CPythons it holds compiled dependencies for, default 3.11,3.12,3.13,3.14),
# KREW_URI_BASE (the URL dist/'s files are downloaded from, the manifest's uri: URI_BASE/<archive>)
# and KREW_HOMEPAGE; on GitHub Actions they default to this repository's release of vVERSION and
# the repository, elsewhere to file:// URLs of this machine's dist/ and checkout (what
# `kubectl krew install --manifest=dist/configmirror.yaml --archive=dist/<archive>` needs).
# Credentials for the registry are the tools' own (buildah, helm and cosign read
# ~/.docker/config.json and their logins).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD

log() { echo "release: $*" >&2; }
die() { echo "release: $*" >&2; exit 1; }

# -- what is asked for, checked before anything is built --------------------------------------
registry=${REGISTRY:-}
version=${VERSION:-}
platforms=${PLATFORMS:-linux/amd64,linux/arm64}
dist=${DIST:-dist}
source_version=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' src/configmirror/__init__.py)

[ -n "$registry" ] || die "REGISTRY is required: the registry and path to publish to, e.g." \
  "REGISTRY=ghcr.io/YOUR-NAME or REGISTRY=127.0.0.1:5000/test (no default: none is ours)"
[[ "$registry" != *://* ]] || die "REGISTRY=$registry: give HOST[:PORT][/PATH], without a scheme"
[[ "$registry" =~ ^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)*$ ]] \
  || die "REGISTRY=$registry is not HOST[:PORT][/PATH] in lower case (an OCI repository name)"
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "VERSION=$version is not X.Y.Z"
[ "$version" = "$source_version" ] || die "VERSION=$version, but src/configmirror/__init__.py" \
  "says $source_version: the image would report another version. Set __version__ (and the" \
  "chart's version and appVersion) to $version first"

host=${registry%%/*}
case "${PLAIN_HTTP:-auto}" in
  auto) case "$host" in localhost|localhost:*|127.*|\[::1\]*) plain_http=1 ;; *) plain_http=0 ;; esac ;;
  1|0) plain_http=$PLAIN_HTTP ;;
  *) die "PLAIN_HTTP=$PLAIN_HTTP: 1, 0 or unset" ;;
esac

if [ -n "${COSIGN_KEY:-}" ]; then
  [ -r "$COSIGN_KEY" ] || die "COSIGN_KEY=$COSIGN_KEY: no such readable key file"
  signed=1 signer="the key $COSIGN_KEY"
elif [ "${COSIGN_KEYLESS:-}" = 1 ]; then
  if [ -z "${COSIGN_CERTIFICATE_IDENTITY:-}" ] || [ -z "${COSIGN_CERTIFICATE_OIDC_ISSUER:-}" ]; then
    die "COSIGN_KEYLESS=1 needs COSIGN_CERTIFICATE_IDENTITY and COSIGN_CERTIFICATE_OIDC_ISSUER"
  fi
  signed=1 signer="the identity $COSIGN_CERTIFICATE_IDENTITY (keyless)"
elif [ "${UNSIGNED:-}" = 1 ]; then
  signed=0
  log "UNSIGNED: COSIGN_KEY is not set and UNSIGNED=1: nothing of this release will be signed"
else
  die "COSIGN_KEY is not set: this release would be UNSIGNED. Set COSIGN_KEY to a cosign key" \
    "file (cosign generate-key-pair; its password in COSIGN_PASSWORD), or UNSIGNED=1 to" \
    "publish it unsigned"
fi

image=$registry/configmirror
chart_repo=oci://$registry/charts
log "configmirror $version for $platforms -> $image:$version, $chart_repo/configmirror:$version" \
  "($([ "$plain_http" = 1 ] && echo "plain HTTP" || echo HTTPS))"

# -- tools ------------------------------------------------------------------------------------
command -v buildah >/dev/null || die "buildah is needed (apt-get install buildah)"
tool() { hack/tools/build.sh "$1" | tail -n 1; }
crane=$(tool crane)
syft=$(tool syft)
helm=$(tool helm)
[ "$signed" = 0 ] || cosign=$(tool cosign)
# kubectl for `kubectl kustomize`: KUBECTL, else the suite's pinned one (hack/controlplane), else PATH's.
if [ -n "${KUBECTL:-}" ]; then kubectl=$KUBECTL
elif [ -x "${CONFIGMIRROR_CONTROLPLANE_ASSETS:-}/kubectl" ]; then
  kubectl=$CONFIGMIRROR_CONTROLPLANE_ASSETS/kubectl
elif assets=$(CONFIGMIRROR_FIND_ONLY=1 hack/controlplane/build.sh 2>/dev/null | tail -n 1); then
  kubectl=$assets/kubectl
elif command -v kubectl >/dev/null; then kubectl=kubectl
else die "kubectl is needed for install.yaml (kubectl kustomize): put it on PATH or set KUBECTL"
fi

tls_verify=true crane_flags=() helm_flags=() cosign_flags=()
if [ "$plain_http" = 1 ]; then
  tls_verify=false crane_flags=(--insecure) helm_flags=(--plain-http)
  cosign_flags=(--allow-http-registry --allow-insecure-registry)
  export SYFT_REGISTRY_INSECURE_USE_HTTP=true
fi
export SYFT_CHECK_FOR_APP_UPDATE=false
# The release's work folder, one per run: two releases at once (the release tier beside the
# node tier's) never share one. Removed on exit, whatever the outcome.
mkdir -p "$repo/build"
work=$(mktemp -d "$repo/build/release.XXXXXX")
list=configmirror-release-$$ probe=
cleanup() {
  [ -z "$probe" ] || buildah rm "$probe" >/dev/null 2>&1 || true
  buildah manifest rm "$list" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM INT  # so that the EXIT trap runs
sign_flags=() verify_flags=()
if [ -n "${COSIGN_KEY:-}" ]; then
  # Fails here, before any build, on a wrong password or a file that is not a key.
  errors=$(mktemp)
  pub=$(COSIGN_PASSWORD=${COSIGN_PASSWORD-} "$cosign" public-key --key "$COSIGN_KEY" 2>"$errors") \
    || die "COSIGN_KEY=$COSIGN_KEY: cosign cannot read it (a cosign private key, and" \
      "COSIGN_PASSWORD its password?): $(cat "$errors")"
  rm -f "$errors"
  # Offline: no transparency log, and no signing config (which fetches Sigstore's trusted root
  # through TUF, out of reach here). cosign 3 calls both flags deprecated; they are pinned.
  sign_flags=(--key "$COSIGN_KEY" --use-signing-config=false --tlog-upload=false)
  verify_flags=(--key "$work/cosign.pub" --insecure-ignore-tlog=true)
elif [ "$signed" = 1 ]; then
  verify_flags=(--certificate-identity "$COSIGN_CERTIFICATE_IDENTITY"
                --certificate-oidc-issuer "$COSIGN_CERTIFICATE_OIDC_ISSUER")
fi

mkdir -p "$work" "$dist"
# Only what a release writes there goes: DIST may be a folder that holds other things.
rm -f "$dist/install.yaml" "$dist"/sbom-linux-*.cdx.json "$dist"/configmirror-*.tgz "$dist/checksums.txt" \
  "$dist"/configmirror-*.whl "$dist/configmirror.yaml" "$dist"/kubectl-configmirror-*.tar.gz
[ -z "${COSIGN_KEY:-}" ] || printf '%s\n' "$pub" >"$work/cosign.pub"

# -- 0. the wheel and the kubectl plugin (krew): only pip and the index, so first ---------------
python=${PYTHON:-python3}
wheel=$(PYTHON=$python hack/release/wheel.sh "$work/wheel" | tail -n 1)
cp "$wheel" "$dist/"
if [ -n "${GITHUB_REPOSITORY:-}" ]; then
  github=${GITHUB_SERVER_URL:-https://github.com}/$GITHUB_REPOSITORY
  krew_homepage=${KREW_HOMEPAGE:-$github}
  krew_uri_base=${KREW_URI_BASE:-$github/releases/download/v$version}
else
  krew_homepage=${KREW_HOMEPAGE:-file://$repo}
  krew_uri_base=${KREW_URI_BASE:-file://$(realpath "$dist")}
  [ -n "${KREW_URI_BASE:-}" ] || log "krew: KREW_URI_BASE is not set: the manifest's uri is this" \
    "machine's dist/ (kubectl krew install --manifest=... --archive=... takes it); set it to" \
    "where dist/'s files will be downloaded from to publish the plugin"
fi
krew_archives=()
krew_pythons=${KREW_PYTHONS:-3.11,3.12,3.13,3.14}
krew_platforms=${KREW_PLATFORMS:-linux/amd64,linux/arm64,darwin/amd64,darwin/arm64}
for platform in ${krew_platforms//,/ }; do
  os=${platform%%/*} arch=${platform#*/}
  archive=$dist/kubectl-configmirror-$version-$os-$arch.tar.gz
  "$python" hack/release/krew.py wheelhouse --os "$os" --arch "$arch" --pythons "$krew_pythons" \
    "$wheel" "$work/krew/$os-$arch"
  "$python" hack/release/krew.py archive "$work/krew/$os-$arch" LICENSE "$archive"
  krew_archives+=("$platform=$archive")
done
"$python" hack/release/krew.py manifest --version "$version" --homepage "$krew_homepage" \
  --uri-base "$krew_uri_base" "$dist/configmirror.yaml" "${krew_archives[@]}"
log "the wheel $(basename "$wheel") and the kubectl plugin for krew ($krew_platforms; CPython" \
  "$krew_pythons): dist/configmirror.yaml"

# -- 1. one image per platform, into one index ------------------------------------------------
official=$(sed -n 's/^ARG BASE_IMAGE=//p' Dockerfile)
host_arch=$(dpkg --print-architecture)

base_for() {  # the id in buildah's storage of the base for Debian/OCI architecture $1
  local arch=$1 ref
  if [ -n "${BASE_IMAGE:-}" ]; then
    buildah pull --quiet --platform "linux/$arch" "$BASE_IMAGE" || die "cannot pull $BASE_IMAGE for linux/$arch"
  elif buildah pull --quiet --platform "linux/$arch" "docker.io/library/$official" 2>/dev/null; then
    :  # the official image, as `make image` prefers it
  elif [ "$arch" = "$host_arch" ]; then
    # `make image`'s own base (in Docker), so this platform's image is built on the same one.
    log "cannot pull $official; using make image's base, built from Debian's packages"
    ref=$(hack/base-image.sh)
    buildah pull --quiet "docker-daemon:$ref"
  else
    log "cannot pull $official for linux/$arch; using a base built from Debian's $arch packages"
    ref=$(hack/base-image.sh --arch "$arch" --buildah)
    buildah inspect --type image --format '{{.FromImageID}}' "$ref"
  fi
}

for platform in ${platforms//,/ }; do
  [[ "$platform" =~ ^linux/(amd64|arm64)$ ]] || die "PLATFORMS: $platform is not linux/amd64 or linux/arm64"
  arch=${platform#linux/}
  [ "$arch" = "$host_arch" ] || hack/release/binfmt.sh "$([ "$arch" = arm64 ] && echo aarch64 || echo x86_64)"
  base=$(base_for "$arch" | tail -n 1)
  # The base's Python, read off its filesystem: the interpreter python3 names (python3.11).
  probe=$(buildah from --pull=never --quiet "$base")
  root=$(buildah mount "$probe")
  interpreter=
  for link in usr/local/bin/python3 usr/bin/python3; do
    [ -L "$root/$link" ] || [ -f "$root/$link" ] || continue
    interpreter=$(basename "$(readlink "$root/$link" || echo "$link")"); break
  done
  buildah umount "$probe" >/dev/null; buildah rm "$probe" >/dev/null; probe=
  [[ "$interpreter" =~ ^python(3\.[0-9]+)$ ]] || die "the base ${base:0:12} has no python3.X on /usr/(local/)bin"
  pyver=${BASH_REMATCH[1]}
  machine=$([ "$arch" = arm64 ] && echo aarch64 || echo x86_64)
  log "$platform: on base ${base:0:12} (Python $pyver, $machine)"
  # A build context of its own per platform, laid out as `make image`'s (the Dockerfile copies
  # build/image/wheels/), so a release never meets a `make image` running beside it.
  context=$work/context-$arch
  mkdir -p "$context"
  cp .dockerignore "$context/"
  hack/wheels.sh "$context/build/image/wheels" "$pyver" "$machine"
  # No network in the build (the Dockerfile's target `offline` installs the wheels offline): no
  # CNI bridge and no iptables rules on this machine.
  buildah build --quiet --layers --network none --platform "$platform" --build-arg "BASE_IMAGE=$base" \
    --target offline --file "$repo/Dockerfile" --manifest "$list" "$context" >/dev/null
done

buildah manifest push --quiet --all --format oci --tls-verify="$tls_verify" \
  --digestfile "$work/index.digest" "$list" "docker://$image:$version"
digest=$(cat "$work/index.digest")
index=$("$crane" manifest "${crane_flags[@]}" "$image@$digest")
log "pushed $image:$version = $digest"
for platform in ${platforms//,/ }; do
  child=$("$crane" digest "${crane_flags[@]}" --platform "$platform" "$image@$digest")
  log "  $platform: $image@$child"
done
[ "$(python3 -c 'import json, sys; print(json.load(sys.stdin).get("mediaType"))' <<<"$index")" \
  = application/vnd.oci.image.index.v1+json ] \
  || die "the registry holds no OCI image index at $image@$digest"

# -- 2. the SBOMs: what each image holds, read back from the registry ---------------------------
for platform in ${platforms//,/ }; do
  arch=${platform#linux/}
  "$syft" scan --quiet --platform "$platform" "registry:$image@$digest" \
    --output "cyclonedx-json=$dist/sbom-linux-$arch.cdx.json"
done
log "SBOMs: $(cd "$dist" && echo sbom-*.json)"

# -- 3. the chart, its default image this release's ---------------------------------------------
mkdir -p "$work/chart"
cp -r charts/configmirror "$work/chart/"
# values.yaml and the chart's README say what the tree's chart says of its image: no registry
# publishes it. The released chart's is this release's.
python3 - "$work/chart/configmirror" "$image" <<'PY'
import sys
from pathlib import Path
chart, image = Path(sys.argv[1]), sys.argv[2]
values = chart / "values.yaml"
text = values.read_text()
old = text[text.index("image:\n"):text.index("  repository: configmirror\n")]
new = ("image:\n  # This release's image (an OCI index: linux/amd64, linux/arm64). The tag defaults to\n"
       "  # the chart's appVersion; verify its signature with cosign verify (README, Install).\n")
text = text.replace(old, new, 1).replace("  repository: configmirror\n", f"  repository: {image}\n", 1)
values.write_text(text)
readme = chart / "README.md"
text = readme.read_text()
start = text.index("No registry publishes the image:")
end = text.index("\n\n", start)
readme.write_text(text[:start] + (
    f"Its default image is `{image}` at the chart's appVersion, the release it was published\n"
    "with: an OCI index for linux/amd64 and linux/arm64, signed with cosign (the repository's\n"
    "README, Install, says how to verify it).") + text[end:])
PY
"$helm" package "$work/chart/configmirror" --version "$version" --app-version "$version" \
  --destination "$dist" >/dev/null
tgz=$dist/configmirror-$version.tgz
[ "$("$helm" show values "$tgz" | sed -n 's/^  repository: //p')" = "$image" ] \
  || die "the packaged chart's image.repository is not $image"
"$helm" push "$tgz" "$chart_repo" "${helm_flags[@]}" >"$work/helm-push.log" 2>&1 \
  || { cat "$work/helm-push.log" >&2; die "helm push $tgz $chart_repo failed"; }
chart_digest=$(sed -n 's/^Digest: //p' "$work/helm-push.log")
log "pushed $chart_repo/configmirror:$version = $chart_digest"

# -- 4. install.yaml: deploy/ with the image pinned by digest -----------------------------------
overlay=$work/overlay
mkdir -p "$overlay"
cat >"$overlay/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $(realpath --relative-to="$overlay" deploy)
images:
  - name: configmirror
    newName: $image
    digest: $digest
EOF
{
  echo "# configmirror $version: kubectl apply -f install.yaml (README, Install)."
  echo "# Its image, $image@$digest, is $image:$version."
  "$kubectl" kustomize "$overlay"
} >"$dist/install.yaml"
grep -q "image: $image@$digest$" "$dist/install.yaml" \
  || die "install.yaml does not run $image@$digest"

# -- 5. signatures: the index, each image, their SBOMs, the chart -------------------------------
if [ "$signed" = 1 ]; then
  publish() {  # cosign sign|attest ...; its chatter in the work folder, shown when it fails
    "$cosign" "$1" --yes "${sign_flags[@]}" "${cosign_flags[@]}" "${@:2}" >>"$work/cosign.log" 2>&1 \
      || { tail -n 20 "$work/cosign.log" >&2; die "cosign $1 ${*: -1} failed"; }
  }
  publish sign --recursive "$image@$digest"
  for platform in ${platforms//,/ }; do
    arch=${platform#linux/}
    child=$("$crane" digest "${crane_flags[@]}" --platform "$platform" "$image@$digest")
    publish attest --type cyclonedx --predicate "$dist/sbom-linux-$arch.cdx.json" "$image@$child"
  done
  publish sign "$registry/charts/configmirror@$chart_digest"
  # The release checks its own signature as a user would: by the tag.
  check=$("$cosign" verify "${verify_flags[@]}" "${cosign_flags[@]}" "$image:$version" 2>&1) \
    || die "cosign verify $image:$version failed: $check"
  log "signed the index, each image (and its SBOM attestation) and the chart with $signer"
fi

(cd "$dist" && sha256sum -- install.yaml sbom-*.cdx.json "configmirror-$version.tgz" \
  "$(basename "$wheel")" configmirror.yaml kubectl-configmirror-"$version"-*.tar.gz >checksums.txt)
log "dist/: $(cd "$dist" && echo *)"
if [ "$signed" = 1 ]; then
  log "done: configmirror $version, signed"
else
  log "done: configmirror $version, UNSIGNED (UNSIGNED=1)"
fi
echo "$image@$digest"
