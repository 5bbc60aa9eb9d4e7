# syntax=docker/dockerfile:1
#
# medhelm-local appliance images. Two final targets:
#
#   docker build --target cpu -t medhelm-local:0.1.0-cpu .   # appliance + embedded llama.cpp model (no GPU)
#   docker build --target gpu -t medhelm-local:0.1.0-gpu .   # vLLM (CUDA) only: the model servers
#
# Both run as UID/GID 10001, work with a read-only root filesystem (writable paths: the home volume
# /var/lib/medhelm, the audit volume /var/lib/medhelm-audit and /tmp), carry no secrets and no package
# manager. Base images are pinned by digest: deploy/IMAGES.md says how to update them.
# Build with BuildKit (the default builder since Docker 23): it builds only the stages a target needs.
# Lint: hadolint Dockerfile (tests/deploy/test_deploy_dockerfile.py runs it; the one ignore is documented inline).

# Base images, pinned by digest (multi-arch index digests). Each appears on exactly one FROM line below;
# deploy/IMAGES.md says how to update them. To build from a local mirror, retag the same digest there
# and point these lines at it (the digest, not the registry name, is what identifies the content).
FROM python:3.12-slim-bookworm@sha256:782412e85d0f0984994c290652577d4018aff08145c85b262bb63dc0c7522254 AS python-base
# vllm/vllm-openai:v0.31.0 (multi-arch index digest; why this release: deploy/IMAGES.md).
FROM vllm/vllm-openai:v0.31.0@sha256:c1c9f6fd5c109ba7f0546a59f5b2f15fb87f64c77782e90a27b648b42a8e67c3 AS vllm-base

# ---------------------------------------------------------------------------------------------------
# wheel: the appliance as a wheel (pure Python), for the cpu target (the gpu target has no appliance).
FROM python-base AS wheel
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY medhelm_local ./medhelm_local
RUN python -m pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# ---------------------------------------------------------------------------------------------------
# cpu-builder: a virtualenv with the appliance and its [embedded] extra. llama-cpp-python is built from
# source here (the only stage with a compiler), for a portable x86-64/arm64 baseline rather than the
# build host's CPU (GGML_NATIVE=OFF), without OpenMP so the final image needs no libgomp.
FROM python-base AS cpu-builder
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1 \
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_OPENMP=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
    FORCE_CMAKE=1
