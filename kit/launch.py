"""Targets -> LaunchSpec: the one entry point the CLI, the pytest plugin and the smoke tests use.

    resolve("tiny")                                        # the target's own image
    resolve("qwen-mtp", image="sglang-0.5.10.post1-cu129-sm120", overrides=["mamba_cache=no_buffer"])

The path is catalog (model facts, profile intent, target) + image manifest (which SGLang, so which
dialect) + overrides -> dialect translation -> LaunchSpec. Pure apart from reading the data files;
rule checks are `kit.validate`'s business, so a launch that SGLang will refuse still resolves (and
`kit check` can show SGLang refusing it).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.catalog import CatalogModel, Hardware, Profile, Target, load_catalog, profile_with_overrides
from kit.dialects import Dialect, Translation, load_dialect, translate
from kit.errors import InputError
from kit.images.manifest import Manifest, load_manifest
from kit.spec import LaunchSpec, Timing

SERVER_MODULE = ("python", "-m", "sglang.launch_server")
LABEL_MODEL = "io.kit.model"
LABEL_PROFILE = "io.kit.profile"


@dataclass(frozen=True)
class Resolved:
    """A LaunchSpec with everything it was made from (what validate and check need besides it)."""

    spec: LaunchSpec
    target: str
    target_def: Target
    model: CatalogModel
    profile: Profile
    hardware: Hardware | None
    manifest: Manifest
    dialect: Dialect
    translation: Translation
    overrides: tuple[str, ...]


def list_targets() -> list[str]:
    return sorted(load_catalog().targets)


def intent_of(profile: Profile, model: CatalogModel, device: str) -> dict[str, Any]:
    """A profile flattened to the intent keys dialects map (kit.dialects.INTENTS)."""
    spec = profile.speculative
    return {
        "model_path": model.facts.path,
        "device": device,
        "tp": profile.tp,
        "nnodes": profile.nnodes,
        "attention_backend": profile.attention_backend,
        "cuda_graph": profile.cuda_graph,
        "radix_cache": profile.radix_cache,
        "overlap_schedule": profile.overlap_schedule,
        "max_total_tokens": profile.max_total_tokens,
        "context_length": profile.context_length,
        "mem_fraction": profile.mem_fraction,
        "max_running_requests": profile.max_running_requests,
        "mamba_cache": profile.mamba_cache,
        "speculative.algorithm": spec.algorithm if spec else None,
        "speculative.num_steps": spec.num_steps if spec else None,
        "speculative.eagle_topk": spec.eagle_topk if spec else None,
        "speculative.num_draft_tokens": spec.num_draft_tokens if spec else None,
        "reasoning_parser": profile.reasoning_parser,
        "tool_call_parser": profile.tool_call_parser,
        "watchdog_timeout": profile.watchdog_timeout,
        "soft_watchdog_timeout": soft_watchdog_s(profile),
        "cpu_threads_bind": cpu_bind_per_rank(profile.cpu_threads_bind, profile.tp)
        if device == "cpu"
        else None,
        "host": profile.host,
        "port": profile.container.port,
    }


def soft_watchdog_s(profile: Profile) -> int:
    """SGLang's soft watchdog at the profile's longest stall window: by then the kit's own watch has
    judged every stage, so the scheduler's own py-spy dump and line (read live and by kit analyze,
    kit/logs/soft_watchdog.py) come on top of the kit's evidence, never before its verdict."""
    return int(max(profile.timing.stall_windows.model_dump().values()))


def cpu_bind_per_rank(bind: str | None, ranks: int) -> str | None:
    """SGLANG_CPU_OMP_THREADS_BIND with one '|' group per rank: the profile's groups, taken in turn.

    SGLang 0.5.23 binds rank i to group i and asserts the group exists (srt/utils/numa_utils.py
    init_threads_binding), so a profile written for TP 2 ("0|1") fails every rank past the second at
    --set tp=4; here those ranks share the groups instead ("0|1|0|1"), and the launch says so.
    """
    if not bind:
        return bind
    groups = bind.split("|")
    if len(groups) >= ranks:
        return bind
    return "|".join(groups[i % len(groups)] for i in range(ranks))


def context_of(model: CatalogModel, profile: Profile, hardware: Hardware | None, gpus: int) -> dict[str, Any]:
    """Facts that are not intent, for the dialect's and the pitfalls' conditions."""
    container = profile.container
    return {
        "capability": hardware.capability if hardware and gpus else None,
        "hybrid": model.facts.hybrid,
        "architecture": model.facts.architecture,
        "gpus": gpus,
        "ipc_host": container.ipc_host,
        "shm_size": container.shm_size,
        "memlock": container.ulimits.get("memlock"),
        "nvlink": hardware.nvlink if hardware and gpus else None,
    }


