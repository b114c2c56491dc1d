"""Which snapshot of a hub model the HF cache holds, judged against the catalog's pinned revision.

    read_cache(hf_home, repo)        -> CacheListing   the one function here that reads the disk
    judge_cache(listing, revision)   -> ModelCache     pure: the pinned snapshot, complete or not
    scan_cache(hf_home, repo, rev)   -> ModelCache     both

The server starts with `--revision <the pinned commit>` and HF_HUB_OFFLINE=1 (kit/launch.py), so it
loads snapshots/<that commit>/ and nothing else: a cache whose refs/main (or newest snapshot) is
complete but another commit fails the start. A model without a pinned revision falls back to
refs/main, then the newest snapshot, as huggingface_hub itself resolves 'main' offline.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from kit.model import cache

INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
SINGLE_FILES = ("model.safetensors", "pytorch_model.bin")


@dataclass(frozen=True)
class Snapshot:
    commit: str
    files: dict[str, int]
    """Relative path -> bytes, for files whose blob is there (a dangling link is not a file)."""
    shards: tuple[str, ...] | None = None
    """The shards a weight index names (None: no readable index)."""
    mtime: float = 0.0


@dataclass(frozen=True)
class CacheListing:
    """What the HF cache holds for one repository, as read from disk."""

    hub: str
    repo: str
    refs: dict[str, str] = field(default_factory=dict)
    """Branch or tag -> commit (refs/main, ...)."""
    snapshots: dict[str, Snapshot] = field(default_factory=dict)
    incomplete_blobs: int = 0
    """Blobs still named *.incomplete: a download that was interrupted or is running."""


@dataclass(frozen=True)
class ModelCache:
    hub: str
    repo: str
    present: bool
    """The snapshot the server will load is in the cache (pinned commit, else refs/main, else newest)."""
    complete: bool
    snapshot: str | None = None
    files: int = 0
    bytes: int = 0
    missing: tuple[str, ...] = ()
    incomplete_blobs: int = 0
    revision: str | None = None
    """The commit that was asked for (the catalog's pin); None for an unpinned model."""
    others: tuple[str, ...] = ()
    """Other snapshots in the cache (commits), newest first: a pin that is not there names them."""
    main: str | None = None
    """The commit refs/main names, if the cache has one."""


def read_cache(hf_home: str | Path, repo: str) -> CacheListing:
    folder = cache.repo_dir(hf_home, repo)
    hub = str(cache.hub_dir(hf_home))
    if not folder.is_dir():
        return CacheListing(hub, repo)
    refs: dict[str, str] = {}
    for ref in sorted((folder / "refs").rglob("*")) if (folder / "refs").is_dir() else ():
        with contextlib.suppress(OSError, UnicodeDecodeError):
            if ref.is_file() and (commit := ref.read_text().strip()):
                refs[str(ref.relative_to(folder / "refs"))] = commit
    snapshots = {}
    for path in sorted((folder / "snapshots").glob("*")) if (folder / "snapshots").is_dir() else ():
        if path.is_dir():
            snapshots[path.name] = _read_snapshot(path)
    incomplete = len(list((folder / "blobs").glob("*.incomplete"))) if (folder / "blobs").is_dir() else 0
    return CacheListing(hub, repo, refs, snapshots, incomplete)


def _read_snapshot(path: Path) -> Snapshot:
    files = {}
    for item in path.rglob("*"):
        with contextlib.suppress(OSError):
            if item.is_file():  # follows the blob links; a dangling one is not a file
                files[str(item.relative_to(path))] = item.stat().st_size
    shards = None
    for index in INDEXES:
        if index in files:
            with contextlib.suppress(OSError, ValueError, AttributeError, TypeError):
                shards = tuple(sorted(set(json.loads((path / index).read_text())["weight_map"].values())))
                break
    return Snapshot(path.name, files, shards, path.stat().st_mtime)


def judge_cache(listing: CacheListing, revision: str | None) -> ModelCache:
    """The snapshot the server will load, and whether it is complete: config.json, every shard its
    index names (or the single weights file), no interrupted download."""
    main = listing.refs.get("main")
    by_age = sorted(listing.snapshots.values(), key=lambda s: s.mtime, reverse=True)
    if revision is not None:
        chosen = listing.snapshots.get(revision)
    else:
        chosen = listing.snapshots.get(main or "") or (by_age[0] if by_age else None)
    others = tuple(s.commit for s in by_age if chosen is None or s.commit != chosen.commit)
    common = {
        "hub": listing.hub,
        "repo": listing.repo,
        "incomplete_blobs": listing.incomplete_blobs,
        "revision": revision,
        "others": others,
        "main": main,
    }
    if chosen is None:
        return ModelCache(present=False, complete=False, **common)
    expected = set(chosen.shards or ()) or (set(SINGLE_FILES) & set(chosen.files)) or {SINGLE_FILES[0]}
    missing = tuple(sorted(expected - set(chosen.files)))
    complete = not missing and "config.json" in chosen.files and listing.incomplete_blobs == 0
    return ModelCache(
        present=True,
        complete=complete,
        snapshot=chosen.commit,
        files=len(chosen.files),
        bytes=sum(chosen.files.values()),
        missing=missing,
        **common,
    )


def scan_cache(hf_home: str | Path, repo: str, revision: str | None = None) -> ModelCache:
    return judge_cache(read_cache(hf_home, repo), revision)


def describe_absent(state: ModelCache) -> str:
    """'Qwen/X@dc4d34844... is not in /hf/hub (it holds 1234abcd5678, refs/main -> 1234abcd5678)'."""
    wanted = f"{state.repo}@{state.revision[:12]}" if state.revision else state.repo
    held = [c[:12] for c in state.others[:3]] + (["..."] if len(state.others) > 3 else [])
    aside = []
    if held:
        aside.append(f"it holds {', '.join(held)}")
    if state.main:
        aside.append(f"refs/main -> {state.main[:12]}")
    return f"{wanted} is not in {state.hub}" + (f" ({'; '.join(aside)})" if aside else "")


def fetch_hint(target: str | None, repo: str | None, revision: str | None) -> str:
    """The command that puts the pinned snapshot in the cache: the kit's own, else huggingface_hub's
    (huggingface_hub 1.x ships only `hf`), always at the pinned revision."""
    if target:
        return f"kit model fetch {target}"
    return f"hf download {repo}" + (f" --revision {revision}" if revision else "")
