"""Locks for the check venvs, as images have them: kit/check/locks/base.lock (CPU torch and the shared
light packages) and sglang-VERSION.lock per release of the matrix (its sglang wheel, locked alone
with --no-deps as it is installed, and the closure of what deps.toml pins for it). A venv installs
its lock and nothing else (`pip install --require-hashes --no-deps`), so a package released upstream
tomorrow (transformers 5.25.0 broke the 0.5.10.post1 venvs that way) cannot reach it.

    python -m kit.check.locks            relock every check venv (uv, PyPI, the host's torch wheel)
    python -m kit.check.locks --check    does each lock still satisfy deps.toml? (pure, no network)

The locks are for this project's hosts: Linux x86_64, the Python and glibc recorded in each header.
A host with another Python resolves as before and says so (`lock_for` returns None).
"""

from __future__ import annotations

import platform
import re
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

from kit.images.image_lock import (
    LockAsk,
    Problem,
    header,
    lock_digest,
    merge_blocks,
    parse_entries,
    uv_args,
)
from kit.images.lock import normalize

LOCK_DIR = Path(__file__).resolve().with_name("locks")
DEPS = Path(__file__).resolve().with_name("deps.toml")
WHEEL_PINNED = ("transformers", "xgrammar")
_INDEX = "https://pypi.org/simple"


def lock_file(release: str | None) -> Path:
    return LOCK_DIR / ("base.lock" if release is None else f"sglang-{release}.lock")


def host_python() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def _deps() -> dict:
    return tomllib.loads(DEPS.read_text(encoding="utf-8"))


def torch_requirement(deps: dict) -> str:
    """deps.toml's torch, the CPU build (the wheel the host keeps; PyPI's 2.13.0 is the CUDA one)."""
    return f"torch=={deps['torch']}+cpu"


def pins_for(release: str | None, wheel_pins: dict[str, str], deps: dict | None = None) -> tuple[str, ...]:
    """What the venv's lock must hold: deps.toml's list, WHEEL_PINNED names taking the wheel's pin."""
    deps = deps or _deps()
    if release is None:
        return (torch_requirement(deps), *deps["base"]["requirements"])
    entry = deps.get("versions", {}).get(release) or deps["default"]
    out = []
    for req in entry["requirements"]:
        name = normalize(req)
        out.append(f"{req}=={wheel_pins[name]}" if "==" not in req and name in wheel_pins else req)
    return (torch_requirement(deps), *out)


def wheel_pins_from(requires_dist: Sequence[str]) -> dict[str, str]:
    """sglang's Requires-Dist -> {name: version} for WHEEL_PINNED names pinned with ==."""
    pins = {}
    for line in requires_dist:
        found = re.match(r"\s*([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*\(?==\s*([^;\s),]+)\)?\s*$", line)
        if found and normalize(found[1]) in WHEEL_PINNED:
            pins[normalize(found[1])] = found[2]
    return pins


def check_text(release: str | None, text: str) -> list[Problem]:
    """The lock against deps.toml (pure): every pin held, sglang there, every package hashed."""
    said = header(text)
    entries = parse_entries(text)
    problems = []
    wheel_pins = dict(p.split("=", 1) for p in said.get("wheel-pins", "").split() if "=" in p)
    wanted = pins_for(release, wheel_pins)
    if release is not None:
        wanted = (*wanted, f"sglang=={release}")
    for requirement in wanted:
        name, _, version = requirement.partition("==")
        entry = entries.get(normalize(name))
        if entry is None:
            problems.append(Problem(name, f"deps.toml asks for {requirement}; the lock has none"))
        elif version and entry.version != version:
            problems.append(Problem(name, f"deps.toml pins {version}; the lock has {entry.version}"))
    problems += [Problem(e.name, "no hash") for e in entries.values() if not e.hashes]
    if said.get("requirements") != lock_digest("\n".join(wanted)):
        problems.append(Problem("requirements", "deps.toml's list for it changed since the lock was made"))
    return problems


def lock_for(release: str | None) -> tuple[Path, str] | None:
    """(lock file, its digest) when this host can install it (same Python), else None."""
    path = lock_file(release)
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8")
    if header(text).get("python") != host_python():
        return None
    return path, lock_digest(text)


# -- making them (network: uv and PyPI) ------------------------------------------------------------