def resolve_full(
    target: str,
    *,
    image: str | None = None,
    overrides: Sequence[str] = (),
    images_dir: Path | None = None,
    catalog_dir: Path | None = None,
) -> Resolved:
    catalog = load_catalog(catalog_dir)
    if target not in catalog.targets:
        raise InputError(
            "target", f"unknown target '{target}'", f"known targets: {', '.join(sorted(catalog.targets))}"
        )
    model_name, target_def = catalog.targets[target]
    model = catalog.models[model_name]
    manifest = load_manifest(image or target_def.image, images_dir)
    dialect = load_dialect(manifest.dialect)
    profile = profile_with_overrides(model.profiles[target_def.profile], overrides)
    hardware = catalog.hardware.get(target_def.hardware) if target_def.hardware else None

    device = manifest.flavor
    gpus = target_def.gpus_for(profile) if device == "cuda" else 0
    translation = translate(
        dialect,
        intent_of(profile, model, device),
        context=context_of(model, profile, hardware, gpus),
        profile_env=profile.env,
        extra_args=profile.extra_args,
    )
    container = profile.container
    notes = [f"override: {item}" for item in overrides]
    notes += translation.notes
    bind = profile.cpu_threads_bind if device == "cpu" else None
    if bind and cpu_bind_per_rank(bind, profile.tp) != bind:
        notes.append(
            f"cpu_threads_bind: {len(bind.split('|'))} group(s) for {profile.tp} ranks, shared in turn: "
            f"{cpu_bind_per_rank(bind, profile.tp)} (one group per rank: --set cpu_threads_bind=...)"
        )
    args, env = list(translation.args), dict(translation.env)
    hf_repo = model.facts.hf_id if model.facts.path == model.facts.hf_id else None
    if hf_repo and model.facts.revision:
        # The pinned commit, so SGLang loads what `kit model fetch` verified. --revision is the same
        # flag in every release the kit speaks (0.5.9 .. 0.5.23), so it needs no dialect entry.
        flag = dialect.flag("model_path")
        name = flag.flag if flag else "--model-path"
        at = args.index(name) + 2 if name in args else len(args)
        args[at:at] = ["--revision", model.facts.revision]
    if hf_repo:
        # The weights come from the mounted cache, fetched and verified before launch: a missing
        # shard fails at once instead of a silent 234 GB download inside the container.
        env.setdefault("HF_HUB_OFFLINE", "1")
    pass_env = container.pass_env
    if container.api_key_env and container.api_key_env not in pass_env:
        pass_env = (*pass_env, container.api_key_env)
    spec = LaunchSpec(
        target=target,
        model=model_name,
        profile=target_def.profile,
        image=manifest.name,
        image_ref=manifest.tag,
        dialect=dialect.name,
        device=device,
        gpus=gpus,
        ranks=profile.tp,
        argv=(*SERVER_MODULE, *args),
        env=env,
        pass_env=pass_env,
        port=container.port,
        model_path=model.facts.path,
        # '~' is the invoking user's home: the docker SDK needs an absolute host path.
        hf_cache=os.path.expanduser(container.hf_cache) if container.hf_cache else None,
        hf_repo=hf_repo,
        hf_revision=model.facts.revision if hf_repo else None,
        publish_address=container.publish_address,
        api_key_env=container.api_key_env,
        ipc_host=container.ipc_host,
        shm_size=container.shm_size,
        ulimits=dict(container.ulimits),
        cap_add=container.cap_add,
        labels={LABEL_MODEL: model_name, LABEL_PROFILE: target_def.profile},
        timing=Timing(
            deadlines=profile.timing.deadlines.model_dump(),
            stall_windows=profile.timing.stall_windows.model_dump(),
            cpu_progress_in=profile.timing.cpu_progress_in,
        ),
        smoke=profile.smoke.model_dump(mode="json"),
        notes=tuple(notes),
    )
    return Resolved(
        spec=spec,
        target=target,
        target_def=target_def,
        model=model,
        profile=profile,
        hardware=hardware,
        manifest=manifest,
        dialect=dialect,
        translation=translation,
        overrides=tuple(overrides),
    )


def api_key_from_env(spec: LaunchSpec, *, required: bool = False) -> str | None:
    """The server's API key from the caller's environment (by the spec's variable name), or None.

    required=True: an API key variable that is named but empty or unset is an InputError.
    """
    if not spec.api_key_env:
        return None
    value = os.environ.get(spec.api_key_env) or None
    if required and value is None:
        raise InputError(
            "container.api_key_env",
            f"{spec.api_key_env} is not set, and {spec.target} needs its API key from it",
            f"export {spec.api_key_env}=<a long random key>, e.g. $(openssl rand -hex 32)",
        )
    return value


def resolve(target: str, *, image: str | None = None, overrides: Sequence[str] = ()) -> LaunchSpec:
    """The LaunchSpec for TARGET on IMAGE (default: the target's image) with `--set` overrides.

    Raises InputError for an unknown target, image or dialect, and for a bad override or catalog file.
    """
    return resolve_full(target, image=image, overrides=overrides).spec
