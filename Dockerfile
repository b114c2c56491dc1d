# The one Dockerfile for every kit image. `kit image build NAME` feeds every ARG below from
# images/NAME.toml (a unit test checks that each ARG is fed and each fed arg is declared), and
# sends a small build context the kit assembles: this file, kit/images/inimage/, kit/rehearsal/,
# the image's lock (images/NAME.lock), an optional CA bundle (images/ca/) and optional local wheels
# (images/wheels/). The paths are the repository's own, so compose.yaml builds from the checkout
# with the same args (.dockerignore keeps that context to these paths).
#
# Flavours: KIT_FLAVOR=cuda is a GPU serving image; KIT_FLAVOR=cpu is the CPU rehearsal image, which
# alone carries the test-only parts (tiny model, sgl_kernel/torchvision stand-ins, fault switch).
# One linear file with shell conditionals, not multi-stage targets: the docker SDK's classic builder
# builds every stage before a target, so a GPU stage would break the CPU build on machines without
# a registry.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}

# An ARG before FROM is out of scope after it; declared again for the labels below.
ARG BASE_IMAGE
ARG KIT_IMAGE_NAME
ARG KIT_FLAVOR
ARG KIT_DIALECT
ARG APT_PACKAGES
ARG PYTHON
# KIT_-prefixed: nvidia/cuda bases set ENV CUDA_VERSION and NCCL_VERSION, which would win over
# build args of the same names.
ARG KIT_CUDA_VERSION
ARG TORCH_VERSION
ARG TORCH_INDEX_URL
ARG TORCHVISION_VERSION
ARG SGLANG_VERSION
ARG SGLANG_KERNEL_VERSION
ARG FLASHINFER_VERSION
ARG NCCL_PACKAGE
ARG KIT_NCCL_VERSION
ARG TORCH_CUDA_ARCH_LIST
# From the lock (`# kit-lock source-date-epoch`): every RUN step sees it in its environment, so
# Python writes hash-based .pyc files (PEP 552: py_compile's default when it is set; pip and
# ensurepip compile through it) instead of ones stamped with each source file's install time.
ARG SOURCE_DATE_EPOCH
# locked, snapshot or today (`kit image build NAME --apt MODE`; kit/images/inimage/apt-lock.sh).
ARG KIT_APT
# What the base was when the build started (tag@digest, or a local base's content digest): a label.
ARG KIT_BASE

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt \
    TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST}" \
    HF_HOME=/root/.cache/huggingface \
    PATH=/opt/venv/bin:${PATH}

# System packages, from the lock: every Debian/Ubuntu package at the version the lock records (read
# from a built image's dpkg database by `kit image lock NAME --system`); kit/images/inimage/apt-lock.sh
# says what it does when the lock has none yet or the mirror no longer serves a version, and removes
# apt's and dpkg's logs and caches. The packages the manifest names: the interpreter, its venv and
# -dev headers (inductor and triton compile kernels at run time), ca-certificates and apt_packages.
# A CA bundle given to the build (many GPU hosts sit behind TLS-intercepting proxies) is appended to
# the system trust store, so pip here and hub downloads at run time work.
COPY images/ca/ /tmp/kit-ca/
COPY images/${KIT_IMAGE_NAME}.lock kit/images/inimage/apt-lock.sh /tmp/kit-apt/
RUN bash /tmp/kit-apt/apt-lock.sh "/tmp/kit-apt/${KIT_IMAGE_NAME}.lock" "${KIT_APT}" \
        ca-certificates ${PYTHON} ${PYTHON}-venv ${PYTHON}-dev ${APT_PACKAGES} \
 && if [ -s /tmp/kit-ca/ca-bundle.crt ]; then cat /tmp/kit-ca/ca-bundle.crt >> /etc/ssl/certs/ca-certificates.crt; fi \
 && rm -rf /tmp/kit-ca /tmp/kit-apt \
 && ${PYTHON} -m venv /opt/venv