# Build tools for this throw-away stage only; the base image is pinned by digest (see deploy/IMAGES.md).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential cmake git \
    && rm -rf /var/lib/apt/lists/*
COPY --from=wheel /wheels /wheels
# The wheel's own dependency pins (pyproject.toml) apply; llama-cpp-python is compiled, never a prebuilt binary.
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir --no-binary llama-cpp-python \
        "$(find /wheels -name 'medhelm_local-*.whl' -print -quit)[embedded]" \
    && /opt/venv/bin/python -m compileall -q /opt/venv/lib \
    && /opt/venv/bin/pip uninstall -y pip setuptools wheel \
    && /opt/venv/bin/python -c "import llama_cpp, medhelm_local; print('ok', llama_cpp.__version__)"

# ---------------------------------------------------------------------------------------------------
# cpu: the final CPU image. No compiler, no apt/dpkg, no pip; non-root.
FROM python-base AS cpu
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="medhelm-local" \
      org.opencontainers.image.description="MedHELM-style LLM evaluation appliance, CPU target with an embedded llama.cpp model" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="medhelm-local" \
      org.opencontainers.image.source="https://example.invalid/medhelm-local" \
      org.opencontainers.image.base.name="docker.io/library/python:3.12-slim-bookworm"
# Package manager and pip removed (the dpkg status file stays so image scanners can still list packages);
# setuid/setgid bits stripped; the two volume mount points created for UID 10001.
RUN groupadd --system --gid 10001 medhelm \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/medhelm --no-create-home \
        --shell /usr/sbin/nologin medhelm \
    && install -d -o 10001 -g 10001 -m 0700 /var/lib/medhelm /var/lib/medhelm-audit \
    && python -m pip uninstall -y pip setuptools wheel \
    && rm -rf /usr/bin/apt* /usr/bin/dpkg* /usr/lib/apt /usr/lib/dpkg /etc/apt /var/lib/apt /var/cache/apt \
        /var/cache/debconf /usr/share/doc /usr/share/man \
    && find / -xdev -type f -perm /6000 -exec chmod a-s {} +
COPY --from=cpu-builder /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    HOME=/var/lib/medhelm \
    MEDHELM_HOME=/var/lib/medhelm \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TMPDIR=/tmp \
    VLLM_NO_USAGE_STATS=1 \
    DO_NOT_TRACK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    HF_DATASETS_OFFLINE=1
WORKDIR /var/lib/medhelm
VOLUME ["/var/lib/medhelm", "/var/lib/medhelm-audit"]
USER 10001:10001
HEALTHCHECK --interval=60s --timeout=20s --start-period=30s --retries=3 \
    CMD ["medhelm-local", "doctor", "--json"]
ENTRYPOINT ["medhelm-local"]
CMD ["doctor", "--json"]

# ---------------------------------------------------------------------------------------------------
# gpu: the official vLLM image (CUDA runtime, PyTorch, vLLM), hardened; it serves models and nothing else.
# The appliance is not installed here: the chart and compose run every appliance command (runner, weights
# check, toolbox) from the cpu image, and only `vllm serve` from this one.
# Documented exception: this target keeps the C compiler that the vLLM image ships, because Triton
# JIT-compiles its CUDA launcher stubs with it when vLLM loads a model; without it vLLM cannot serve.
# Removed: git, curl, wget and vim (unused at run time), the package managers (apt/dpkg, pip, uv), sudo and
# all setuid bits. The SBOM is produced at build time by BuildKit (--sbom=true, deploy/IMAGES.md).
FROM vllm-base AS gpu
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="medhelm-local-vllm" \
      org.opencontainers.image.description="vLLM model server for the medhelm-local appliance (hardened vLLM image)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="medhelm-local" \
      org.opencontainers.image.source="https://example.invalid/medhelm-local" \
      org.opencontainers.image.base.name="docker.io/vllm/vllm-openai:v0.31.0"
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# Purge only what is installed (apt's package lists are not in the base image, so unknown names would fail).
# (dpkg-query exits 1 naming packages that are absent: that is expected, not a failure.)
RUN { dpkg-query -W -f='${db:Status-Abbrev}${Package}\n' git git-man curl wget vim vim-runtime vim-common \
        vim-tiny xxd 2>/dev/null || true; } | awk '/^ii/ {print $2}' | xargs -r apt-get purge -y \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -c "import vllm" \
    && groupadd --system --gid 10001 medhelm \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/cache/medhelm --no-create-home \
        --shell /usr/sbin/nologin medhelm \
    && install -d -o 10001 -g 10001 -m 0700 /var/cache/medhelm \
    && python3 -m pip uninstall -y uv pip \
    && rm -rf /usr/bin/apt* /usr/bin/dpkg* /usr/lib/apt /usr/lib/dpkg /etc/apt /var/lib/apt /var/cache/apt \
        /var/cache/debconf /usr/bin/sudo /etc/sudoers /etc/sudoers.d /root/.cache /usr/local/bin/uv \
        /usr/local/bin/uvx /usr/bin/git* /usr/lib/git-core /usr/bin/curl /usr/bin/wget /usr/bin/vi /usr/bin/vim* \
    && find / -xdev -type f -perm /6000 -exec chmod a-s {} +
ENV HOME=/var/cache/medhelm \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TMPDIR=/tmp \
    XDG_CACHE_HOME=/tmp/cache \
    VLLM_CACHE_ROOT=/tmp/cache/vllm \
    TRITON_CACHE_DIR=/tmp/cache/triton \
    TORCHINDUCTOR_CACHE_DIR=/tmp/cache/inductor \
    VLLM_LOGGING_LEVEL=INFO \
    VLLM_NO_USAGE_STATS=1 \
    DO_NOT_TRACK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    HF_DATASETS_OFFLINE=1
WORKDIR /var/cache/medhelm
USER 10001:10001
EXPOSE 8000
# vLLM answers /health without the API key once the model is loaded (no curl in the image: Python).
HEALTHCHECK --interval=30s --timeout=10s --start-period=30m --retries=3 \
    CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=5)"]
ENTRYPOINT ["vllm", "serve"]
CMD ["--help"]
