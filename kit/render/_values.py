"""Every value a renderer writes into a file is one line of printable text.

A newline in an env value or an argument would be a line of its own in a systemd unit (an injected
`ExecStartPre=`), a YAML key in Compose or LWS, a second command after `docker run ... \\`. The
catalog and `--set` refuse them earlier; this is the last check, on the LaunchSpec itself, so a
hand-edited catalog file or an untrusted bundle cannot get one through either.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kit.errors import InputError
from kit.spec import LaunchSpec


def _values(spec: LaunchSpec) -> Iterator[tuple[str, str]]:
    for key in ("target", "model", "profile", "image", "image_ref", "model_path", "hf_cache", "hf_repo",
                "hf_revision", "publish_address", "api_key_env", "shm_size", "health_path"):  # fmt: skip
        value: Any = getattr(spec, key, None)
        if isinstance(value, str):
            yield key, value
    for n, arg in enumerate(spec.argv):
        yield f"argv[{n}]", arg
    for table in ("env", "labels"):
        for name, value in getattr(spec, table).items():
            yield f"{table}.{name}", f"{name}{value}"
    for key in ("pass_env", "cap_add", "gpu_devices", "notes"):
        for n, value in enumerate(getattr(spec, key)):
            yield f"{key}[{n}]", value


def require_one_line(spec: LaunchSpec, into: str) -> None:
    """InputError naming the first value with a control character (newline, CR, tab, escape, NUL)."""
    for where, value in _values(spec):
        bad = next((c for c in value if not c.isprintable()), None)
        if bad is not None:
            raise InputError(
                where,
                f"a control character ({bad!r}) in the value: in {into} it would start a line of its own",
                "one line of printable text (fix the catalog or --set value)",
            )
