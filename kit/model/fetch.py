"""`kit model fetch TARGET`: the files a launch needs, at the catalog's pinned commit, into the HF
cache the container mounts; resumable, with byte progress, before any container starts.

The hub's listing says what exists and how large; the catalog's `hf_files` patterns say what a
launch needs (config, tokenizer, index, shards; no README, no GGUF). Files already in the cache
are kept; a file cut short last time resumes from its `.incomplete` bytes (HTTP Range). Xet-stored
files go through huggingface_hub's own Xet transfer when hf_xet is installed.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kit.errors import EnvironmentProblem, ExitCode, InputError, KitError
from kit.model import cache, hub


@dataclass(frozen=True)
class FetchProgress:
    file: str
    file_done: int
    file_total: int
    done: int
    """Bytes of the whole model in the cache so far (kept files and resumed bytes included)."""
    total: int
    files_done: int
    files_total: int
    backend: str


@dataclass(frozen=True)
class FetchResult:
    repo: str
    revision: str
    snapshot: str
    files: int
    bytes_total: int
    bytes_fetched: int
    """Bytes that came over the network in this run."""
    bytes_kept: int
    """Bytes already in the cache (whole files and the resumed parts of cut-short ones)."""
    seconds: float
    backends: tuple[str, ...]
    fetched: tuple[str, ...] = field(default=())


class Interrupted(KitError):
    exit_code = ExitCode.INTERRUPTED


ProgressCallback = Callable[[FetchProgress], None]


def wanted_files(sizes: dict[str, int], patterns: Sequence[str]) -> list[str]:
    return sorted(n for n in sizes if any(fnmatch.fnmatch(n, p) for p in patterns))


def _existing_parent(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_space(hf_home: Path, needed: int) -> None:
    free = shutil.disk_usage(_existing_parent(hf_home)).free
    if needed > free:
        raise EnvironmentProblem(
            f"not enough space: {gb(needed)} still to fetch, {gb(free)} free at {hf_home}",
            hint="free space, or point the profile's container.hf_cache at a larger disk",
        )


def gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def _present(pointer: Path, size: int) -> bool:
    try:
        return pointer.stat().st_size == size
    except OSError:
        return False


def fetch_repo(
    repo: str,
    revision: str,
    hf_home: str | Path,
    patterns: Sequence[str],
    *,
    revision_field: str = "revision",
    on_progress: ProgressCallback | None = None,
    retries: int = 2,
    use_xet: bool = True,
) -> FetchResult:
    """Fetch `repo` at `revision` into hf_home/hub; returns what was kept, fetched and where."""
    started = time.monotonic()
    hf_home = Path(hf_home)
    listing = hub.list_files(repo, revision, revision_field)
    names = wanted_files(listing.sizes, patterns)
    if not names:
        raise InputError(
            "hf_files",
            f"no file of {repo}@{listing.commit[:12]} matches {', '.join(patterns)}",
            "fix the patterns",
        )
    sizes = {n: listing.sizes[n] for n in names}
    cache.save_listing(repo, listing.commit, sizes)
    snapshot = cache.snapshot_dir(hf_home, repo, listing.commit)
    total = sum(sizes.values())
    missing = [n for n in names if not _present(snapshot / n, sizes[n])]
    kept = total - sum(sizes[n] for n in missing)
    check_space(hf_home, sum(sizes[n] for n in missing) - cache.partial_bytes(hf_home, repo))
    done, fetched_bytes, backends = kept, 0, set()
    files_done = len(names) - len(missing)
    current = {"file": "", "bytes": 0, "files_done": files_done}
    try:
        for name in missing:
            remote = hub.remote_file(repo, name, listing.commit)
            backend = "xet" if (use_xet and remote.xet and hub.xet_available()) else "http"
            backends.add(backend)
            current.update(file=name, bytes=0)

            def report(n: int, remote: hub.RemoteFile = remote, backend: str = backend) -> None:
                nonlocal done, fetched_bytes
                done += n
                fetched_bytes += n
                current["bytes"] += n
                if on_progress:
                    on_progress(
                        FetchProgress(
                            remote.name,
                            current["bytes"],
                            remote.size,
                            done,
                            total,
                            current["files_done"],
                            len(names),
                            backend,
                        )
                    )

            resumed = _fetch_one(repo, remote, hf_home, snapshot / name, backend, report, retries)
            kept += resumed
            done += resumed if resumed else 0
            files_done += 1
            current["files_done"] = files_done
            if on_progress:
                on_progress(
                    FetchProgress(
                        name, remote.size, remote.size, done, total, files_done, len(names), backend
                    )
                )
    except KeyboardInterrupt:
        have = sum(sizes[n] for n in names if _present(snapshot / n, sizes[n]))
        have += cache.partial_bytes(hf_home, repo)
        raise Interrupted(
            f"interrupted during {current['file'] or 'the listing'}; {gb(have)} of {gb(total)} kept "
            f"in {cache.repo_dir(hf_home, repo)}",
            hint="run the same command again to resume",
        ) from None
    if revision != listing.commit:  # a branch or tag: note where it pointed, as the hub does
        refs = cache.repo_dir(hf_home, repo) / "refs" / revision
        refs.parent.mkdir(parents=True, exist_ok=True)
        refs.write_text(listing.commit)
    return FetchResult(
        repo=repo,
        revision=listing.commit,
        snapshot=str(snapshot),
        files=len(names),
        bytes_total=total,
        bytes_fetched=fetched_bytes,
        bytes_kept=kept,
        seconds=round(time.monotonic() - started, 2),
        backends=tuple(sorted(backends)),
        fetched=tuple(missing),
    )


def _fetch_one(
    repo: str,
    remote: hub.RemoteFile,
    hf_home: Path,
    pointer: Path,
    backend: str,
    report: Callable[[int], None],
    retries: int,
) -> int:
    """One file into blobs/ and its snapshot link; returns the bytes resumed from an earlier run."""
    from filelock import FileLock

    blob = cache.blob_path(hf_home, repo, remote.etag)
    blob.parent.mkdir(parents=True, exist_ok=True)
    if blob.exists() and blob.stat().st_size == remote.size:  # same bytes under another name/commit
        cache.link(blob, pointer)
        return remote.size
    if backend == "xet":
        hub.download_with_xet(repo, remote, hf_home, report)
        return 0
    partial = cache.incomplete_path(hf_home, repo, remote.etag)
    with FileLock(str(cache.lock_path(hf_home, repo, remote.etag))):  # two fetches take turns per file
        resumed = partial.stat().st_size if partial.exists() else 0
        hub.download(remote, partial, report, retries=retries)
        os.replace(partial, blob)
    cache.link(blob, pointer)
    return min(resumed, remote.size)
