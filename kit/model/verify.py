"""`kit model verify TARGET` and the cheap check before a launch.

A hub model is checked in the HF cache on this machine: every shard the index names is there, as
large as the hub lists it (the listing `kit model fetch` saved, else the hub itself, else what each
safetensors header implies), its header reads, and config and tokenizer files exist. A model that
lives inside the image (the CPU rehearsal's, generated at build time) is checked there, by the same
file checks (kit/model/files.py) run with the image's own Python.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kit.errors import CheckFailed, EnvironmentProblem, ExitCode, InputError
from kit.model import cache, files
from kit.model.files import FileCheck
from kit.model.hub import RevisionCheck
from kit.spec import LaunchSpec

LISTING_SAVED = "the hub's listing saved by kit model fetch"
LISTING_LIVE = "the hub's listing"
HEADERS_ONLY = "safetensors headers only (no hub listing here: run kit model fetch, or reach the hub)"


@dataclass(frozen=True)
class VerifyReport:
    target: str
    model: str
    where: str
    revision: str | None
    sizes_from: str
    files: tuple[FileCheck, ...]
    seconds: float
    fix: str = ""
    pin: RevisionCheck | None = None
    """The pinned revision against the hub's listing (None: a model inside the image, or unpinned)."""

    @property
    def problems(self) -> tuple[FileCheck, ...]:
        return tuple(row for row in self.files if not row.ok)

    @property
    def ok(self) -> bool:
        """Files complete, and the hub does not deny the pin (an unreachable hub is said, not failed)."""
        return not self.problems and (self.pin is None or self.pin.status != "unknown")

    @property
    def exit_code(self) -> int:
        return int(ExitCode.OK if self.ok else ExitCode.FAILED)


def describe(problems: Sequence[FileCheck], limit: int = 3) -> str:
    """'model-00003-of-00039.safetensors missing, config.json truncated and 4 more'."""
    named = [f"{row.name} {row.status}" for row in problems[:limit]]
    more = len(problems) - limit
    return ", ".join(named) + (f" and {more} more" if more > 0 else "")


def _revision_in_cache(spec: LaunchSpec) -> str | None:
    """The pinned commit, else the commit refs/main names in the cache (an unpinned model)."""
    if spec.hf_revision:
        return spec.hf_revision
    ref = cache.repo_dir(spec.hf_cache or "", spec.hf_repo or "") / "refs" / "main"
    try:
        return ref.read_text().strip() or None
    except OSError:
        return None


def require_model(spec: LaunchSpec) -> None:
    """Before a container starts: the model is complete where the container will look (stat only, no
    network, milliseconds). A model inside the image came with it and passes.

    Raises InputError (exit 2) with the fetch command when anything is missing or short.
    """
    if not spec.hf_repo:
        return
    fetch = f"run 'kit model fetch {spec.target}'"
    if not spec.hf_cache:
        raise InputError(
            "container.hf_cache",
            f"{spec.hf_repo} is a hub model but no HF cache is mounted",
            "set one, then " + fetch,
        )
    revision = _revision_in_cache(spec)
    if revision is None:
        raise InputError("model", f"{spec.hf_repo} is not in {cache.hub_dir(spec.hf_cache)}", fetch)
    folder = cache.snapshot_dir(spec.hf_cache, spec.hf_repo, revision)
    rows = files.check_folder(str(folder), cache.load_listing(spec.hf_repo, revision), deep=False)
    problems = [row for row in rows if not row.ok]
    if problems:
        what = "not in" if not folder.is_dir() else f"incomplete ({describe(problems)}) in"
        raise InputError(
            "model", f"{spec.hf_repo}@{revision[:12]} is {what} {cache.hub_dir(spec.hf_cache)}", fetch
        )


def verify_snapshot(spec: LaunchSpec, patterns: Sequence[str], *, online: bool = True) -> VerifyReport:
    started = time.monotonic()
    assert spec.hf_repo and spec.hf_cache
    revision = _revision_in_cache(spec) or "main"
    sizes, source = cache.load_listing(spec.hf_repo, revision), LISTING_SAVED
    if sizes is None and online:
        from kit.model import hub
        from kit.model.fetch import wanted_files

        try:
            listing = hub.list_files(spec.hf_repo, revision)
        except EnvironmentProblem:
            sizes = None
        else:
            sizes = {n: listing.sizes[n] for n in wanted_files(listing.sizes, patterns)}
            source = LISTING_LIVE
    folder = cache.snapshot_dir(spec.hf_cache, spec.hf_repo, revision)
    rows = files.check_folder(str(folder), sizes)
    pin = None
    if spec.hf_revision:
        if online:
            from kit.model.hub import confirm_revision

            pin = confirm_revision(spec.hf_repo, spec.hf_revision)
        else:
            pin = RevisionCheck(
                spec.hf_repo, spec.hf_revision, "unconfirmed", "not confirmed against the hub (--offline)"
            )
    fix = f"kit model fetch {spec.target}"
    if pin is not None and pin.status == "unknown":
        fix = "pin a commit the hub lists (the catalog's model.revision), then " + fix
    return VerifyReport(
        target=spec.target,
        model=spec.hf_repo,
        where=str(folder),
        revision=revision,
        sizes_from=source if sizes is not None else HEADERS_ONLY,
        files=tuple(rows),
        seconds=round(time.monotonic() - started, 3),
        fix=fix,
        pin=pin,
    )


def verify_in_image(spec: LaunchSpec) -> VerifyReport:
    """The file checks inside the image (the model there is generated at build time); no network."""
    from kit.runtime.engine import client, image_exists, translated

    started = time.monotonic()
    if not image_exists(spec.image_ref):
        raise EnvironmentProblem(
            f"image {spec.image_ref} not built", hint=f"run 'kit image build {spec.image}'"
        )
    with tempfile.TemporaryDirectory(prefix="kit-model-") as tmp:
        shutil.copy(files.__file__, Path(tmp) / "files.py")
        with translated(f"verifying the model inside {spec.image_ref}"):
            output = client().containers.run(
                spec.image_ref,
                command=["python", "/kit-model/files.py", spec.model_path],
                volumes={tmp: {"bind": "/kit-model", "mode": "ro"}},
                labels={"io.kit.managed": "check"},
                network_mode="none",
                remove=True,
                stdout=True,
                stderr=False,
            )
    try:
        rows = [FileCheck(**row) for row in json.loads(output.decode("utf-8").strip().splitlines()[-1])]
    except (ValueError, TypeError, IndexError) as exc:
        raise CheckFailed(f"the in-image check printed no result: {output[-300:]!r}") from exc
    return VerifyReport(
        target=spec.target,
        model=spec.model_path,
        where=f"{spec.image_ref}:{spec.model_path}",
        revision=None,
        sizes_from="safetensors headers (a model made inside the image has no hub listing)",
        files=tuple(rows),
        seconds=round(time.monotonic() - started, 3),
        fix=f"kit image build {spec.image}",
    )


def verify(
    target: str, *, image: str | None = None, overrides: Sequence[str] = (), online: bool = True
) -> VerifyReport:
    from kit.launch import resolve_full

    resolved = resolve_full(target, image=image, overrides=overrides)
    spec = resolved.spec
    if not spec.hf_repo:
        return verify_in_image(spec)
    if not spec.hf_cache:
        raise InputError(
            "container.hf_cache", f"{spec.hf_repo} is a hub model but no HF cache is set", "set one"
        )
    return verify_snapshot(spec, resolved.model.facts.hf_files, online=online)
