"""`kit doctor` reads the kernels an image holds from the image itself (kit/pivot/inimage/arches.py in
a throwaway container): on the CPU rehearsal, a CPU torch and the sgl_kernel stand-in hold no CUDA
kernel at all, so an RTX PRO 6000 (capability 12.0, the fake NVML) is refused whatever a manifest
string says. A CUDA image's real reading is the GPU host check's doctor step (docs/gpu-host-check.md)."""

from __future__ import annotations

import dataclasses

import pytest

from kit.launch import resolve
from kit.pivot.doctor import doctor_context, evaluate, read_image_arches
from kit.scenarios.fake_nvml import FakeNvml

pytestmark = [pytest.mark.docker]


def test_the_cpu_images_kernels_are_read_inside_it_and_cover_no_gpu(built_image, new_servers):
    image = resolve("tiny").image_ref
    built_image(image, "sglang-0.5.23-cpu")
    held, why = read_image_arches(image)
    assert why is None and held["torch"] == []  # a CPU build of torch: no CUDA arch at all
    stand_in = held["packages"]["sgl_kernel"]
    assert "arches" not in stand_in and stand_in["why"].startswith("no shared objects")
    assert held["packages"]["deep_gemm"] == {"why": "not installed"}
    # The qwen-base context, its image's kernels replaced by what this image holds (a wrong image):
    from test_doctor import gpu_host

    ctx = dataclasses.replace(doctor_context("qwen-base"), image_arches=held, image="sglang-0.5.23-cpu")
    check = next(c for c in evaluate(ctx, gpu_host(FakeNvml.of(4))) if c.id == "compute-capability")
    assert check.status == "fail" and "torch has no kernel for sm_120" in check.summary
    assert read_image_arches("kit/sglang:no-such-image")[1].endswith("cannot be read")
    assert not new_servers()
