# The gpuplan operator image. Build it with `make image` (podman): it puts the wheels of gpuplan's
# dependencies into dist/wheels/deps/ and gpuplan's own wheel into dist/wheels/ first, and the
# build installs from there only, without a package index or network. By hand, with docker:
#   pip wheel --wheel-dir dist/wheels/deps '.[operator]' && mv dist/wheels/deps/gpuplan-*.whl dist/wheels/
#   docker build -t gpuplan-operator:0.1.0 .
# Runs `python -m gpuplan_operator` as UID 10001 with a read-only root filesystem in mind (the
# chart mounts an emptyDir at /tmp). Deploy it with charts/gpuplan-operator.

# Any Debian-like image with CPython 3.11 and its venv module; `make image` passes one it made
# from Debian packages (mmdebstrap + python3), so no registry is needed.
ARG PYTHON_IMAGE=python:3.11-slim

# --- deps: a virtual environment with gpuplan's dependencies, from their wheels only ----------
# A stage of its own so that it stays cached while only gpuplan changes.
FROM ${PYTHON_IMAGE} AS deps
# (bytecode is compiled here, at install: the final root filesystem is read-only)
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY dist/wheels/deps/ /wheels/deps/
RUN python3 -m venv /opt/gpuplan \
    && /opt/gpuplan/bin/python -m pip install --no-index /wheels/deps/*.whl

# --- builder: gpuplan itself ----------------------------------------------------------------------
FROM deps AS builder
COPY dist/wheels/*.whl /wheels/
RUN /opt/gpuplan/bin/python -m pip install --no-index --find-links=/wheels/deps --find-links=/wheels \
       "gpuplan[operator]" \
    && /opt/gpuplan/bin/python -m pip uninstall --yes pip \
    && /opt/gpuplan/bin/python -c "import gpuplan_operator.handlers, gpuplan.cli"

# --- final: the base and the environment; no wheels, no pip --------------------------------------
FROM ${PYTHON_IMAGE}
COPY --from=builder /opt/gpuplan /opt/gpuplan
# A passwd entry for UID 10001 (tools that look the user up); numeric USER below, so that
# Kubernetes can verify runAsNonRoot without resolving a name.
RUN echo 'gpuplan:x:10001:10001:gpuplan operator:/tmp:/usr/sbin/nologin' >>/etc/passwd \
    && echo 'gpuplan:x:10001:' >>/etc/group
ENV PATH=/opt/gpuplan/bin:${PATH} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
USER 10001:10001
WORKDIR /tmp
# 8080: kopf's liveness endpoint (/healthz); 8000: Prometheus metrics (/metrics).
EXPOSE 8080 8000
ENTRYPOINT ["python", "-m", "gpuplan_operator"]
