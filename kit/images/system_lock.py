"""The system part of an image's lock: its base and every Debian/Ubuntu package, at exact versions.

    kit image lock NAME --system [--image REF]   read the built image, write these lines into the lock

images/NAME.lock carries, beside the Python closure (kit.images.image_lock), comment lines pip
ignores and the Dockerfile's apt step reads (kit/images/inimage/apt-lock.sh):

    # kit-lock base: debian:bookworm-slim local sha256:... (not fixed)    (kit.images.base.base_line)
    # kit-lock source-date-epoch: 1796472000       the lock's date: SOURCE_DATE_EPOCH of every build
    # kit-lock apt-snapshot: https://snapshot.debian.org/archive/debian/20261205T120000Z/
    # kit-apt: bash 5.2.15-2+b7 amd64              one per package in the image's dpkg database

They are read from a built image (its /var/lib/dpkg/status, without starting it) and its base, so
they name what a build really installed; the snapshot is the distribution's archive as it was at
that build, where a rebuild finds a version the mirror has since dropped.

Pure: parse_dpkg_status, system_lines, with_system, system_of, snapshot_url, compare_packages.
Adapter: lock_system.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from kit.images.manifest import Manifest

DPKG_STATUS = "/var/lib/dpkg/status"
# Debian policy 5.6.1 (names) and 5.6.12 (versions), so a line can never carry an option or a space
# into apt-get's argv (a bundle's lock is untrusted input: kit.diagnose.from_bundle judges it too).
_APT = re.compile(
    r"^# kit-apt: (?P<name>[a-z0-9][a-z0-9+.-]+) (?P<version>[0-9][A-Za-z0-9.+~:-]*)"
    r"(?: (?P<arch>[a-z0-9-]+))?$"
)
APT_PREFIX = "# kit-apt:"
_KEYS = ("base", "source-date-epoch", "apt-snapshot")
_SYSTEM_KEY = re.compile(r"^# kit-lock (?:" + "|".join(_KEYS) + r"): ")


@dataclass(frozen=True)
class SystemPackage:
    name: str
    version: str
    arch: str = ""


def parse_dpkg_status(text: str) -> dict[str, SystemPackage]:
    """/var/lib/dpkg/status -> the installed packages ('install ok installed'), by name."""
    packages: dict[str, SystemPackage] = {}
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line[:1] not in (" ", "\t") and ":" in line:
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
        if fields.get("Status") == "install ok installed" and fields.get("Package") and fields.get("Version"):
            name = fields["Package"]
            packages[name] = SystemPackage(name, fields["Version"], fields.get("Architecture", ""))
    return dict(sorted(packages.items()))


def snapshot_url(distribution: str, epoch: int) -> str:
    """The snapshot archive of that moment (resolve.toml [apt_snapshot]): snapshot.debian.org or
    snapshot.ubuntu.com."""
    from kit.images.resolve import _data

    stamp = dt.datetime.fromtimestamp(epoch, tz=dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return _data()["apt_snapshot"][distribution].format(stamp=stamp)


@dataclass(frozen=True)
class SystemLock:
    """The system part of a lock's text; empty where the lock holds none yet."""

    base: str | None = None
    source_date_epoch: int | None = None
    apt_snapshot: str | None = None
    packages: dict[str, SystemPackage] = field(default_factory=dict)


def system_of(text: str) -> SystemLock:
    said: dict[str, str] = {}
    packages: dict[str, SystemPackage] = {}
    for line in text.splitlines():
        if match := _APT.match(line):
            packages[match["name"]] = SystemPackage(match["name"], match["version"], match["arch"] or "")
        elif _SYSTEM_KEY.match(line):
            key, _, value = line.removeprefix("# kit-lock ").partition(": ")
            said[key] = value.strip()
    epoch = said.get("source-date-epoch", "")
    return SystemLock(
        base=said.get("base"),
        source_date_epoch=int(epoch) if epoch.isdigit() else None,
        apt_snapshot=said.get("apt-snapshot"),
        packages=packages,
    )


def malformed_apt_lines(text: str) -> list[str]:
    """'# kit-apt:' lines that are not a Debian package name, version and architecture."""
    return [ln for ln in text.splitlines() if ln.startswith(APT_PREFIX) and not _APT.match(ln)]


