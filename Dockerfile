# syntax=docker/dockerfile:1
# One image, two targets. `control` runs the service, the migration step and the Ray head; `worker`
# adds torch and NVML for the GPU nodes that run trials. Both share every layer up to torch, so
# every process of a deployment runs the same Python, Ray and autotuner versions (Ray requires it).
#
#   docker build --target control -t autotuner-control .
#   docker build --target worker -t autotuner-worker --build-arg TORCH="torch==2.5.1" .

ARG PYTHON=3.11

FROM python:${PYTHON}-slim AS control
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
# Installed editable from /app: migrations/ and search_spaces/ are found next to the package.
COPY pyproject.toml README.md alembic.ini ./
COPY autotuner ./autotuner
COPY workers ./workers
COPY migrations ./migrations
COPY search_spaces ./search_spaces
COPY examples ./examples
# Every node of a Ray cluster must run the same Ray (and the worker image the same torch on
# every GPU host): exact versions, set once here, shared by both targets.
ARG RAY_VERSION=2.60.0
RUN pip install "ray[client]==${RAY_VERSION}" && pip install -e . \
    && useradd --create-home --uid 10001 autotuner \
    && chown -R autotuner /app
USER autotuner
EXPOSE 8000
CMD ["autotuner", "serve", "--host", "0.0.0.0", "--port", "8000"]

FROM control AS worker
# An exact torch (PyPI's default Linux wheel bundles the CUDA runtime); override with
# --build-arg TORCH=... to match your driver, the same on every GPU host.
ARG TORCH="torch==2.13.0"
USER root
RUN pip install "${TORCH}" && pip install -e ".[worker,kernels]"
USER autotuner
