"""The only module that talks to the Hugging Face hub (through huggingface_hub), with its errors
translated into the kit's: a wrong revision or a refused token is bad input (exit 2); no network,
no space and a dropped connection are the machine's problem (exit 3), each one line.

HF_ENDPOINT is read at call time (huggingface_hub reads it once at import), so a local server
speaking the hub's file endpoints stands in for the hub in tests. HF_TOKEN is read by name and
handed to huggingface_hub; it is never printed or written.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from kit.errors import EnvironmentProblem, InputError, KitError

DEFAULT_ENDPOINT = "https://huggingface.co"


def _http():
    """The HTTP library huggingface_hub speaks (2.x: httpx2, 1.x: httpx), imported when needed."""
    try:
        import httpx2

        return httpx2
    except ImportError:  # pragma: no cover - depends on the installed huggingface_hub
        import httpx

        return httpx


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def token() -> str | None:
    return os.environ.get("HF_TOKEN") or None


@dataclass(frozen=True)
class Listing:
    commit: str
    sizes: dict[str, int]
    """Every file of the repository at that commit -> bytes."""


@dataclass(frozen=True)
class RemoteFile:
    name: str
    url: str
    etag: str
    size: int
    commit: str
    xet: bool
    """The hub stores it in Xet: hf_xet (when installed) fetches it faster than plain HTTP."""


@contextlib.contextmanager
def translated(repo: str, revision: str, where: str = "revision") -> Iterator[None]:
    """huggingface_hub / HTTP / disk errors -> one-line kit errors."""
    from huggingface_hub import errors as hub_errors

    try:
        yield
    except hub_errors.RevisionNotFoundError as exc:
        raise InputError(
            where, f"'{revision}' is not a revision of {repo}", "give a commit the hub has (see its history)"
        ) from exc
    except hub_errors.GatedRepoError as exc:
        raise InputError(
            "HF_TOKEN",
            f"{repo} is gated and the token has no access",
            "accept its terms on the hub, then retry",
        ) from exc
    except hub_errors.RepositoryNotFoundError as exc:
        fix = "export HF_TOKEN=<a token with access>" if not token() else "check the catalog's hf_id"
        raise InputError("hf_id", f"{repo} was not found on {endpoint()} (or needs a token)", fix) from exc
    except hub_errors.OfflineModeIsEnabled as exc:
        raise EnvironmentProblem(
            "HF_HUB_OFFLINE is set in this shell", hint="unset it for `kit model fetch`"
        ) from exc
    except hub_errors.HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "?"
        raise EnvironmentProblem(f"the hub answered HTTP {status} for {repo}@{revision[:12]}") from exc
    except _http().TransportError as exc:
        raise EnvironmentProblem(
            f"cannot reach {endpoint()} ({type(exc).__name__})",
            hint="check the network or HTTPS_PROXY; what arrived is kept, run the same command to resume",
        ) from exc
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise EnvironmentProblem(
                f"no space left on the device ({exc.filename or 'the HF cache'})",
                hint="free space or set the profile's container.hf_cache; run the same command to resume",
            ) from exc
        raise


def list_files(repo: str, revision: str, where: str = "revision") -> Listing:
    from huggingface_hub import HfApi

    with translated(repo, revision, where):
        info = HfApi(endpoint=endpoint()).model_info(
            repo, revision=revision, files_metadata=True, token=token()
        )
    sizes = {s.rfilename: int(s.size or 0) for s in info.siblings or []}
    return Listing(commit=info.sha or revision, sizes=sizes)


@dataclass(frozen=True)
class RevisionCheck:
    """The pinned revision held against the hub's listing of the repository."""

    repo: str
    revision: str
    status: Literal["confirmed", "unknown", "unconfirmed"]
    """confirmed: the hub lists that commit; unknown: the hub answered that it has no such revision;
    unconfirmed: the hub could not be asked (offline, HF_HUB_OFFLINE, a refused token), `detail` says why."""
    detail: str
    main: str | None = None
    """The commit the hub's main points at now (None when unknown)."""

    @property
    def line(self) -> str:
        return f"revision {self.revision[:12]}: {self.detail}"


