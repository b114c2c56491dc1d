"""What the host's pip is configured with, used as build defaults: a build should work wherever pip
works here (a CA bundle for a TLS-intercepting proxy, local wheel folders)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PipDefaults:
    cert: Path | None
    find_links: tuple[Path, ...]
    source: str


def parse_pip_config(text: str) -> dict[str, str]:
    """`pip config list` lines (`global.cert='/x'`, `:env:.find-links='/y'`) -> {'cert': '/x', ...}.

    Environment values win over files, as they do for pip itself."""
    values: dict[str, tuple[int, str]] = {}
    for line in text.splitlines():
        key, sep, raw = line.partition("=")
        if not sep:
            continue
        scope, _, name = key.strip().rpartition(".")
        try:
            value = " ".join(shlex.split(raw))
        except ValueError:
            continue
        rank = 2 if scope == ":env:" else 1
        if name and rank >= values.get(name, (0, ""))[0]:
            values[name] = (rank, value)
    return {name: value for name, (_, value) in values.items()}


def pip_defaults() -> PipDefaults:
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    config = parse_pip_config(out)
    cert = Path(config["cert"]) if config.get("cert") and Path(config["cert"]).is_file() else None
    links = tuple(
        Path(p.removeprefix("file://"))
        for p in config.get("find-links", "").split()
        if not p.startswith(("http://", "https://"))
    )
    return PipDefaults(cert, links, "pip config")
