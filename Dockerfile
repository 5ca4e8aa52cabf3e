# configmirror's image: a venv holding configmirror and its dependencies, on a Python base.
# Two ways to build it, one result (the base, the environment, one layer holding the venv):
#
#   docker build .    From a checkout, with network access: a builder stage makes
#                     configmirror's wheel from the source and fetches its dependencies' wheels
#                     from PyPI (the default target, the last stage; needs BuildKit: Docker 23+,
#                     or DOCKER_BUILDKIT=1 on 20.10). Behind a proxy that re-signs TLS, hand pip
#                     your CA bundle as a BuildKit secret; it is mounted for that one RUN only
#                     and lands in no layer:
#                       docker build --secret id=ca,src=/etc/ssl/certs/ca-certificates.crt .
#   make image        Offline (hack/image.sh): the wheels are built on the host, then the
#                     target `offline` installs them with no network and no CA bundle. It
#                     comes before every stage that needs BuildKit, so the classic builder
#                     builds it too.
#
# The base is the official image, or, where no registry is reachable, the same Python from
# Debian's packages (hack/base-image.sh): --build-arg BASE_IMAGE=... picks it. Every stage
# starts FROM it, so the venv's interpreter path is valid in the image. Run the image in a
# cluster with deploy/ (see the README's Deploy section).
ARG BASE_IMAGE=python:3.11.14-slim-bookworm

# -- runtime: what the image is apart from the venv ---------------------------------------------
FROM ${BASE_IMAGE} AS runtime
# No .pyc written at run time (the root filesystem is read-only; they are precompiled when the
# venv is made), unbuffered logs.
ENV PATH=/opt/configmirror/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# A numeric non-root user, so runAsNonRoot can verify it without /etc/passwd.
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["configmirror"]
CMD ["run"]

# -- offline (make image): the venv from the wheels hack/image.sh built on the host ------------
FROM ${BASE_IMAGE} AS offline-venv
# The dependencies first, in a layer of their own: a change to configmirror alone reuses it.
# The venv's pip comes from ensurepip (no network).
COPY build/image/wheels/deps/ /wheels/deps/
RUN python3 -m venv /opt/configmirror \
    && /opt/configmirror/bin/pip install --no-cache-dir --no-index \
       --disable-pip-version-check /wheels/deps/*.whl
# Then configmirror. Once pip check is happy, out go the installer (pip, setuptools) and what
# configmirror never imports: the client's asyncio flavour (kubernetes.aio) and the aiohttp
# stack only it needs, about 85 MB of 165. The import at the end proves the operator loads.
# (The stage `venv` below runs these same two commands: a test holds them equal.)
COPY build/image/wheels/app/ /wheels/app/
RUN /opt/configmirror/bin/pip install --no-cache-dir --no-index --no-deps \
       --disable-pip-version-check /wheels/app/*.whl \
    && /opt/configmirror/bin/pip check --disable-pip-version-check \
    && rm -rf /opt/configmirror/lib/python3*/site-packages/kubernetes/aio \
    && /opt/configmirror/bin/pip uninstall --yes --disable-pip-version-check \
       aiohttp aiohttp-retry aiohappyeyeballs aiosignal attrs frozenlist multidict propcache \
       yarl pip setuptools \
    && /opt/configmirror/bin/python -c "import configmirror.cli.main, configmirror.operator.manager"

FROM runtime AS offline
COPY --from=offline-venv /opt/configmirror /opt/configmirror

# -- default (docker build .): the wheels made here, from the source and PyPI ------------------
FROM ${BASE_IMAGE} AS wheels
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src/ src/
# The only stage that reaches the network. configmirror's wheel with fixed zip times (same
# source, same bytes, so the layers below are reused), then its dependencies as wheels only
# (no compiler needed), as hack/wheels.sh makes them on the host. The CA secret, when given,
# is a file under /run/secrets for this RUN only.
RUN --mount=type=secret,id=ca \
    if [ -f /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
    && python3 -m venv /opt/pip \
    && SOURCE_DATE_EPOCH=315532800 /opt/pip/bin/pip wheel --no-cache-dir \
       --disable-pip-version-check --no-deps --wheel-dir /wheels/app . \
    && /opt/pip/bin/pip wheel --no-cache-dir --disable-pip-version-check --only-binary=:all: \
       --wheel-dir /wheels/deps /wheels/app/configmirror-*.whl \
    && rm /wheels/deps/configmirror-*.whl

FROM ${BASE_IMAGE} AS venv
COPY --from=wheels /wheels/deps/ /wheels/deps/
RUN python3 -m venv /opt/configmirror \
    && /opt/configmirror/bin/pip install --no-cache-dir --no-index \
       --disable-pip-version-check /wheels/deps/*.whl
COPY --from=wheels /wheels/app/ /wheels/app/
RUN /opt/configmirror/bin/pip install --no-cache-dir --no-index --no-deps \
       --disable-pip-version-check /wheels/app/*.whl \
    && /opt/configmirror/bin/pip check --disable-pip-version-check \
    && rm -rf /opt/configmirror/lib/python3*/site-packages/kubernetes/aio \
    && /opt/configmirror/bin/pip uninstall --yes --disable-pip-version-check \
       aiohttp aiohttp-retry aiohappyeyeballs aiosignal attrs frozenlist multidict propcache \
       yarl pip setuptools \
    && /opt/configmirror/bin/python -c "import configmirror.cli.main, configmirror.operator.manager"

FROM runtime
COPY --from=venv /opt/configmirror /opt/configmirror
