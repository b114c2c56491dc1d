"""Is a model complete in the Hugging Face cache: the scan doctor's model-cache check reads.

`scan_model_cache(hub, repo, revision)` judges the snapshot at the catalog's pinned revision (else
refs/main): the judgement is kit.model's (kit/model/snapshots.py, pure over a cache reading), so
doctor and `kit model` say the same of one cache.
"""

from __future__ import annotations

from pathlib import Path

from kit.model.snapshots import ModelCache, scan_cache

__all__ = ["ModelCache", "scan_model_cache"]


def scan_model_cache(hub: Path, repo_id: str, revision: str | None = None) -> ModelCache:
    """REPO_ID's snapshot at `revision` in the cache under HUB (HF_HOME/hub), complete or not."""
    return scan_cache(Path(hub).parent, repo_id, revision)
