# configmirror's image: a venv holding configmirror and its dependencies, on a Python base.
# Build it with `make image` (hack/image.sh): that builds the wheels on the host (so pip in
# the build never needs the network or a CA bundle) and picks the base: the official image,
# or, where no registry is reachable, the same Python from Debian's packages
# (hack/base-image.sh). Run it in a cluster with deploy/ (see the README's Deploy section).

# Both stages start FROM the same base, so the venv's interpreter path is valid in both.
ARG BASE_IMAGE=python:3.11.14-slim-bookworm

# -- build: install the host-built wheels into a venv, offline -------------------------------
FROM ${BASE_IMAGE} AS build
# The dependencies first, in a layer of their own: a change to configmirror alone reuses it.
# The venv's pip comes from ensurepip (no network).
COPY build/image/wheels/deps/ /wheels/deps/
RUN python3 -m venv /opt/configmirror \
    && /opt/configmirror/bin/pip install --no-cache-dir --no-index \
       --disable-pip-version-check /wheels/deps/*.whl
# Then configmirror. Once pip check is happy, out go the installer (pip, setuptools) and what
# configmirror never imports: the client's asyncio flavour (kubernetes.aio) and the aiohttp
# stack only it needs, about 85 MB of 165. The import at the end proves the operator loads.
COPY build/image/wheels/app/ /wheels/app/
RUN /opt/configmirror/bin/pip install --no-cache-dir --no-index --no-deps \
       --disable-pip-version-check /wheels/app/*.whl \
    && /opt/configmirror/bin/pip check --disable-pip-version-check \
    && rm -rf /opt/configmirror/lib/python3*/site-packages/kubernetes/aio \
    && /opt/configmirror/bin/pip uninstall --yes --disable-pip-version-check \
       aiohttp aiohttp-retry aiohappyeyeballs aiosignal attrs frozenlist multidict propcache \
       yarl pip setuptools \
    && /opt/configmirror/bin/python -c "import configmirror.cli, configmirror.manager"

# -- runtime: the base and the venv, nothing else ------------------------------------------
FROM ${BASE_IMAGE}
# No .pyc written at run time (the root filesystem is read-only; they are precompiled
# above), unbuffered logs.
ENV PATH=/opt/configmirror/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build /opt/configmirror /opt/configmirror
# A numeric non-root user, so runAsNonRoot can verify it without /etc/passwd.
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["configmirror"]
CMD ["run"]
