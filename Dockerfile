# Placeholder: the container image is built in the "Ship it" issue (multi-stage, non-root,
# read-only root filesystem). Until then configmirror runs locally: `make demo`.
FROM python:3.11-slim
