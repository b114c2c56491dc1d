"""`kit image build --from-bundle B`: build the image a colleague ran, from the lock their bundle carries.

The bundle is untrusted input. It is read by the kit's hardened reader (kit.diagnose.bundle.read_bundle:
bounded sizes, no links, no paths outside the bundle), and its lock is judged here before anything
is built (pure: `judge`):

  never built     the bundle names no image manifest of this kit; the lock has a line pip would act
                  on that is not 'name==version' with its hashes (an option such as --index-url or
                  --find-links, a URL, an editable); a package without a hash (a lock from before
                  the kit locked images cannot rebuild anything exactly)
  refused         a package (name==version) that none of the kit's own locks (images/*.lock,
                  kit/check/locks/*.lock) holds, or a hash none of them carries for it: named, exit 2
                  before any build, unless --trust-bundle

What is built: the Dockerfile's own install (pip --require-hashes --no-deps --only-binary :all:,
from the configured index, PyPI, plus the manifest's torch index), with the bundle's lock in place
of images/NAME.lock, under its own tag (kit/sglang:NAME-bundle-DIGEST): the local image is not
replaced.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kit.diagnose.trust import Refusal, shown
from kit.images.image_lock import Entry, header, lock_digest, parse_entries
from kit.images.system_lock import malformed_apt_lines, system_of

_ENTRY_OR_HASH = re.compile(
    r"^([A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!_-]+( \\)?|\s+--hash=sha256:[0-9a-f]{64}( \\)?)$"
)
KEY = re.compile(r"torch|nvidia-nccl.*|cuda-toolkit|sglang|sglang-kernel|flashinfer-python|transformers")


@dataclass(frozen=True)
class Judged:
    manifest: str | None
    digest: str
    entries: dict[str, Entry]
    header: dict[str, str]
    fatal: list[Refusal] = field(default_factory=list)
    """Never built, --trust-bundle or not."""
    refused: list[Refusal] = field(default_factory=list)
    """Built only with --trust-bundle."""

    def lines(self) -> list[str]:
        """What the lock is, shown before anything is built (bundle text made printable, bounded)."""
        said = self.header
        out = [
            f"image manifest: {shown(self.manifest or '(none)', 80)}",
            f"lock {self.digest}: {len(self.entries)} packages, python {shown(said.get('python', '?'), 20)}, "
            f"platform {shown(said.get('platform', '?'), 40)}",
        ]
        key = [e for k, e in sorted(self.entries.items()) if KEY.fullmatch(k)]
        out += [f"  {shown(e.name, 60)}=={shown(e.version, 40)} ({len(e.hashes)} hash(es))" for e in key]
        return out


def kit_locks(directories: Iterable[Path]) -> dict[str, dict[str, set[str]]]:
    """Every package the kit's own locks hold: {name: {version: hashes}}; their system packages
    (kit.images.system_lock) as {'apt:NAME': {version: set()}}."""
    known: dict[str, dict[str, set[str]]] = {}
    for directory in directories:
        for path in sorted(directory.glob("*.lock")):
            text = path.read_text(encoding="utf-8")
            for key, entry in parse_entries(text).items():
                known.setdefault(key, {}).setdefault(entry.version, set()).update(entry.hashes)
            for name, package in system_of(text).packages.items():
                known.setdefault(f"apt:{name}", {}).setdefault(package.version, set())
    return known


def judge(text: str, manifest: str | None, known_manifests: Iterable[str],
          known: Mapping[str, Mapping[str, set[str]]]) -> Judged:  # fmt: skip
    entries = parse_entries(text)
    fatal: list[Refusal] = []
    if manifest not in set(known_manifests):
        fatal.append(
            Refusal("image", f"{shown(manifest or '(none)', 80)} is not an image manifest of this kit")
        )
    for number, line in enumerate(text.splitlines(), 1):
        bare = line.split(" #", 1)[0].rstrip() if not line.lstrip().startswith("#") else ""
        if bare and not _ENTRY_OR_HASH.match(bare):
            fatal.append(
                Refusal(f"lock line {number}", f"not a pinned package or its hash: {shown(line, 100)}")
            )
    fatal += [
        Refusal("lock", f"not a Debian package, version and architecture: {shown(line, 100)}")
        for line in malformed_apt_lines(text)
    ]
    if not entries:
        fatal.append(Refusal("lock", "the bundle carries no lock with packages"))
    unhashed = [e.name for e in entries.values() if not e.hashes]
    if unhashed:
        fatal.append(
            Refusal("lock", f"{len(unhashed)} package(s) without a hash, e.g. {shown(unhashed[0], 60)}: the "
                            "image was built before the kit locked images; nothing can be rebuilt exactly")
        )  # fmt: skip
    refused = []
    for key, entry in sorted(entries.items()):
        versions = known.get(key, {})
        what = f"{shown(entry.name, 60)}=={shown(entry.version, 40)}"
        if entry.version not in versions:
            refused.append(Refusal(what, "in none of the kit's own locks"))
        elif not set(entry.hashes) <= versions[entry.version]:
            refused.append(Refusal(what, "a hash none of the kit's own locks carries for it (another file)"))
    for name, package in system_of(text).packages.items():
        if package.version not in known.get(f"apt:{name}", {}):
            what = f"system package {shown(name, 60)} {shown(package.version, 40)}"
            refused.append(Refusal(what, "in none of the kit's own locks"))
    return Judged(manifest, lock_digest(text), entries, header(text), fatal, refused)


def bundle_lock(path: str | Path) -> tuple[str, str | None]:
    """(lock text, manifest name) from a bundle, through the hardened reader."""
    from kit.diagnose.bundle import read_bundle
    from kit.errors import InputError

    bundle = read_bundle(path)
    if "lock.txt" not in bundle.members:
        raise InputError(
            "--from-bundle", f"{shown(path, 80)} carries no lock", "make the bundle with kit bundle"
        )
    image = bundle.fingerprint.get("image")
    name = image.get("name") if isinstance(image, dict) else None
    return bundle.text("lock.txt"), name if isinstance(name, str) else None
