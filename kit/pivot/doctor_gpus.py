"""`kit doctor`'s engine, image and NVIDIA checks (driver, toolkit or CDI, GPUs, P2P, ACS, IOMMU).

Each check reads the target's context and the host's facts (kit.runtime.host.HostFacts) only, and
looks at the chosen GPUs (--gpus / KIT_GPUS) where some are chosen.
"""

from __future__ import annotations

from typing import Any

from kit.pivot.doctor_report import Check, ChecksBase, GiB, _check, _data, _gib, _version
from kit.runtime.host import nvml_bdf


class GpuChecks(ChecksBase):
    # -- engine and image ---------------------------------------------------------------------

    def docker_engine(self) -> Check:
        title = "Docker engine"
        engine = self.facts.engine
        if engine.error:
            return _check(
                "docker-engine",
                title,
                "fail",
                engine.error,
                why="every kit run starts a container",
                fix="start the engine (or run scripts/bootstrap as root on Debian/Ubuntu)",
            )
        cdi = self.facts.cdi_answer
        return _check(
            "docker-engine",
            title,
            "pass",
            f"engine {engine.version}, runtimes: {', '.join(engine.runtimes) or 'none listed'}, "
            f"CDI {cdi.state}",
            details={"version": engine.version, "runtimes": list(engine.runtimes), "cdi": cdi.as_dict()},
        )

    def image(self) -> Check:
        title = "Image built"
        ctx, engine = self.ctx, self.facts.engine
        if ctx.image_ref is None:
            return _check("image", title, "not-checked", "no image named", why="no target or --image given")
        if engine.error:
            return _check("image", title, "not-checked", ctx.image_ref, why="no Docker engine answers")
        if self.facts.image_present is None:
            return _check("image", title, "not-checked", ctx.image_ref, why="the engine did not say")
        if self.facts.image_present:
            return _check("image", title, "pass", f"{ctx.image_ref} is built")
        return _check(
            "image",
            title,
            "warn",
            f"{ctx.image_ref} is not built",
            why="kit up, preflight and bisect run it",
            fix=f"kit image build {ctx.image}",
        )

    # -- NVIDIA ---------------------------------------------------------------------------------

    def nvidia_driver(self) -> Check:
        title = "NVIDIA driver"
        if (answer := self._no_gpus("nvidia-driver", title)) is not None:
            return answer
        inv, ctx = self.inventory, self.ctx
        summary = f"driver {inv.driver_version}, CUDA up to {inv.cuda_driver_version}"
        details = {
            "driver": inv.driver_version,
            "cuda_driver": inv.cuda_driver_version,
            "image_cuda": ctx.image_cuda,
        }
        if not ctx.image_cuda:
            return _check("nvidia-driver", title, "pass", summary, details=details)
        if _version(inv.cuda_driver_version) >= _version(ctx.image_cuda):
            return _check(
                "nvidia-driver",
                title,
                "pass",
                f"{summary}; the image needs CUDA {ctx.image_cuda}",
                details=details,
            )
        wanted = _data()["driver_for_cuda"].get(ctx.image_cuda)
        return _check(
            "nvidia-driver",
            title,
            "fail",
            f"{summary}; {ctx.image} needs CUDA {ctx.image_cuda}",
            why="the image's CUDA runtime refuses an older driver (cudaErrorInsufficientDriver)",
            fix=f"install an NVIDIA driver >= {wanted}"
            if wanted
            else f"install a driver for CUDA {ctx.image_cuda}",
            details=details,
        )

    def container_toolkit(self) -> Check:
        """How a container gets the GPUs here: the host's GPU-access plan (the one `kit up`, preflight
        and verify try), with the CDI answer fingerprints record too."""
        title = "NVIDIA container toolkit or CDI"
        if (answer := self._no_gpus("container-toolkit", title)) is not None:
            return answer
        engine, facts = self.facts.engine, self.facts
        cdi = facts.cdi_answer
        plan = facts.gpu_plan(count=self.ctx.gpus or -1, devices=self.ctx.gpu_devices)
        details = {
            "runtimes": list(engine.runtimes),
            "cdi": cdi.as_dict(),
            "binaries": list(facts.tools.toolkit_binaries),
            "plan": [{"how": w.how, "known": w.known, "evidence": w.evidence} for w in plan.ways],
            "notes": list(plan.notes),
        }
        if engine.error:
            return _check(
                "container-toolkit",
                title,
                "not-checked",
                "engine not reachable",
                why=engine.error,
                details=details,
            )
        known = [w for w in plan.ways if w.known]
        if known:
            shown = "; then ".join(f"{w.describe} ({w.evidence})" for w in known[:2])
            return _check(
                "container-toolkit", title, "pass", f"containers get GPUs by {shown}", details=details
            )
        if "nvidia-container-runtime-hook" in facts.tools.toolkit_binaries:
            return _check(
                "container-toolkit",
                title,
                "warn",
                "no nvidia runtime registered and no CDI device; nvidia-container-runtime-hook is on PATH",
                why="only the engine's built-in NVIDIA driver is left (docker run --gpus), which docker info "
                "cannot show: kit up tries it, a start tells",
                fix="nvidia-ctk runtime configure --runtime=docker (or nvidia-ctk cdi generate), restart the "
                "engine; kit preflight proves it",
                details=details,
            )
        return _check(
            "container-toolkit",
            title,
            "fail",
            "no nvidia runtime in the engine and no CDI device nvidia.com/gpu"
            + (f" ({plan.notes[0]})" if plan.notes else ""),
            why="containers cannot be given GPUs ('could not select device driver \"nvidia\"')",
            fix="install nvidia-container-toolkit, run 'nvidia-ctk runtime configure --runtime=docker' "
            "(or 'nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml' on an engine with CDI on), "
            "restart the engine",
            details=details,
        )

    def gpu_count(self) -> Check:
        title = "GPU count"
        if (answer := self._no_gpus("gpu-count", title)) is not None:
            return answer
        names = sorted({d.name for d in self.devices})
        summary = f"{self.gpus} GPU(s){self.which}: {', '.join(names) or 'none'}"
        details = {
            "devices": [{"index": d.index, "name": d.name, "bus": d.pci_bus_id} for d in self.devices],
            "chosen": list(self.ctx.gpu_devices),
            "lost": [{"index": g.index, "error": g.error} for g in self.inventory.lost],
        }
        if self.unknown_devices:
            return _check(
                "gpu-count",
                title,
                "fail",
                f"{summary}; no GPU answers to {', '.join(self.unknown_devices)}",
                why="--gpus (or KIT_GPUS) names a GPU NVML does not list (or that is lost)",
                fix=f"choose among {', '.join(str(d.index) for d in self.inventory.devices)} (nvidia-smi -L)",
                details=details,
            )
        if self.ctx.gpus and self.gpus < self.ctx.gpus:
            return _check(
                "gpu-count",
                title,
                "fail",
                f"{summary}; {self.ctx.target} needs {self.ctx.gpus}",
                why="tensor parallelism needs one GPU per rank",
                fix="free or add GPUs, or lower tp (--set tp=N)",
                details=details,
            )
        return _check("gpu-count", title, "pass", summary, details=details)

    def compute_capability(self) -> Check:
        title = "Compute capability vs the kernels the image holds"
        if (answer := self._no_gpus("compute-capability", title)) is not None:
            return answer
        caps = sorted({d.compute_capability for d in self.devices})
        held = self.ctx.image_arches
        details: dict[str, Any] = {"capabilities": caps, "arch_list": list(self.ctx.arch_list)}
        if held is None:
            why = self.ctx.image_arches_why or "no CUDA image named"
            return _check(
                "compute-capability",
                title,
                "not-checked",
                f"capability {', '.join(caps)}; the image's kernels not read",
                why=why,
                details=details,
            )
        details["image_arches"] = held
        torch_arches = list(held.get("torch") or [])
        gaps = [
            f"torch has no kernel for sm_{c.replace('.', '')}"
            for c in caps
            if not kernels_cover(c, torch_arches)
        ]
        for name, found in sorted((held.get("packages") or {}).items()):
            arches = found.get("arches")
            if arches is None:
                continue  # not installed, pure Python, or unreadable: said in details, not a gap
            gaps += [
                f"{name} has no kernel for sm_{c.replace('.', '')}"
                for c in caps
                if not kernels_cover(c, arches)
            ]
        if gaps:
            return _check(
                "compute-capability",
                title,
                "fail",
                f"GPUs are {', '.join(caps)}; in {self.ctx.image}: {'; '.join(gaps)}",
                why="kernels built for another architecture fail with 'no kernel image is available'",
                fix="use an image built for the GPUs' architecture (its wheels' cubins, torch's arch list)",
                details=details,
            )
        shown = ", ".join(a for a in torch_arches if a.startswith("sm_12")) or ", ".join(torch_arches[-2:])
        return _check(
            "compute-capability",
            title,
            "pass",
            f"capability {', '.join(caps)}: the image's kernels cover it (torch {shown})",
            details=details,
        )

    def gpu_busy(self) -> Check:
        title = "GPUs free (not busy, wedged or lost)"
        if (answer := self._no_gpus("gpu-busy", title)) is not None:
            return answer
        wedged, busy = [], []
        limit = self.thresholds["wedged_utilization_pct"]
        lost = [
            g for g in self.inventory.lost if not self.ctx.gpu_devices or str(g.index) in self.ctx.gpu_devices
        ]
        usage = [row for row in self.facts.nvml.usage if row[0] in self.chosen]
        for index, used, util, processes in usage:
            if util is not None and util >= limit and processes == 0:
                wedged.append(index)
            elif processes or used > self.thresholds["busy_memory_gib"] * GiB:
                busy.append(f"GPU {index}: {processes} process(es), {_gib(used)}")
        details = {
            "usage": [
                {"index": i, "memory_used_bytes": u, "utilization_pct": p, "processes": n}
                for i, u, p, n in usage
            ],
            "lost": [{"index": g.index, "error": g.error} for g in lost],
        }
        if lost:
            first = lost[0]
            return _check(
                "gpu-busy",
                title,
                "fail",
                "; ".join(g.describe() for g in lost) + " (NVML)",
                why="a GPU that stopped answering (lost after a hung P2P transfer, Xid 79 'fallen off the "
                "bus') fails every start that uses it",
                fix=f"nvidia-smi -r -i {first.index} (reset), or reboot; then kit preflight before kit up",
                details=details,
            )
        if wedged:
            return _check(
                "gpu-busy",
                title,
                "fail",
                f"GPU {', '.join(map(str, wedged))} at 100 % utilisation with no process",
                why="a GPU left spinning by a hung collective stays busy until reset",
                fix=f"nvidia-smi --gpu-reset -i {wedged[0]} (or reboot)",
                details=details,
            )
        if busy:
            return _check(
                "gpu-busy",
                title,
                "warn",
                "; ".join(busy),
                why="another job's memory and kernels shrink the KV cache or fail the load",
                fix="stop it (see nvidia-smi; 'kit ps' lists the kit's own containers)",
                details=details,
            )
        return _check("gpu-busy", title, "pass", f"{self.gpus} GPU(s) idle", details=details)

    def p2p_topology(self) -> Check:
        title = "P2P status and topology (NVML)"
        if (answer := self._no_gpus("p2p-topology", title)) is not None:
            return answer
        if self.gpus < 2:
            return _check("p2p-topology", title, "not-checked", "one GPU", why="nothing to peer with")
        keep = {str(i) for i in self.chosen}

        def among(matrix: dict[str, dict[str, str]] | None) -> dict[str, dict[str, str]]:
            """The matrix between the chosen GPUs only."""
            return {
                i: {j: v for j, v in row.items() if j in keep}
                for i, row in (matrix or {}).items()
                if i in keep
            }

        p2p, topology = among(self.facts.nvml.p2p), among(self.facts.nvml.topology)
        details = {"p2p": p2p, "topology": topology}
        bad = sorted(
            {f"{i}->{j}: {status}" for i, row in p2p.items() for j, status in row.items() if status != "OK"}
        )
        paths = sorted({word for row in topology.values() for word in row.values()})
        through_cpu = [w for w in paths if w in ("PHB", "NODE", "SYS")]
        summary = f"paths {', '.join(paths)}"
        if bad:
            return _check(
                "p2p-topology",
                title,
                "warn",
                f"{summary}; P2P not available: {bad[0]}" + (f" (+{len(bad) - 1})" if len(bad) > 1 else ""),
                why="NCCL falls back to host shared memory there: slower, not a hang",
                fix="nothing required; check BIOS (Above 4G decoding, Resizable BAR) if P2P is expected",
                details=details,
            )
        note = (
            "; P2P crosses the CPU's root complex, where ACS and the IOMMU can break it (see pcie-acs, iommu)"
            if through_cpu
            else ""
        )
        return _check(
            "p2p-topology",
            title,
            "pass",
            f"{summary}; NVML reports P2P OK for every pair{note}",
            why="NVML's answer is not proof: kit preflight copies between every pair for real",
            details=details,
        )

    def pcie_acs(self) -> Check:
        title = "PCIe ACS on the GPUs' path"
        if (answer := self._no_gpus("pcie-acs", title)) is not None:
            return answer
        if self.gpus < 2:
            return _check("pcie-acs", title, "not-checked", "one GPU", why="no peer-to-peer traffic")
        facts = self.facts
        if facts.lspci is None:
            return _check("pcie-acs", title, "not-checked", "lspci unavailable", why=facts.lspci_error)
        bridges: set[str] = set()
        for device in self.devices:
            bdf = nvml_bdf(device.pci_bus_id)
            bridges.update(facts.gpu_paths.get(bdf or "", []))
        scope = "the GPUs' upstream bridges" if bridges else "every PCI bridge (GPU paths unreadable)"
        candidates = [facts.lspci[b] for b in sorted(bridges) if b in facts.lspci] or list(
            facts.lspci.values()
        )
        if any(d.access_denied for d in candidates) and not any(d.acs_control for d in candidates):
            return _check(
                "pcie-acs", title, "not-checked", "capabilities hidden", why="lspci shows them to root only"
            )
        redirecting = {d.bdf: list(d.redirecting) for d in candidates if d.redirecting}
        details = {"checked": [d.bdf for d in candidates], "redirecting": redirecting}
        if redirecting:
            first, flags = next(iter(redirecting.items()))
            return _check(
                "pcie-acs",
                title,
                "warn",
                f"ACS redirects P2P on {len(redirecting)} bridge(s) of {scope}: {first} {'+ '.join(flags)}+",
                why="ACS sends peer traffic through the root complex; NCCL's P2P all-reduce then hangs on "
                "RTX PRO 6000 hosts (NVIDIA/nccl#1999, #2079)",
                fix="disable ACS in the BIOS (or 'setpci -s BDF ECAP_ACS+6.w=0000' per bridge), or run with "
                "NCCL_P2P_DISABLE=1 (--set env.NCCL_P2P_DISABLE=1); confirm with kit preflight",
                details=details,
            )
        return _check("pcie-acs", title, "pass", f"no redirecting ACS bit on {scope}", details=details)

    def iommu(self) -> Check:
        title = "IOMMU mode"
        state = self.facts.iommu
        details = (
            {}
            if state is None
            else {
                "mode": state.mode,
                "cmdline": list(state.cmdline_flags),
                "units": list(state.units),
                "group_types": list(state.group_types),
            }
        )
        if state is None:
            return _check("iommu", title, "not-checked", "unreadable", why="no /proc/cmdline or /sys here")
        summary = f"{state.mode} ({state.why})"
        if (answer := self._no_gpus("iommu", title)) is not None:
            return answer.model_copy(update={"summary": f"{summary}; {answer.summary}", "details": details})
        if self.gpus < 2:
            return _check(
                "iommu",
                title,
                "not-checked",
                summary,
                why="one GPU: no peer-to-peer traffic",
                details=details,
            )
        if state.mode == "translated":
            return _check(
                "iommu",
                title,
                "warn",
                summary,
                why="a translating IOMMU redirects GPU peer traffic; reported as the NCCL P2P hang's cause "
                "(NVIDIA/nccl#2079)",
                fix="boot with iommu=pt (Intel: intel_iommu=on iommu=pt; AMD: amd_iommu=off or iommu=pt), "
                "or run with NCCL_P2P_DISABLE=1",
                details=details,
            )
        if state.mode == "unknown":
            return _check(
                "iommu", title, "not-checked", summary, why="group types unreadable", details=details
            )
        return _check("iommu", title, "pass", summary, details=details)


def kernels_cover(capability: str, arches: list[str]) -> bool:
    """Do ARCHES (`sm_120`, `sm_120a`, `compute_120`, as torch and cuobjdump name them) run on a GPU of
    CAPABILITY ('12.0')? A cubin runs on its own major with an equal or higher minor unless it is
    arch-specific ('a': that exact one); PTX compiles for any equal or newer GPU at first use."""
    major, _, minor = capability.partition(".")
    want = int(major) * 10 + int(minor or 0)
    for arch in arches:
        kind, _, number = arch.partition("_")
        digits = number.rstrip("abcdefghijklmnopqrstuvwxyz")
        if not digits.isdigit():
            continue
        built = int(digits)
        if kind == "compute" and built <= want:
            return True
        if kind == "sm" and number.endswith(("a", "f")) and built == want:
            return True
        if kind == "sm" and number == digits and built // 10 == want // 10 and built <= want:
            return True
    return False