def confirm_revision(repo: str, revision: str) -> RevisionCheck:
    """Ask the hub whether it lists `revision` for `repo`, and where main is now. Never raises for a
    hub that cannot be reached: that is an answer ('unconfirmed', saying so), not a pass."""
    try:
        pinned = list_files(repo, revision).commit
    except InputError as exc:
        if exc.field == "revision":
            return RevisionCheck(repo, revision, "unknown", f"the hub has no revision {revision} of {repo}")
        return RevisionCheck(repo, revision, "unconfirmed", f"not confirmed: {exc.one_line()}")
    except EnvironmentProblem as exc:
        return RevisionCheck(repo, revision, "unconfirmed", f"not confirmed: {exc.one_line()}")
    try:
        main: str | None = list_files(repo, "main").commit
    except (InputError, EnvironmentProblem):
        main = None
    if pinned != revision:  # a branch or tag name: the catalog pins commits, so say what it is now
        return RevisionCheck(repo, revision, "confirmed", f"the hub resolves it to {pinned[:12]}", main)
    where = (
        "; it is main's head" if main == revision else f"; main has moved on to {main[:12]}" if main else ""
    )
    detail = f"confirmed by the hub's listing of {repo}{where}"
    return RevisionCheck(repo, revision, "confirmed", detail, main)


def remote_file(repo: str, name: str, commit: str) -> RemoteFile:
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    url = hf_hub_url(repo, name, revision=commit, endpoint=endpoint())
    with translated(repo, commit):
        meta = get_hf_file_metadata(url, token=token())
    if not meta.etag or meta.size is None:
        raise EnvironmentProblem(f"the hub gave no ETag or size for {name}", hint="retry later")
    return RemoteFile(
        name, url, meta.etag, int(meta.size), meta.commit_hash or commit, meta.xet_file_data is not None
    )


def xet_available() -> bool:
    try:
        import hf_xet  # noqa: F401  (huggingface_hub uses it for Xet-stored files when importable)
    except ImportError:
        return False
    return not os.environ.get("HF_HUB_DISABLE_XET")


class ConnectionLost(EnvironmentProblem):
    """The transfer stopped part-way; what arrived is kept for the next run."""


def download(
    remote: RemoteFile,
    partial: Path,
    on_bytes: Callable[[int], None],
    *,
    retries: int = 2,
) -> None:
    """Fetch remote into `partial`, resuming from its current length with an HTTP Range request.

    Transfer errors are retried `retries` times (each resuming); then ConnectionLost, with the bytes
    kept. The caller moves the finished file into place.
    """
    from huggingface_hub.utils import build_hf_headers, get_session

    attempt = 0
    while True:
        have = partial.stat().st_size if partial.exists() else 0
        if have >= remote.size:
            return
        headers = build_hf_headers(token=token())
        headers["Accept-Encoding"] = "identity"
        headers["Range"] = f"bytes={have}-"
        try:
            with (
                get_session().stream("GET", remote.url, headers=headers, follow_redirects=True) as response,
            ):
                if response.status_code == 200 and have:
                    have = 0  # the server ignored Range: start this file over
                elif response.status_code not in (200, 206):
                    raise EnvironmentProblem(
                        f"the hub answered HTTP {response.status_code} for {remote.name}"
                    )
                with partial.open("r+b" if have else "wb") as out:
                    out.seek(have)
                    out.truncate()
                    for chunk in response.iter_bytes():  # as it arrives: a cut keeps every byte
                        out.write(chunk)
                        on_bytes(len(chunk))
        except (_http().TransportError, _http().StreamError) as exc:
            attempt += 1
            if attempt > retries:
                kept = partial.stat().st_size if partial.exists() else 0
                raise ConnectionLost(
                    f"connection lost while fetching {remote.name} ({type(exc).__name__}); "
                    f"{kept} of {remote.size} bytes kept",
                    hint="run the same command again to resume",
                ) from exc
            continue
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise EnvironmentProblem(
                    f"no space left on the device while writing {remote.name}",
                    hint="free space; what arrived is kept, run the same command to resume",
                ) from exc
            raise KitError(f"writing {partial}: {exc.strerror or exc}") from exc
        done = partial.stat().st_size
        if done == remote.size:
            return
        if done > remote.size:
            partial.unlink()
            raise EnvironmentProblem(f"{remote.name}: got more bytes than the hub listed; removed, run again")
        attempt += 1
        if attempt > retries:
            raise ConnectionLost(
                f"the transfer of {remote.name} ended early; {done} of {remote.size} bytes kept",
                hint="run the same command again to resume",
            )


def download_with_xet(repo: str, remote: RemoteFile, hf_home: Path, on_bytes: Callable[[int], None]) -> None:
    """huggingface_hub's own download (Xet storage, parallel chunks) into the same cache."""
    from huggingface_hub import hf_hub_download
    from tqdm.auto import tqdm

    class _Bytes(tqdm):  # huggingface_hub reports bytes through a tqdm class; forward them
        def __init__(self, *args, **kwargs):
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

        def update(self, n=1):
            if n:
                on_bytes(int(n))
            return super().update(n)

    with translated(repo, remote.commit):
        hf_hub_download(
            repo,
            remote.name,
            revision=remote.commit,
            cache_dir=hf_home / "hub",
            token=token(),
            endpoint=endpoint(),
            tqdm_class=_Bytes,
        )
