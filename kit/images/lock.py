"""The lock: every Python package version in a built image, and what changed between two images.

An image installs its committed lock (images/NAME.lock, hashed) and keeps it at LOCK_PATH; what pip
then installed (`pip freeze --all`) is at INSTALLED_PATH, which `kit image verify` holds to the lock.
Images built before locks kept only the freeze, at LOCK_PATH. parse_lock reads both forms. Parsing
and diffing are pure; reading the file out of an image is kit.images.inspect.read_file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

LOCK_PATH = "/opt/kit/lock.txt"
INSTALLED_PATH = "/opt/kit/installed.txt"

_FROZEN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*==\s*(?P<version>\S+)")
_DIRECT = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*@\s*(?P<url>\S+)")
_EDITABLE_EGG = re.compile(r"#egg=(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)")


def normalize(name: str) -> str:
    """PEP 503: 'Flashinfer_Python' and 'flashinfer-python' are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Package:
    name: str
    """As pip printed it."""
    version: str
    """The version, or '@ URL' for a direct-URL install, or '-e ...' for an editable one."""


def parse_lock(text: str) -> dict[str, Package]:
    """`pip freeze --all` output -> {normalized name: Package}. Lines pip would not write are ignored."""
    packages: dict[str, Package] = {}
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if match := _FROZEN.match(line):
            name, version = match["name"], match["version"]
        elif match := _DIRECT.match(line):
            name, version = match["name"], f"@ {match['url']}"
        elif line.startswith("-e ") and (match := _EDITABLE_EGG.search(line)):
            name, version = match["name"], line
        else:
            continue
        packages[normalize(name)] = Package(name, version)
    return packages


@dataclass(frozen=True)
class Change:
    name: str
    before: str
    after: str


@dataclass(frozen=True)
class LockDiff:
    a: str
    b: str
    added: list[Package] = field(default_factory=list)
    """In B only."""
    removed: list[Package] = field(default_factory=list)
    """In A only."""
    changed: list[Change] = field(default_factory=list)
    unchanged: int = 0

    @property
    def same(self) -> bool:
        return not (self.added or self.removed or self.changed)


def diff_locks(
    a: dict[str, Package], b: dict[str, Package], *, a_name: str = "A", b_name: str = "B"
) -> LockDiff:
    """What changed from lock A to lock B, sorted by package name."""
    added = [b[k] for k in sorted(b.keys() - a.keys())]
    removed = [a[k] for k in sorted(a.keys() - b.keys())]
    both = sorted(a.keys() & b.keys())
    changed = [Change(b[k].name, a[k].version, b[k].version) for k in both if a[k].version != b[k].version]
    return LockDiff(a_name, b_name, added, removed, changed, len(both) - len(changed))


def read_image_lock(ref: str) -> dict[str, Package]:
    """The lock recorded in a built image (no process runs in it). An image without one is bad input
    to a lock comparison (exit 2), not a failure of it."""
    from kit.errors import InputError
    from kit.images.inspect import NotInImage, read_file

    try:
        text = read_file(ref, LOCK_PATH)
    except NotInImage as exc:
        raise InputError(
            "image",
            f"{ref} records no Python packages ({LOCK_PATH}): it is not a kit image",
            "compare two kit images (kit image list), or any two images file by file with --files",
        ) from exc
    return parse_lock(text.decode("utf-8", errors="replace"))


# What decides a start-up first, so a long difference list shows it at the top: torch, NCCL, the
# CUDA wheels, SGLang and its kernels, flashinfer, transformers; then everything else by name.
_FIRST = tuple(
    re.compile(p)
    for p in (
        r"torch",
        r"nvidia-nccl(-cu\d+)?",
        r"cuda-toolkit|cuda-python|cuda-bindings|nvidia-(cuda|cudnn|cublas|nvjitlink|nvvm|cusparse|cufft|"
        r"curand|cusolver|nvshmem|nvtx)[a-z0-9-]*",
        r"sglang(-kernel)?|sgl-kernel",
        r"flashinfer[a-z0-9-]*",
        r"transformers",
    )
)


def _rank(name: str) -> int:
    key = normalize(name)
    return next((i for i, p in enumerate(_FIRST) if p.fullmatch(key)), len(_FIRST))


def ranked_lines(diff: LockDiff) -> list[str]:
    """One line per difference, those that matter first (torch, NCCL, CUDA wheels, SGLang, flashinfer,
    transformers), each 'name: A-version -> B-version' in the diff's own words for A and B."""
    rows = [(c.name, f"{c.name}: {c.before} ({diff.a}) -> {c.after} ({diff.b})") for c in diff.changed]
    rows += [(p.name, f"{p.name}: {p.version} only in {diff.b}") for p in diff.added]
    rows += [(p.name, f"{p.name}: {p.version} only in {diff.a}") for p in diff.removed]
    return [line for name, line in sorted(rows, key=lambda r: (_rank(r[0]), normalize(r[0])))]
