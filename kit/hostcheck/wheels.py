"""The wheels step: the carried wheels (.devwheels, from `scripts/gpu-host-check --fetch-wheels`) that
the host lacks, or has older, go into DEPS, which the runner puts on PYTHONPATH for every later step.

It imports nothing of the kit beyond this folder: it runs before the kit's dependencies are there.
wheel_name_version, version_key and wheels_to_install are pure (tests/hostcheck/test_wheels.py)."""

from __future__ import annotations

import re
import shutil
import sys
import zipfile
from pathlib import Path

from kit.hostcheck.record import Status, sh

_WHEEL = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$")


def wheel_name_version(filename: str) -> tuple[str, str] | None:
    """'pydantic_core-2.50.5-cp312-cp312-manylinux2014_x86_64.whl' -> ('pydantic-core', '2.50.5')."""
    match = _WHEEL.match(filename)
    if not match:
        return None
    return re.sub(r"[-_.]+", "-", match["name"]).lower(), match["version"]


def version_key(text: str) -> tuple:
    """A sortable key: numeric release parts first ('4.12.2' < '4.16.0'); other text compares last."""
    parts = []
    for piece in re.split(r"[.+-]", text):
        parts.append((0, int(piece), "") if piece.isdigit() else (1, 0, piece))
    return tuple(parts)


def wheels_to_install(wheels: list[str], installed: dict[str, str | None]) -> tuple[list[str], list[str]]:
    """(to install, already here): a wheel goes in when its distribution is absent or older here.

    A newer one already installed stays (torch's typing_extensions, say), so nothing the host's own
    packages rely on is shadowed by an older copy from .devwheels.
    """
    take, skip = [], []
    for wheel in sorted(wheels):
        parsed = wheel_name_version(wheel)
        if parsed is None:
            take.append(wheel)
            continue
        name, version = parsed
        have = installed.get(name)
        if have is None or version_key(have) < version_key(version):
            take.append(wheel)
        else:
            skip.append(f"{wheel} ({name} {have} is here)")
    return take, skip


def installed_versions(names: list[str], leave_out: Path) -> dict[str, str | None]:
    """The host's own versions: sys.path without `leave_out` (the folder about to be refilled)."""
    from importlib import metadata

    gone = leave_out.resolve()
    paths = [
        p
        for p in sys.path
        if not (Path(p or ".").resolve() == gone or gone in Path(p or ".").resolve().parents)
    ]
    found: dict[str, str | None] = {}
    for name in names:
        dist = next(iter(metadata.distributions(name=name, path=paths)), None)
        found[name] = dist.version if dist is not None else None
    return found


def unpack_wheel(wheel: Path, dest: Path) -> None:
    """What `pip install --target` does for these wheels, for a host without pip: unzip, then move
    NAME.data/scripts/* to dest/bin (py-spy's binary) and NAME.data/{purelib,platlib} to dest."""
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(dest)
    for data in dest.glob("*.data"):
        for kind in ("purelib", "platlib"):
            for item in (data / kind).glob("*") if (data / kind).is_dir() else ():
                shutil.move(str(item), dest / item.name)
        scripts = data / "scripts"
        if scripts.is_dir():
            (dest / "bin").mkdir(exist_ok=True)
            for item in scripts.iterdir():
                target = dest / "bin" / item.name
                shutil.move(str(item), target)
                target.chmod(0o755)
        shutil.rmtree(data, ignore_errors=True)


def step_wheels(args, status: Status) -> None:
    src, dest = Path(args.wheels), Path(args.deps)
    wheels = sorted(p.name for p in src.glob("*.whl")) if src.is_dir() else []
    if not wheels:
        status.error(f"no wheels in {src} (run scripts/gpu-host-check --fetch-wheels here, carry .devwheels)")
        return
    names = [parsed[0] for w in wheels if (parsed := wheel_name_version(w))]
    take, skip = wheels_to_install(wheels, installed_versions(names, dest))
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    (Path(args.work) / "wheels.txt").write_text(
        "installed into "
        + str(dest)
        + ":\n  "
        + "\n  ".join(take)
        + "\nalready here:\n  "
        + "\n  ".join(skip)
        + "\n"
    )
    if not take:
        status.ok(f"nothing to install: {len(skip)} wheels already satisfied")
        return
    code, out, err = sh(
        [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--target", str(dest)]
        + [str(src / w) for w in take],
        timeout=120,
    )
    print(out[-3000:], err[-3000:], sep="\n")
    if code != 0:
        status.finding(f"pip install --target failed (exit {code}); unpacking the wheels by hand instead")
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        for w in take:
            unpack_wheel(src / w, dest)
    spy = dest / "bin" / "py-spy"
    status.ok(
        f"{len(take)} wheels into {dest} ({', '.join(wheel_name_version(w)[0] for w in take)}); "
        f"{len(skip)} already here; py-spy binary {'present' if spy.exists() else 'ABSENT'}"
    )
