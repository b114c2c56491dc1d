"""The preflight container: what is copied into it, a thread that reads its output, its removal.

`kit preflight` (kit/pivot/preflight.py) creates one container per attempt from the target's image
and copies in, at run time, the rank script (kit/pivot/inimage/ranks.py), the SGLang set-up it
shares with `kit image verify` (kit/images/inimage/sglang_groups.py) and the request; no image needs
to carry them.
"""

from __future__ import annotations

import io
import json
import queue
import tarfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests
from docker.errors import DockerException

from kit.logs.stacks import RankStack, classify_stack
from kit.runtime import server as runtime
from kit.runtime.cache import ensure_volume
from kit.runtime.engine import client, translated
from kit.runtime.source import LineSplitter

RANKS_SCRIPT = Path(__file__).resolve().parent / "inimage" / "ranks.py"
SGLANG_GROUPS = Path(__file__).resolve().parents[1] / "images" / "inimage" / "sglang_groups.py"
IN_CONTAINER = "/kit-preflight"
_ERRORS = (DockerException, requests.RequestException, OSError)


def archive(request: dict) -> bytes:
    """The files the ranks need, as a tar for put_archive."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in (
            ("ranks.py", RANKS_SCRIPT.read_bytes()),
            ("sglang_groups.py", SGLANG_GROUPS.read_bytes()),
            ("request.json", json.dumps(request).encode()),
        ):
            info = tarfile.TarInfo(f"{IN_CONTAINER.strip('/')}/{name}")
            info.size = len(data)
            info.mode = 0o644
            info.mtime = int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class PreflightContainer:
    """The preflight container and a thread that reads its output; removed by `remove()`."""

    def __init__(self, kwargs: dict, request: dict):
        self.name = kwargs["name"]
        self.lines: queue.Queue[tuple[float, str | None]] = queue.Queue()
        ensure_volume()  # labelled as Compose labels it (kit/runtime/cache.py)
        with translated(f"creating {self.name}"):
            self.container = client().containers.create(**kwargs)
        try:
            with translated(f"copying the preflight script into {self.name}"):
                self.container.put_archive("/", archive(request))
        except BaseException:
            self.remove()
            raise

    def start(self) -> float:
        with translated(f"starting {self.name}"):
            self.container.start()
        started = time.monotonic()
        threading.Thread(target=self._read, name="kit-preflight-output", daemon=True).start()
        return started

    def _read(self) -> None:
        splitter = LineSplitter()
        try:
            for chunk in self.container.logs(stdout=True, stderr=True, stream=True, follow=True):
                now = time.monotonic()
                for line in splitter.feed(chunk):
                    self.lines.put((now, line))
        except _ERRORS:
            pass
        finally:
            for line in splitter.flush():
                self.lines.put((time.monotonic(), line))
            self.lines.put((time.monotonic(), None))

    def exit_code(self) -> int | None:
        try:
            return int(self.container.wait(timeout=5).get("StatusCode", -1))
        except _ERRORS:
            return None

    def stacks(self, pids: dict[int, int]) -> dict[str, RankStack]:
        def dump(item: tuple[int, int]) -> tuple[str, RankStack]:
            rank, pid = item
            label = f"rank{rank}"
            return label, classify_stack(label, runtime.dump_stack(self.container, pid), pid)

        with ThreadPoolExecutor(max_workers=max(1, min(8, len(pids)))) as pool:
            return dict(pool.map(dump, sorted(pids.items())))

    def log_text(self) -> str:
        return runtime.logs_text(self.container)

    def remove(self) -> bool:
        try:
            return runtime.remove(self.container)
        except Exception:
            return False