def system_lines(lock: SystemLock) -> list[str]:
    lines = []
    if lock.base:
        lines.append(f"# kit-lock base: {lock.base}")
    if lock.source_date_epoch is not None:
        lines.append(f"# kit-lock source-date-epoch: {lock.source_date_epoch}")
    if lock.apt_snapshot:
        lines.append(f"# kit-lock apt-snapshot: {lock.apt_snapshot}")
    lines += [f"# kit-apt: {p.name} {p.version} {p.arch}".rstrip() for p in lock.packages.values()]
    return lines


def with_system(text: str, lock: SystemLock) -> str:
    """The lock's text with its system lines replaced by LOCK's, placed after the header comments."""
    kept = [ln for ln in text.splitlines() if not (_APT.match(ln) or _SYSTEM_KEY.match(ln))]
    at = next((i for i, ln in enumerate(kept) if ln and not ln.startswith("#")), len(kept))
    return "\n".join([*kept[:at], *system_lines(lock), *kept[at:]]) + "\n"


def apt_names(manifest: Manifest) -> tuple[str, ...]:
    """The packages the manifest names (the Dockerfile's apt step asks for them by name)."""
    python = manifest.base.python
    return ("ca-certificates", python, f"{python}-venv", f"{python}-dev", *manifest.base.apt_packages)


@dataclass(frozen=True)
class PackagesCompared:
    same: int
    changed: list[str]
    """'name: lock-version -> image-version'."""
    only_lock: list[str]
    only_image: list[str]

    @property
    def differences(self) -> list[str]:
        return [
            *self.changed,
            *(f"{p} only in the lock" for p in self.only_lock),
            *(f"{p} only in the image" for p in self.only_image),
        ]


def compare_packages(
    locked: Mapping[str, SystemPackage], installed: Mapping[str, SystemPackage]
) -> PackagesCompared:
    both = sorted(locked.keys() & installed.keys())
    changed = [
        f"{n}: {locked[n].version} -> {installed[n].version}"
        for n in both
        if locked[n].version != installed[n].version
    ]
    return PackagesCompared(
        same=len(both) - len(changed),
        changed=changed,
        only_lock=[f"{n} {locked[n].version}" for n in sorted(locked.keys() - installed.keys())],
        only_image=[f"{n} {installed[n].version}" for n in sorted(installed.keys() - locked.keys())],
    )


# -- the adapter -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SystemLocked:
    path: str
    packages: int
    base: str
    snapshot: str
    changes: tuple[str, ...]


def _created_epoch(created: str) -> int:
    """The engine's 'Created' (RFC 3339 with nanoseconds) as whole seconds."""
    stamp = re.sub(r"\.\d+", "", created).replace("Z", "+00:00")
    return int(dt.datetime.fromisoformat(stamp).timestamp())


def lock_system(manifest: Manifest, ref: str | None = None) -> SystemLocked:
    """Read the built image REF (default kit/sglang:NAME) and its base; write the system lines into
    images/NAME.lock atomically (the Python closure is left as it is)."""
    from kit.errors import EnvironmentProblem, InputError
    from kit.files import write_atomic
    from kit.images.base import base_line, local_base
    from kit.images.inspect import read_file, require_image
    from kit.images.manifest import lock_path
    from kit.images.resolve import distribution

    path = lock_path(manifest.name)
    if not path.is_file():
        raise InputError("image", f"{manifest.name} has no lock ({path})", "run 'kit image lock NAME' first")
    tag = ref or manifest.tag
    info = require_image(tag, manifest.name)
    base, built = local_base(manifest.base.image), local_base(tag)
    # Built on this base: its layers are the image's first ones (a proof the label cannot give).
    if base is None or built is None or built.layers[: len(base.layers)] != base.layers:
        said = info.labels.get("io.kit.base") or "a base it does not record"
        raise EnvironmentProblem(
            f"{tag} was not built on the {manifest.base.image} here ({said}): its lock lines would "
            "name another base",
            hint=f"rebuild it on this base (kit image build {manifest.name}), then lock again",
        )
    installed = parse_dpkg_status(read_file(tag, DPKG_STATUS).decode("utf-8", "replace"))
    epoch = _created_epoch(info.created)
    old_text = path.read_text(encoding="utf-8")
    old = system_of(old_text)
    new = SystemLock(
        base=base_line(base),
        source_date_epoch=epoch,
        apt_snapshot=snapshot_url(distribution(manifest.base.image), epoch),
        packages=installed,
    )
    compared = compare_packages(old.packages, installed)
    write_atomic(path, with_system(old_text, new).encode("utf-8"), field=f"images/{manifest.name}.lock")
    changes = tuple(compared.differences) if old.packages else ()
    return SystemLocked(str(path), len(installed), new.base or "", new.apt_snapshot or "", changes)
