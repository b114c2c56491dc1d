"""The Hugging Face cache layout the container mounts, and the kit's note of what the hub listed.

    HF_HOME/hub/models--Qwen--Qwen3.5-122B-A10B/
        blobs/<etag>                        the bytes (<etag>.incomplete while the kit downloads)
        snapshots/<commit>/<file>  ->  ../../blobs/<etag>
        refs/main                           the commit a branch pointed at (written for branches only)

The container mounts HF_HOME (spec.hf_cache) at /root/.cache/huggingface, so SGLang, started with
--revision <commit> and HF_HUB_OFFLINE=1, finds exactly the files fetched here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from kit import paths


def hub_dir(hf_home: str | Path) -> Path:
    return Path(hf_home) / "hub"


def repo_dir(hf_home: str | Path, repo: str) -> Path:
    return hub_dir(hf_home) / ("models--" + repo.replace("/", "--"))


def snapshot_dir(hf_home: str | Path, repo: str, revision: str) -> Path:
    return repo_dir(hf_home, repo) / "snapshots" / revision


def fetched_file(hf_home: str | None, repo: str | None, revision: str | None, name: str) -> Path | None:
    """NAME in the pinned snapshot that `kit model fetch` put in HF_HOME, or None where it is not
    there (no host folder, no pin, not fetched yet)."""
    if not (hf_home and repo and revision) or not os.path.isabs(hf_home):  # a named volume: not readable
        return None
    path = snapshot_dir(hf_home, repo, revision) / name
    return path if path.is_file() else None


def blob_path(hf_home: str | Path, repo: str, etag: str) -> Path:
    return repo_dir(hf_home, repo) / "blobs" / etag


def incomplete_path(hf_home: str | Path, repo: str, etag: str) -> Path:
    return blob_path(hf_home, repo, etag).with_name(etag + ".incomplete")


def lock_path(hf_home: str | Path, repo: str, etag: str) -> Path:
    """Beside huggingface_hub's own locks (hub/.locks/), not among the blobs."""
    folder = hub_dir(hf_home) / ".locks" / repo_dir(hf_home, repo).name
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{etag}.kit.lock"


def link(blob: Path, pointer: Path) -> None:
    """snapshots/<commit>/<file> -> the blob, relative like the hub's own (the cache can move)."""
    pointer.parent.mkdir(parents=True, exist_ok=True)
    target = os.path.relpath(blob, pointer.parent)
    tmp = pointer.with_name(pointer.name + ".kit-link")
    tmp.unlink(missing_ok=True)
    os.symlink(target, tmp)
    os.replace(tmp, pointer)


def listing_path(repo: str, revision: str) -> Path:
    return paths.cache_dir() / "models" / f"{repo.replace('/', '--')}@{revision}.json"


def save_listing(repo: str, revision: str, sizes: dict[str, int]) -> Path:
    """The hub's file sizes at this commit, kept so verify needs no network later."""
    path = listing_path(repo, revision)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"repo": repo, "revision": revision, "sizes": sizes}, indent=1, sort_keys=True))
    os.replace(tmp, path)
    return path


def load_listing(repo: str, revision: str) -> dict[str, int] | None:
    try:
        data = json.loads(listing_path(repo, revision).read_text())
    except (OSError, ValueError):
        return None
    sizes = data.get("sizes") if isinstance(data, dict) else None
    return {str(k): int(v) for k, v in sizes.items()} if isinstance(sizes, dict) else None


def partial_bytes(hf_home: str | Path, repo: str) -> int:
    """Bytes already in the kit's .incomplete files of this repository (what a resume will keep)."""
    blobs = repo_dir(hf_home, repo) / "blobs"
    return sum(p.stat().st_size for p in blobs.glob("*.incomplete")) if blobs.is_dir() else 0
