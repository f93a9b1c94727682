# syntax=docker/dockerfile:1
# The gpuplan operator image: `docker build -t gpuplan-operator:0.1.0 .`
# Runs `python -m gpuplan_operator` as UID 10001 with a read-only root filesystem in mind (the
# chart mounts an emptyDir at /tmp). Deploy it with charts/gpuplan-operator.

ARG PYTHON_IMAGE=python:3.11-slim

# --- builder: the gpuplan wheel and the wheels of its operator dependencies --------------------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# Only what the distribution is built from (pyproject.toml lists these packages; the readme is metadata).
COPY pyproject.toml README.md ./
COPY planner/ planner/
COPY operator/ operator/
COPY loadtest/ loadtest/
RUN pip wheel --wheel-dir /wheels ".[operator]"

# --- final: install from the builder's wheels only, no compilers, no network --------------------
FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels "gpuplan[operator]" \
    && groupadd --system --gid 10001 gpuplan \
    && useradd --system --uid 10001 --gid 10001 --home-dir /tmp --no-create-home \
       --shell /usr/sbin/nologin gpuplan
# Numeric, so that Kubernetes can verify runAsNonRoot without resolving a name.
USER 10001:10001
WORKDIR /tmp
# 8080: kopf's liveness endpoint (/healthz); 8000: Prometheus metrics (/metrics).
EXPOSE 8080 8000
ENTRYPOINT ["python", "-m", "gpuplan_operator"]
