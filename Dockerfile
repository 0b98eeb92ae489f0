# The suite image: suite and its pinned dependencies on a CUDA PyTorch base; `suite` is the entry point.
#
#   docker build -t suite:latest .                                         # GPU host with registry access
#   scripts/docker-setup                                                   # here: local base, local wheels
#   docker build --build-arg BASE_IMAGE=suite-base:bookworm -t suite:latest .   # the same, by hand
#
# BASE_IMAGE: the official PyTorch image whose torch matches pyproject.toml's pin (2.14.1, CUDA 13.0 wheels),
# so that the pip install below finds torch already there and adds only suite's small dependencies.
# Pin it by digest for reproducible builds; to update it, on a machine that can reach Docker Hub:
#   docker buildx imagetools inspect pytorch/pytorch:<torch>-cuda<cuda>-cudnn9-runtime --format '{{.Manifest.Digest}}'
# and write the answer after the tag as `@sha256:...`. (Not written here: this machine cannot reach any
# registry, so no digest could be read or verified; the CI builds on scripts/build-base-image's base.)
# Any base works that has python3 (>= 3.10) with the venv module and pip: the build installs torch itself
# when the base lacks it (the local Debian base) — the CUDA wheels bring their own CUDA libraries, only the
# driver comes from the host.
ARG BASE_IMAGE=pytorch/pytorch:2.14.1-cuda13.0-cudnn9-runtime

FROM ${BASE_IMAGE}
# A virtualenv that sees the base's packages (the base's torch counts, nothing is installed twice) and keeps
# suite's installs away from the system Python (PEP 668 "externally managed" in Debian/Ubuntu bases).
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    HOME=/home/suite \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Non-root user; its home is writable by any uid because the entry point may run as the owner of the results.
RUN python3 -m venv --system-site-packages --without-pip /opt/venv \
 && groupadd --gid 10001 suite \
 && useradd --uid 10001 --gid 10001 --create-home --home-dir /home/suite --shell /bin/sh suite \
 && chmod 1777 /home/suite \
 && mkdir -p /workspace/results && chown -R suite:suite /workspace

# Dependencies (torch, ...) from the lock only: lock/base.txt pins every package with its sha256 hashes
# (scripts/lock) and pip runs with --require-hashes, so an unlisted package or a changed file fails the build.
# This layer depends only on that file, so changing suite's code does not reinstall torch. The installed lock
# files stay in /opt/venv/suite-lock/, where each run's manifest reads their digest (lock_digest). PIP_ARGS
# lets a build reach a local package mirror (scripts/docker-setup passes extra indexes served from this
# machine's disk); empty on a normal host, where pip uses PyPI. The lock is for CPython 3.11 (the local base);
# a base with another Python needs `scripts/lock` run for it.
ARG PIP_ARGS=""
COPY lock/base.txt /opt/venv/suite-lock/base.txt
# hadolint ignore=SC2086
RUN python3 -m pip install -q --require-hashes $PIP_ARGS -r /opt/venv/suite-lock/base.txt

# Optional extras (e.g. EXTRAS=hf,ray for the compose Ray cluster, comma-separated), each from its lock file
# (lock/<extra>.txt: base + that extra, one resolution): a separate layer, so suite:ray shares the multi-GB
# layer above with suite:latest.
# hf by default: `model: {family: hf, config: ...}` (transformers, tens of MB) works in the main image.
ARG EXTRAS="hf"
COPY lock/ /tmp/lock/
# hadolint ignore=SC2086,DL3013
RUN if [ -n "$EXTRAS" ]; then \
      IFS=,; for e in $EXTRAS; do \
        [ -f "/tmp/lock/$e.txt" ] || { echo "EXTRAS: no lock file lock/$e.txt (scripts/lock makes one per extra)" >&2; exit 1; }; \
        cp "/tmp/lock/$e.txt" /opt/venv/suite-lock/; set -- "$@" -r "/tmp/lock/$e.txt"; \
      done; unset IFS; \
      python3 -m pip install -q --require-hashes $PIP_ARGS "$@"; \
    fi \
 && rm -rf /tmp/lock

# The code: small, quick to rebuild; no network needed (--no-deps, no build isolation).
COPY pyproject.toml /tmp/build/pyproject.toml
COPY suite /tmp/build/suite
COPY compose/entrypoint.sh /usr/local/bin/suite-entrypoint
RUN python3 -m pip install -q --no-deps --no-build-isolation /tmp/build \
 && rm -rf /tmp/build \
 && chmod 0755 /usr/local/bin/suite-entrypoint \
 && suite version

# Identity: the version and git commit as labels (the image digest reaches results through the manifest).
ARG BASE_IMAGE
ARG SUITE_VERSION=unknown
ARG SUITE_REVISION=unknown
# SUITE_BUILD_ID: a hash of the build's inputs (scripts/docker-setup); the entry point compares it with the one
# compose/.image.env was written for, so a stale digest is never recorded for a different image.
ARG SUITE_BUILD_ID=""
ENV SUITE_GIT_COMMIT=${SUITE_REVISION} \
    SUITE_BUILD_ID=${SUITE_BUILD_ID}
LABEL org.opencontainers.image.title="suite" \
      org.opencontainers.image.description="Reproducibility benchmark suite for distributed PyTorch training" \
      org.opencontainers.image.version="${SUITE_VERSION}" \
      org.opencontainers.image.revision="${SUITE_REVISION}" \
      org.opencontainers.image.base.name="${BASE_IMAGE}" \
      io.github.suite.build-id="${SUITE_BUILD_ID}"

USER 10001:10001
WORKDIR /workspace
# `docker run IMAGE plan FILE` runs `suite plan FILE`; `docker run IMAGE FILE.yaml` runs `suite run FILE.yaml`;
# `docker run IMAGE --exec CMD...` runs another program (torchrun, ray) through the same entry point.
ENTRYPOINT ["/usr/local/bin/suite-entrypoint"]
CMD ["--help"]
