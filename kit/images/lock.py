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
    """The lock recorded in a built image (no process runs in it)."""
    from kit.images.inspect import read_file

    return parse_lock(read_file(ref, LOCK_PATH).decode("utf-8", errors="replace"))
