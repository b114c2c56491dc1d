"""Build an image from its manifest: build args, a small assembled context, the engine's build.

The context is assembled here rather than taken from the checkout, so a build sends a few files
(and an optional local torch wheel), never the whole repository, and works the same from a wheel
install. Its layout is the repository's own (CONTEXT_PATHS), so compose.yaml's `build:` can use the
checkout itself as the context (.dockerignore keeps it to these paths) with the same Dockerfile.
The build itself goes through the docker SDK.
"""

from __future__ import annotations

import io
import re
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from kit import paths
from kit.errors import InputError, KitError
from kit.images.base import BaseCheck, LocalBase, base_line, judge_base, local_base, pull_named
from kit.images.manifest import Manifest, lock_path
from kit.images.resolve import find_local_wheel, python_tag

AptMode = Literal["locked", "snapshot", "today"]
_CONTEXT_MTIME = 1_700_000_000  # fixed, so two contexts with the same files are byte-identical

# Where the Dockerfile's COPY sources lie, in the assembled context and in the repository alike.
CA_DIR = "images/ca"
WHEELS_DIR = "images/wheels"
LOCK_DIR = "images"
INIMAGE_DIR = "kit/images/inimage"
REHEARSAL_DIR = "kit/rehearsal"


@dataclass(frozen=True)
class BuildOptions:
    ca_bundle: Path | None = None
    wheel_dirs: tuple[Path, ...] = ()
    no_cache: bool = False
    lock_text: str | None = None
    """Installed in place of images/NAME.lock (`--from-bundle`: a colleague's lock, judged first)."""
    tag: str | None = None
    """In place of kit/sglang:NAME, so a bundle's build does not replace the local image."""
    apt: AptMode = "locked"
    """The system packages: the lock's versions (locked), those from the snapshot of the lock's date
    (a locked version the mirror no longer serves), or the mirror's of today (to relock from)."""


@dataclass(frozen=True)
class BuildResult:
    name: str
    tag: str
    image_id: str
    seconds: float
    torch_source: str
    log_path: Path
    build_args: dict[str, str] = field(default_factory=dict)
    base: str = ""
    """What the build said about its base (kit.images.base.judge_base): the manifest's, or a local
    base accepted though its content is not fixed."""


def build_args(
    manifest: Manifest,
    *,
    torch_wheel: str = "",
    lock_text: str | None = None,
    base: str = "",
    apt: AptMode = "locked",
) -> dict[str, str]:
    """Every ARG the Dockerfile declares, fed explicitly (a unit test holds both sides equal).
    `torch_wheel`: the file name of the local torch wheel in the context, if any. What is installed
    is images/NAME.lock alone; the pins here feed the image's labels and the index to find files.
    `lock_text` gives SOURCE_DATE_EPOCH (the lock's date; a lock without one: the context's fixed
    time), `base` the line the build said about its base (a label)."""
    from kit.images.system_lock import system_of

    pins = manifest.pins
    epoch = system_of(lock_text).source_date_epoch if lock_text else None
    # A local wheel replaces torch only: torchvision's and torchaudio's +cuXXX builds live on the
    # torch index alone, so a GPU image keeps it. The CPU rehearsal needs nothing else from it, and
    # must build where that index cannot be reached.
    keep_index = not torch_wheel or bool(pins.torchvision) or manifest.flavor == "cuda"
    return {
        "BASE_IMAGE": manifest.base.image,
        "KIT_IMAGE_NAME": manifest.name,
        "KIT_FLAVOR": manifest.flavor,
        "KIT_DIALECT": manifest.dialect,
        "APT_PACKAGES": " ".join(manifest.base.apt_packages),
        "PYTHON": manifest.base.python,
        "KIT_CUDA_VERSION": pins.cuda or "",
        "TORCH_VERSION": pins.torch,
        "TORCH_INDEX_URL": (pins.torch_index or "") if keep_index else "",
        "TORCHVISION_VERSION": pins.torchvision or "",
        "SGLANG_VERSION": pins.sglang,
        "SGLANG_KERNEL_VERSION": pins.sglang_kernel or "",
        "FLASHINFER_VERSION": pins.flashinfer or "",
        "NCCL_PACKAGE": pins.nccl_package or "",
        "KIT_NCCL_VERSION": pins.nccl or "",
        "TORCH_CUDA_ARCH_LIST": pins.torch_cuda_arch_list or "",
        "SOURCE_DATE_EPOCH": str(epoch if epoch is not None else _CONTEXT_MTIME),
        "KIT_APT": apt,
        "KIT_BASE": base,
    }