def _sglang_wheel_pins(release: str, timeout_s: float = 600.0) -> dict[str, str]:
    """The release's own pins, from its wheel's METADATA (pip download --no-deps: PyPI serves no
    separate metadata file for sglang; pip's cache keeps the wheel for the venv's own install)."""
    import subprocess
    import tempfile
    import zipfile

    with tempfile.TemporaryDirectory(prefix="kit-sglang-wheel-") as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
             "--python-version", host_python(), "--platform", "manylinux_2_34_x86_64",
             f"sglang=={release}", "-d", tmp],
            check=True, timeout=timeout_s, capture_output=True,
        )  # fmt: skip
        wheel = next(Path(tmp).glob("sglang-*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
            metadata = archive.read(name).decode("utf-8", errors="replace")
    return wheel_pins_from(
        [line.split(":", 1)[1] for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    )


def make(release: str | None, *, wheel_dirs: Sequence[Path], timeout_s: float = 900.0) -> str:
    import subprocess
    import tempfile

    from kit.images.image_lock import _run_uv, uv_binary

    deps = _deps()
    wheel_pins = _sglang_wheel_pins(release) if release else {}
    together = pins_for(release, wheel_pins, deps)
    no_deps = (f"sglang=={release}",) if release else ()
    glibc = platform.libc_ver()[1] or "2.36"
    ask = LockAsk(
        image=f"check-{release or 'base'}",
        together=together,
        no_deps=no_deps,
        overrides=(),
        constraints=(),
        python=host_python(),
        platform="x86_64-manylinux_" + glibc.replace(".", "_"),
        index=_INDEX,
        extra_indexes=(),
    )
    uv = uv_binary()
    version = subprocess.run([uv, "--version"], capture_output=True, text=True, check=False).stdout
    with tempfile.TemporaryDirectory(prefix="kit-check-lock-") as tmp:
        folder = Path(tmp)
        (folder / "deps-toml").write_text("\n".join(together) + "\n", encoding="utf-8")
        outputs = [_run_uv(uv, uv_args(ask, "deps-toml", extra_indexes=(), find_links=wheel_dirs), folder,
                           timeout_s, None)]  # fmt: skip
        if no_deps:
            (folder / "wheel").write_text("\n".join(no_deps) + "\n", encoding="utf-8")
            alone = uv_args(ask, "wheel", extra_indexes=(), find_links=wheel_dirs, no_deps=True)
            outputs.append(_run_uv(uv, alone, folder, timeout_s, None))
    wanted = (*together, *no_deps)
    lines = [
        f"# kit/check/locks/{lock_file(release).name}: the check venv for "
        + (f"sglang {release}" if release else "every release (the shared base)")
        + ", every file hashed.",
        f"# Written by `python -m kit.check.locks` from kit/check/deps.toml with {version.split(' (')[0]}.",
        f"# kit-lock python: {ask.python}",
        f"# kit-lock platform: {ask.platform}",
        f"# kit-lock index: {_INDEX}",
        f"# kit-lock wheel-pins: {' '.join(f'{k}={v}' for k, v in sorted(wheel_pins.items())) or '-'}",
        f"# kit-lock requirements: {lock_digest(chr(10).join(wanted))}",
    ]
    return "\n".join(lines) + "\n" + merge_blocks(*outputs)


def releases() -> tuple[str, ...]:
    from kit.check.matrix import load_matrix

    return load_matrix().releases


def main(argv: Sequence[str] | None = None) -> int:
    from kit.files import write_atomic
    from kit.images.pipconfig import pip_defaults

    args = list(sys.argv[1:] if argv is None else argv)
    targets: list[str | None] = [None, *releases()]
    if "--check" in args:
        bad = 0
        for release in targets:
            path = lock_file(release)
            found = check_text(release, path.read_text(encoding="utf-8")) if path.is_file() else None
            problems = found if found is not None else [Problem("(lock)", f"no lock at {path}")]
            bad += bool(problems)
            for p in problems:
                print(f"{path.name}: {p.package}: {p.detail}")
        print(f"{len(targets) - bad} of {len(targets)} check-venv locks satisfy deps.toml")
        return 1 if bad else 0
    LOCK_DIR.mkdir(exist_ok=True)
    wheel_dirs = pip_defaults().find_links
    for release in targets:
        text = make(release, wheel_dirs=wheel_dirs)
        path = lock_file(release)
        write_atomic(path, text.encode("utf-8"), field=f"kit/check/locks/{path.name}")
        print(f"{path.name}: {len(parse_entries(text))} packages")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
