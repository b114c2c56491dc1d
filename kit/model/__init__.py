"""Model files: fetch a hub model at its pinned commit into the HF cache the container mounts,
verify it (shards, sizes, safetensors headers, config and tokenizer), and refuse a launch early
when it is missing or incomplete.

    fetch(target)          -> FetchResult     kit model fetch TARGET
    verify(target)         -> VerifyReport    kit model verify TARGET
    require_model(spec)    raises InputError  before kit up / kit smoke / the pytest plugin start a container

Modules: files (standard-library checks, also run inside images), cache (the HF cache layout),
hub (the only code that talks to the hub), fetch, verify.
"""

from __future__ import annotations

from collections.abc import Sequence

from kit.model.fetch import FetchProgress, FetchResult, ProgressCallback, fetch_repo
from kit.model.verify import VerifyReport, require_model, verify  # hub code loads on first use

__all__ = [
    "FetchProgress",
    "FetchResult",
    "VerifyReport",
    "fetch",
    "fetch_plan",
    "fetch_repo",
    "require_model",
    "verify",
]


def fetch_plan(
    target: str, *, revision: str | None = None, image: str | None = None, overrides: Sequence[str] = ()
):
    """What `fetch` would download (spec, facts, commit), or the InputError, before anything starts."""
    from kit.errors import InputError
    from kit.launch import resolve_full

    resolved = resolve_full(target, image=image, overrides=overrides)
    spec, facts = resolved.spec, resolved.model.facts
    if not spec.hf_repo:
        raise InputError(
            "TARGET", f"{target}'s model lives inside its image ({spec.model_path})", "nothing to fetch"
        )
    if not spec.hf_cache:
        raise InputError("container.hf_cache", f"{target} mounts no HF cache", "set container.hf_cache")
    pinned = revision or facts.revision
    if pinned is None:
        raise InputError(
            "revision",
            f"{facts.name} pins no revision in the catalog",
            "add revision = <commit> or pass --revision",
        )
    return spec, facts, pinned


def fetch(
    target: str,
    *,
    revision: str | None = None,
    image: str | None = None,
    overrides: Sequence[str] = (),
    on_progress: ProgressCallback | None = None,
    retries: int = 2,
    use_xet: bool = True,
) -> FetchResult:
    """TARGET's model at the catalog's pinned commit (or `revision`) into its HF cache."""
    spec, facts, pinned = fetch_plan(target, revision=revision, image=image, overrides=overrides)
    return fetch_repo(
        spec.hf_repo,
        pinned,
        spec.hf_cache,
        facts.hf_files,
        revision_field="--revision" if revision else f"catalog {facts.name}: revision",
        on_progress=on_progress,
        retries=retries,
        use_xet=use_xet,
    )