# Every Python package, from the image's lock (images/NAME.lock, written by `kit image lock NAME` from
# the manifest) and nothing else: --require-hashes (a file whose sha256 the lock does not name is
# refused), --no-deps (nothing is resolved here: the lock is the whole closure, NCCL and force_pip
# pins included), wheels only (no package's code runs at install). pip itself is in the lock; the
# venv's own pip installs it. The torch wheel the kit sends (images/wheels/) and the manifest's torch
# index are only places to find locked files. The lock stays in the image as /opt/kit/lock.txt:
# bundles carry it (its digest names it), `kit image build --from-bundle` rebuilds from it, and
# `kit image verify` holds what pip installed (installed.txt below) to it.
COPY images/wheels/ /tmp/kit-wheels/
COPY images/${KIT_IMAGE_NAME}.lock /opt/kit/lock.txt
# hadolint ignore=SC3054,DL3013,DL3042
RUN index_args=(); if [ -n "${TORCH_INDEX_URL}" ]; then index_args=(--extra-index-url "${TORCH_INDEX_URL}"); fi \
 && python -m pip install --require-hashes --no-deps --only-binary :all: --find-links /tmp/kit-wheels \
        "${index_args[@]}" -r /opt/kit/lock.txt \
 && rm -rf /tmp/kit-wheels

# The kit's in-image tools: the verify script, the tiny production-architecture model (every image:
# target qwen-tiny, a ~15 MB Qwen3.5-MoE with random weights, byte-identical each build), and (CPU
# rehearsal only) the test-only parts.
COPY kit/images/inimage/ /opt/kit/
COPY kit/rehearsal/ /tmp/kit-rehearsal/
# PYTHONDONTWRITEBYTECODE: running the generators would leave .pyc files stamped with this build's
# time; the kit's own modules are compiled hash-based instead, last.
RUN export PYTHONDONTWRITEBYTECODE=1 \
 && mkdir -p /opt/kit/rehearsal \
 && cp /tmp/kit-rehearsal/tiny_model.py /tmp/kit-rehearsal/tiny_qwen3_5.py /opt/kit/rehearsal/ \
 && if [ "${KIT_FLAVOR}" = cpu ]; then \
      site=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
   && cp -r /tmp/kit-rehearsal/shims /tmp/kit-rehearsal/kit_faults.py /opt/kit/rehearsal/ \
   && echo /opt/kit/rehearsal/shims > "$site/kit-rehearsal-shims.pth" \
   && printf '/opt/kit/rehearsal\nimport kit_faults\n' > "$site/kit-rehearsal-faults.pth" \
   && python /opt/kit/rehearsal/tiny_model.py /opt/kit/models/tiny ; \
    fi \
 && python /opt/kit/rehearsal/tiny_qwen3_5.py /opt/kit/models/qwen-tiny \
 && rm -rf /tmp/kit-rehearsal \
 && python -m compileall -q --invalidation-mode checked-hash /opt/kit/rehearsal \
 && python -m pip freeze --all > /opt/kit/installed.txt

# Every pin travels with the image, so `docker inspect` alone tells what an image is. Last, so a
# label change does not invalidate the cached install layers.
LABEL org.opencontainers.image.title="kit/sglang:${KIT_IMAGE_NAME}" \
      org.opencontainers.image.description="SGLang ${SGLANG_VERSION} (${KIT_FLAVOR}) built by the kit" \
      org.opencontainers.image.base.name="${BASE_IMAGE}" \
      io.kit.base="${KIT_BASE}" \
      io.kit.source-date-epoch="${SOURCE_DATE_EPOCH}" \
      io.kit.image="${KIT_IMAGE_NAME}" \
      io.kit.flavor="${KIT_FLAVOR}" \
      io.kit.dialect="${KIT_DIALECT}" \
      io.kit.pin.python="${PYTHON}" \
      io.kit.pin.cuda="${KIT_CUDA_VERSION}" \
      io.kit.pin.torch="${TORCH_VERSION}" \
      io.kit.pin.torchvision="${TORCHVISION_VERSION}" \
      io.kit.pin.sglang="${SGLANG_VERSION}" \
      io.kit.pin.sglang-kernel="${SGLANG_KERNEL_VERSION}" \
      io.kit.pin.flashinfer="${FLASHINFER_VERSION}" \
      io.kit.pin.nccl-package="${NCCL_PACKAGE}" \
      io.kit.pin.nccl="${KIT_NCCL_VERSION}" \
      io.kit.pin.torch-cuda-arch-list="${TORCH_CUDA_ARCH_LIST}"

WORKDIR /root
EXPOSE 30000
CMD ["python", "-m", "sglang.launch_server", "--help"]
