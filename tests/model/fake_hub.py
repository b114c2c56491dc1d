"""A local stand-in for the Hugging Face hub: the endpoints huggingface_hub and the kit's fetch use.

    GET  /api/models/{repo}/revision/{rev}     model info with siblings and sizes (X-Error-Code on 404)
    HEAD /{repo}/resolve/{rev}/{file}          ETag, X-Repo-Commit, Content-Length, Accept-Ranges
    GET  /{repo}/resolve/{rev}/{file}          the bytes; honours `Range: bytes=N-` with 206

`drop_after[file] = N` makes the next GET of that file send N bytes and then cut the connection
(what a flaky link or a killed proxy does). Every request is recorded. No network: 127.0.0.1 only.
Also: small safetensors files written with the standard library, for a model folder to serve.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def safetensors_bytes(tensors: dict[str, int], seed: int = 0) -> bytes:
    """A valid safetensors file: each tensor a U8 vector of the given byte length."""
    header, offset = {}, 0
    for name, size in tensors.items():
        header[name] = {"dtype": "U8", "shape": [size], "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    data = bytes((i * 31 + seed) % 251 for i in range(offset))
    return struct.pack("<Q", len(raw)) + raw + data


def model_files(shard_bytes: int = 600_000, shards: int = 3) -> dict[str, bytes]:
    """A small sharded checkpoint as the hub holds it (plus files a launch does not need)."""
    files: dict[str, bytes] = {}
    weight_map = {}
    for i in range(1, shards + 1):
        name = f"model-{i:05d}-of-{shards:05d}.safetensors"
        tensors = {f"layers.{i}.a": shard_bytes // 2, f"layers.{i}.b": shard_bytes - shard_bytes // 2}
        files[name] = safetensors_bytes(tensors, seed=i)
        weight_map.update(dict.fromkeys(tensors, name))
    files["model.safetensors.index.json"] = json.dumps({"metadata": {}, "weight_map": weight_map}).encode()
    files["config.json"] = json.dumps({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}).encode()
    files["tokenizer_config.json"] = b'{"model_max_length": 4096}'
    files["tokenizer.json"] = b'{"version": "1.0", "model": {"type": "BPE"}}'
    files["README.md"] = b"# not needed by a launch\n"
    files["original/consolidated.pth"] = b"\0" * 1000
    return files


@dataclass
class Repo:
    files: dict[str, bytes]
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    branches: dict[str, str] = field(default_factory=dict)
    history: dict[str, dict[str, bytes]] = field(default_factory=dict)
    """Older commits -> their files (the repository as it was; `files` is `commit`'s)."""

    def resolve(self, rev: str) -> str | None:
        if rev == self.commit or rev in self.history:
            return rev
        return self.branches.get(rev)

    def files_at(self, commit: str) -> dict[str, bytes]:
        return self.files if commit == self.commit else self.history[commit]


@dataclass
class FakeHub:
    repos: dict[str, Repo]
    drop_after: dict[str, int] = field(default_factory=dict)
    requests: list[tuple[str, str, str]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeHub:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_HEAD(self):
                hub.requests.append(("HEAD", self.path, self.headers.get("Range", "")))
                hub._file(self, head=True)

            def do_GET(self):
                hub.requests.append(("GET", self.path, self.headers.get("Range", "")))
                if self.path.startswith("/api/models/"):
                    hub._info(self)
                else:
                    hub._file(self, head=False)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        assert self.server
        self.server.shutdown()
        self.server.server_close()

    def _error(self, h: BaseHTTPRequestHandler, status: int, code: str) -> None:
        body = json.dumps({"error": code}).encode()
        h.send_response(status)
        h.send_header("X-Error-Code", code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _info(self, h: BaseHTTPRequestHandler) -> None:
        match = re.match(r"^/api/models/([^/]+/[^/]+)/revision/([^/?]+)", h.path)
        repo = self.repos.get(match.group(1)) if match else None
        if repo is None:
            return self._error(h, 404, "RepoNotFound")
        commit = repo.resolve(match.group(2))
        if commit is None:
            return self._error(h, 404, "RevisionNotFound")
        siblings = [
            {"rfilename": n, "size": len(b), "blobId": hashlib.sha1(b).hexdigest()}
            for n, b in repo.files_at(commit).items()
        ]
        body = json.dumps(
            {"id": match.group(1), "sha": commit, "siblings": siblings, "private": False}
        ).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _file(self, h: BaseHTTPRequestHandler, *, head: bool) -> None:
        match = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", h.path)
        repo = self.repos.get(match.group(1)) if match else None
        if repo is None:
            return self._error(h, 404, "RepoNotFound")
        commit = repo.resolve(match.group(2))
        if commit is None:
            return self._error(h, 404, "RevisionNotFound")
        name = match.group(3)
        data = repo.files_at(commit).get(name)
        if data is None:
            return self._error(h, 404, "EntryNotFound")
        start = 0
        ranged = re.match(r"bytes=(\d+)-$", h.headers.get("Range", ""))
        if ranged and not head:
            start = int(ranged.group(1))
        h.send_response(206 if start else 200)
        h.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        h.send_header("X-Repo-Commit", commit)
        h.send_header("Accept-Ranges", "bytes")
        h.send_header("Content-Length", str(len(data) - start))
        if start:
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        h.end_headers()
        if head:
            return
        cut = self.drop_after.pop(name, None)
        if cut is not None:
            h.wfile.write(data[start : start + cut])
            h.wfile.flush()
            h.close_connection = True
            h.connection.shutdown(2)  # mid-body: the client sees the connection die
            return
        h.wfile.write(data[start:])


def write_folder(folder: Path, files: dict[str, bytes]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return folder


# The scratch catalog's model (tests/model/conftest.py): its repo and pinned commit.
REPO = "kit-test/fake-model"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