def committed_build_args(manifest: Manifest) -> dict[str, str]:
    """build_args with the committed lock's date: what `kit image build-args` prints and Compose's
    `build:` feeds (neither checks the base, so KIT_BASE stays empty there)."""
    path = lock_path(manifest.name)
    return build_args(manifest, lock_text=path.read_text(encoding="utf-8") if path.is_file() else None)


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, _CONTEXT_MTIME
    tar.addfile(info, io.BytesIO(data))


def _add_file(tar: tarfile.TarFile, name: str, path: Path) -> None:
    info = tar.gettarinfo(str(path), arcname=name)
    info.mtime, info.uid, info.gid, info.uname, info.gname = _CONTEXT_MTIME, 0, 0, "", ""
    with path.open("rb") as handle:
        tar.addfile(info, handle)


def _add_tree(tar: tarfile.TarFile, prefix: str, root: Path) -> None:
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            _add_file(tar, f"{prefix}/{path.relative_to(root).as_posix()}", path)


def local_torch_wheel(manifest: Manifest, options: BuildOptions) -> Path | None:
    return find_local_wheel(
        "torch", manifest.pins.torch, python_tag(manifest.base.python), options.wheel_dirs
    )


def write_context(out, manifest: Manifest, options: BuildOptions) -> str:
    """Write the build context tar to `out`; return where torch will come from."""
    pkg = paths.package_dir()
    wheel = local_torch_wheel(manifest, options)
    lock = lock_path(manifest.name)
    if options.lock_text is None and not lock.is_file():
        raise InputError(
            "image", f"{manifest.name} has no lock ({lock})", f"run 'kit image lock {manifest.name}' first"
        )
    with tarfile.open(fileobj=out, mode="w") as tar:
        _add_file(tar, "Dockerfile", paths.dockerfile())
        if options.lock_text is not None:
            _add_bytes(tar, f"{LOCK_DIR}/{lock.name}", options.lock_text.encode("utf-8"))
        else:
            _add_file(tar, f"{LOCK_DIR}/{lock.name}", lock)
        _add_tree(tar, INIMAGE_DIR, pkg / "images" / "inimage")
        _add_bytes(tar, f"{INIMAGE_DIR}/.keep", b"")
        rehearsal = pkg / "rehearsal"
        _add_tree(tar, f"{REHEARSAL_DIR}/shims", rehearsal / "shims")
        _add_file(tar, f"{REHEARSAL_DIR}/kit_faults.py", rehearsal / "kit_faults.py")
        _add_file(tar, f"{REHEARSAL_DIR}/tiny_model.py", rehearsal / "tiny_model.py")
        _add_file(tar, f"{REHEARSAL_DIR}/tiny_qwen3_5.py", rehearsal / "tiny_qwen3_5.py")
        if options.ca_bundle:
            if not options.ca_bundle.is_file():
                raise InputError("--ca-bundle", f"no file at {options.ca_bundle}", "give a PEM bundle path")
            _add_file(tar, f"{CA_DIR}/ca-bundle.crt", options.ca_bundle)
        else:
            _add_bytes(tar, f"{CA_DIR}/.keep", b"")
        if wheel:
            _add_file(tar, f"{WHEELS_DIR}/{wheel.name}", wheel)
        else:
            _add_bytes(tar, f"{WHEELS_DIR}/.keep", b"")
    return f"local wheel {wheel}" if wheel else f"index {manifest.pins.torch_index or 'PyPI'}"


BuildEvents = Callable[[str], None]


