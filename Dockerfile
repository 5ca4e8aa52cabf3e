# configmirror's image: the built wheel and its dependencies on a slim Python, nothing else.
# Build:  make image        Run in a cluster:  kubectl apply -k deploy/

# -- build: turn the source into wheels (the final image gets no compilers, no tests) --------
FROM python:3.11.14-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src/ ./src/
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

# -- runtime --------------------------------------------------------------------------------
FROM python:3.11.14-slim-bookworm
# No .pyc files at run time (the root filesystem is read-only), unbuffered logs.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index /wheels/*.whl \
    && rm -rf /wheels \
    && python -m compileall -q /usr/local/lib/python3.11/site-packages
# A numeric non-root user, so runAsNonRoot can verify it without /etc/passwd.
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["configmirror"]
CMD ["run"]
