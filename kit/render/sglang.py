"""LaunchSpec -> the SGLang server command: argv and env, as data and as a shell command."""

from __future__ import annotations

import shlex
from typing import Any

from kit.runtime.flight_recorder_env import DUMP_PREFIX
from kit.runtime.flight_recorder_env import ENV as FLIGHT_RECORDER_ENV
from kit.spec import LaunchSpec


def server_env(spec: LaunchSpec) -> dict[str, str]:
    """The server's environment as rendered: PyTorch's flight recorder armed (every render carries
    it), under the target's own variables."""
    return {**FLIGHT_RECORDER_ENV, **spec.env}


def launch_command(spec: LaunchSpec) -> dict[str, Any]:
    """The command as data: argv, env, the variables passed through by name, and how it was made."""
    return {
        "target": spec.target,
        "image": spec.image,
        "dialect": spec.dialect,
        "argv": list(spec.argv),
        "env": server_env(spec),
        "pass_env": list(spec.pass_env),
        "notes": list(spec.notes),
    }


def dialect_line(spec: LaunchSpec) -> str:
    """Why a dialect name differs from the image's SGLang version: a dialect covers a range."""
    from kit.dialects import load_dialect

    covers = load_dialect(spec.dialect).sglang
    return (
        f"SGLang dialect {spec.dialect}: the flags and log lines of SGLang {covers} "
        f"(the releases that speak alike; image {spec.image})"
    )


def shell_lines(spec: LaunchSpec) -> list[str]:
    """`VAR=value ... python -m sglang.launch_server` with one flag (and its value) per line."""
    lines = [f"{key}={shlex.quote(value)}" for key, value in sorted(server_env(spec).items())]
    head = " ".join(shlex.quote(part) for part in spec.argv[:3])
    lines.append(head)
    rest = list(spec.argv[3:])
    i = 0
    while i < len(rest):
        item = rest[i]
        if item.startswith("--") and i + 1 < len(rest) and not rest[i + 1].startswith("--"):
            lines.append(f"  {shlex.quote(item)} {shlex.quote(rest[i + 1])}")
            i += 2
        else:
            lines.append(f"  {shlex.quote(item)}")
            i += 1
    return lines


def render_sglang(spec: LaunchSpec) -> str:
    """A shell command a person can read, and run where the image's SGLang is installed."""
    header = [f"# {spec.target} on {spec.image}", f"# {dialect_line(spec)}"]
    header += [f"# {note}" for note in spec.notes]
    folder = DUMP_PREFIX.rsplit("/", 1)[0]
    header.append(
        f"# flight-recorder dumps go to {folder} (mkdir -p it; the containers mount a volume there)"
    )
    if spec.pass_env:
        header.append(f"# from your environment: {', '.join(spec.pass_env)}")
    if spec.api_key_env:
        header.append(f'# add: --api-key "${spec.api_key_env}" (the key stays in your environment)')
    return "\n".join([*header, " \\\n".join(shell_lines(spec))]) + "\n"