def build_image(manifest: Manifest, options: BuildOptions, on_line: BuildEvents | None = None) -> BuildResult:
    """Build `kit/sglang:<name>` (or options.tag); every output line goes to on_line and to a log file."""
    from kit.runtime.engine import LABEL_MANAGED, client, translated

    log_dir = paths.cache_dir() / "builds"
    log_dir.mkdir(parents=True, exist_ok=True)
    tag = options.tag or manifest.tag
    log_path = log_dir / f"{tag.rsplit(':', 1)[-1]}.log"
    started = time.monotonic()
    image_id = ""
    lock_text = options.lock_text
    if lock_text is None and lock_path(manifest.name).is_file():
        lock_text = lock_path(manifest.name).read_text(encoding="utf-8")
    base = check_base(manifest, lock_text)
    with tempfile.TemporaryFile() as context, log_path.open("w", encoding="utf-8") as log:
        torch_source = write_context(context, manifest, options)
        wheel = local_torch_wheel(manifest, options)
        args = build_args(
            manifest,
            torch_wheel=wheel.name if wheel else "",
            lock_text=lock_text,
            base=base_line(base.local) if base.local else "",
            apt=options.apt,
        )
        context.seek(0)
        log.write(f"# kit image build {manifest.name}: torch from {torch_source}\n# {base.check.line}\n")
        if on_line:
            on_line(f"kit: {base.check.line}")
        with translated(f"building {tag}"):
            stream = client().api.build(
                fileobj=context,
                custom_context=True,
                tag=tag,
                buildargs=args,
                rm=True,
                forcerm=True,
                decode=True,
                nocache=options.no_cache,
                labels={LABEL_MANAGED: "image"},
            )
            last: list[str] = []
            for chunk in stream:
                if "error" in chunk:
                    detail = chunk.get("error", "").strip()
                    log.write(detail + "\n")
                    tail = " | ".join(last[-3:])
                    raise KitError(
                        f"building {tag} failed: {detail}",
                        hint=f"last output: {tail}; full log: {log_path}",
                    )
                if "aux" in chunk and "ID" in chunk["aux"]:
                    image_id = chunk["aux"]["ID"]
                text = chunk.get("stream", "")
                for line in text.splitlines():
                    if line.strip():
                        log.write(line + "\n")
                        last = [*last[-9:], line.strip()]
                        if on_line:
                            on_line(line)
    if not image_id:
        image_id = client().images.get(tag).id
    seconds = time.monotonic() - started
    return BuildResult(manifest.name, tag, image_id, seconds, torch_source, log_path, args, base.check.line)


@dataclass(frozen=True)
class _Base:
    check: BaseCheck
    local: LocalBase | None


def check_base(manifest: Manifest, lock_text: str | None) -> _Base:
    """The local base against the manifest's digest and the lock's base line; refused (exit 3, with
    how to get the named base) before anything is sent to the engine. A missing base with a registry
    digest is pulled by that digest first."""
    from kit.errors import EnvironmentProblem
    from kit.images.system_lock import system_of

    local = local_base(manifest.base.image)
    if local is None and pull_named(manifest):
        local = local_base(manifest.base.image)
    check = judge_base(manifest, system_of(lock_text).base if lock_text else None, local)
    if not check.ok:
        raise EnvironmentProblem(check.line, hint=check.fix)
    return _Base(check, local)


_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


@dataclass
class BuildSteps:
    """What a build is doing and for how long, from its output lines (times passed in; pure).

    The engine prints `Step N/M : INSTRUCTION` and then a RUN step's own output, which can stop for
    minutes (pip resolving, apt unpacking): `status` and `heartbeat` say which step, for how long,
    and what it printed last, so a terminal and a plain CI log both show the build is alive.
    """

    started: float
    step: str = "preparing the build context"
    step_started: float = 0.0
    last_line: str = ""
    last_line_at: float = 0.0
    last_heartbeat: float = 0.0
    durations: list[tuple[str, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.step_started = self.last_line_at = self.last_heartbeat = self.started

    def line(self, text: str, now: float) -> list[str]:
        """Feed one output line; returns the plain-log lines it calls for (a new step, a slow one done)."""
        text = text.strip()
        if not text:
            return []
        self.last_line, self.last_line_at = text, now
        match = _STEP.match(text)
        if not match:
            return []
        out = []
        if self.step.startswith("Step "):  # the step that just ended
            took = now - self.step_started
            self.durations.append((self.step, took))
            if took >= 10:
                out.append(f"  ({self.step.split(' : ')[0]} took {_duration(took)})")
        self.step, self.step_started, self.last_heartbeat = text[:120], now, now
        out.append(self.step)
        return out

    def status(self, now: float) -> str:
        """One line for a terminal's spinner: step, time in it, total, the last output."""
        in_step, in_all = _duration(now - self.step_started), _duration(now - self.started)
        head = f"{self.step[:70]}  [{in_step} in step, {in_all} in all]"
        tail = self.last_line if self.last_line != self.step else ""
        return head + (f"\n  {tail[:100]}" if tail else "")

    def heartbeat(self, now: float, every_s: float = 30.0) -> str | None:
        """A plain-log line when a step has run `every_s` without a new step line, else None."""
        if now - self.last_heartbeat < every_s:
            return None
        self.last_heartbeat = now
        quiet = now - self.last_line_at
        last = f"; last output {_duration(quiet)} ago: {self.last_line[:80]}" if self.last_line else ""
        return f"  still in {self.step.split(' : ')[0]} after {_duration(now - self.step_started)}{last}"
