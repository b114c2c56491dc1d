# The one Dockerfile for every kit image. `kit image build NAME` feeds every ARG below from
# images/NAME.toml (a unit test checks that each ARG is fed and each fed arg is declared), and
# sends a small build context the kit assembles: this file, kit/images/inimage/, kit/rehearsal/,
# an optional CA bundle (images/ca/) and optional local wheels (images/wheels/). The paths are the
# repository's own, so compose.yaml builds from the checkout with the same args (.dockerignore
# keeps that context to these paths).
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
ARG TORCH_WHEEL
ARG TORCHVISION_VERSION
ARG SGLANG_VERSION
ARG SGLANG_KERNEL_VERSION
ARG FLASHINFER_VERSION
ARG NCCL_PACKAGE
ARG KIT_NCCL_VERSION
ARG TORCH_CUDA_ARCH_LIST
ARG EXTRA_PIP
ARG FORCE_PIP

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

# System packages (the -dev headers: inductor and triton compile kernels at run time). A CA bundle given to the build (many GPU hosts sit behind TLS-intercepting
# proxies) is appended to the system trust store, so pip here and hub downloads at run time work.
COPY images/ca/ /tmp/kit-ca/
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates ${PYTHON} ${PYTHON}-venv ${PYTHON}-dev ${APT_PACKAGES} \
 && if [ -s /tmp/kit-ca/ca-bundle.crt ]; then cat /tmp/kit-ca/ca-bundle.crt >> /etc/ssl/certs/ca-certificates.crt; fi \
 && rm -rf /tmp/kit-ca /var/lib/apt/lists/* \
 && ${PYTHON} -m venv /opt/venv \
 && python -m pip install "pip==26.3"

# PyTorch first. When the kit found the exact torch wheel (TORCH_WHEEL, in images/wheels/), it is
# installed alone from there first (--no-index: no index can swap it), and the index is still offered
# for the rest: torchvision's +cuXXX builds live only on the torch index. The constraints file keeps
# later steps from replacing torch or torchvision.
COPY images/wheels/ /tmp/kit-wheels/
# hadolint ignore=SC3054,DL3013
RUN index_args=(); if [ -n "${TORCH_INDEX_URL}" ]; then index_args=(--extra-index-url "${TORCH_INDEX_URL}"); fi \
 && tv=(); if [ -n "${TORCHVISION_VERSION}" ]; then tv=("torchvision==${TORCHVISION_VERSION}"); fi \
 && if [ -n "${TORCH_WHEEL}" ]; then pip install --no-index --no-deps --find-links /tmp/kit-wheels "torch==${TORCH_VERSION}"; fi \
 && pip install --find-links /tmp/kit-wheels "${index_args[@]}" "torch==${TORCH_VERSION}" "${tv[@]}" \
 && printf '%s\n' "torch==${TORCH_VERSION}" "${tv[@]}" > /opt/venv/kit-constraints.txt \
 && rm -rf /tmp/kit-wheels

# SGLang. GPU images take SGLang's own pinned dependency set (flashinfer, sglang-kernel, ...),
# then force-pin NCCL and FORCE_PIP the way SGLang's install does. The CPU rehearsal installs SGLang without
# its CUDA-only dependencies and adds the light ones it imports (EXTRA_PIP, pinned in the manifest).
# Every requirement here is an exact pin from the manifest, which hadolint cannot see through ${VARS}.
# The torch index is offered again: SGLang also pins torchaudio/torchcodec, whose CUDA builds live there.
# hadolint ignore=SC2086,SC3054,DL3013
RUN export PIP_CONSTRAINT=/opt/venv/kit-constraints.txt \
 && index_args=(); if [ -n "${TORCH_INDEX_URL}" ]; then index_args=(--extra-index-url "${TORCH_INDEX_URL}"); fi \
 && if [ "${KIT_FLAVOR}" = cuda ]; then \
      pip install "${index_args[@]}" "sglang==${SGLANG_VERSION}" "sglang-kernel==${SGLANG_KERNEL_VERSION}" \
                  "flashinfer-python==${FLASHINFER_VERSION}" ${EXTRA_PIP} \
   && pip install --force-reinstall --no-deps "${NCCL_PACKAGE}==${KIT_NCCL_VERSION}" ${FORCE_PIP} ; \
    else \
      pip install --no-deps "sglang==${SGLANG_VERSION}" \
   && pip install ${EXTRA_PIP} ; \
    fi

# The kit's in-image tools: the verify script, the tiny production-architecture model (every image:
# target qwen-tiny, a ~15 MB Qwen3.5-MoE with random weights, byte-identical each build), and (CPU
# rehearsal only) the test-only parts.
COPY kit/images/inimage/ /opt/kit/
COPY kit/rehearsal/ /tmp/kit-rehearsal/
RUN mkdir -p /opt/kit/rehearsal \
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
 && python -m pip freeze --all > /opt/kit/lock.txt

# Every pin travels with the image, so `docker inspect` alone tells what an image is. Last, so a
# label change does not invalidate the cached install layers.
LABEL org.opencontainers.image.title="kit/sglang:${KIT_IMAGE_NAME}" \
      org.opencontainers.image.description="SGLang ${SGLANG_VERSION} (${KIT_FLAVOR}) built by the kit" \
      org.opencontainers.image.base.name="${BASE_IMAGE}" \
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
