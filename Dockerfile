# syntax=docker/dockerfile:1
#
# stream-dedup worker image.
#
#   docker build -t stream-dedup:0.1.0 .
#   docker run --rm -p 9108:9108 -v stream-dedup-data:/data \
#       -e KAFKA_BOOTSTRAP_SERVERS=broker:9092 stream-dedup:0.1.0
#
# Both stages use the same pinned base so the venv built in the first one runs unchanged in
# the second (same Python, same glibc).  Override with --build-arg PYTHON_IMAGE=... (for
# example to pin by digest: python:3.11.13-slim-bookworm@sha256:...).
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

# ---------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

WORKDIR /src
# Dependencies from the lock (exact versions and hashes, wheels only: no compiler, nothing unpinned),
# made by `make lock` from pyproject.toml; setuptools, which builds the package below, is in it too.
COPY requirements/runtime.lock ./requirements/runtime.lock
RUN pip install --no-deps --require-hashes --only-binary=:all: -r requirements/runtime.lock

COPY pyproject.toml README.md* ./
COPY stream_dedup ./stream_dedup
# A regular (non-editable) install of the package alone: its dependencies are already in /opt/venv,
# and no build isolation means no unpinned setuptools download.  Byte-compiled, so the read-only
# runtime filesystem never needs to write .pyc files.
RUN pip install --no-deps --no-build-isolation . \
    && python -m compileall -q /opt/venv \
    && stream-dedup --help >/dev/null

# ---------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime

LABEL org.opencontainers.image.title="stream-dedup" \
      org.opencontainers.image.description="Streaming near-duplicate detector for news text (Kafka worker)" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    STREAM_DEDUP_DATA_DIR=/data \
    STREAM_DEDUP_METRICS_PORT=9108 \
    NUMBA_CACHE_DIR=/tmp/numba-cache \
    HOME=/home/stream-dedup

RUN groupadd --system --gid 10001 stream-dedup \
    && useradd --system --uid 10001 --gid 10001 --home-dir /home/stream-dedup --create-home \
       --shell /usr/sbin/nologin stream-dedup \
    && mkdir -p /data \
    && chown 10001:10001 /data

COPY --from=builder /opt/venv /opt/venv

# The RocksDB index and the instance id.  Created before VOLUME so a fresh named volume inherits
# the ownership of uid 10001.
VOLUME /data
WORKDIR /data
USER 10001

# /metrics, /healthz (liveness), /readyz (readiness)
EXPOSE 9108

# No curl in slim images: probe with the interpreter that is already there.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request; port = os.environ.get('STREAM_DEDUP_METRICS_PORT') or '9108'; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:%s/healthz' % port, timeout=4).status == 200 else 1)"]

ENTRYPOINT ["stream-dedup"]
CMD ["worker"]
