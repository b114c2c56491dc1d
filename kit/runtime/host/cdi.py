"""CDI (Container Device Interface): which `nvidia.com/gpu` devices the engine can inject.

One answer for every reader (doctor, fingerprints, the GPU-access plan), from the engine's own
`CDISpecDirs`: an engine that does not report them (Engine < 25) cannot inject CDI devices
whatever files lie in /etc/cdi, and an empty list means CDI is off. The devices come from the
engine's `DiscoveredDevices` where it lists them (Engine 28.2+), else from the spec files in those
folders (`kind: nvidia.com/gpu`, `devices: [{name: "0"}, ...]`, as `nvidia-ctk cdi generate` writes).

    answer = cdi_answer(engine, read_cdi_specs(engine.cdi_spec_dirs or ()))   # pure over the texts
    answer.devices        # ('nvidia.com/gpu=0', ..., 'nvidia.com/gpu=all')
    answer.as_dict()      # the fingerprint's nvidia.cdi and doctor's details['cdi']
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from kit.runtime.host.engine import EngineFacts

KIND = "nvidia.com/gpu"
SPEC_SUFFIXES = (".yaml", ".yml", ".json")
CdiState = Literal["on", "off", "not reported", "unknown"]


@dataclass(frozen=True)
class CdiAnswer:
    state: CdiState
    """on: the engine reads specs; off: CDISpecDirs is empty; not reported: Engine < 25;
    unknown: the engine did not answer."""
    spec_dirs: tuple[str, ...] = ()
    """The engine's CDISpecDirs (empty unless on)."""
    specs: tuple[str, ...] = ()
    """Spec files in spec_dirs that describe nvidia.com/gpu devices."""
    devices: tuple[str, ...] = ()
    """nvidia.com/gpu device names the engine can inject ('nvidia.com/gpu=0', ...=all)."""
    devices_from: Literal["engine", "spec files", "none"] = "none"
    why: str = ""

    @property
    def has_gpus(self) -> bool:
        return self.state == "on" and bool(self.devices)

    def as_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "spec_dirs": list(self.spec_dirs),
            "specs": list(self.specs),
            "devices": list(self.devices),
            "devices_from": self.devices_from,
            "why": self.why,
        }


def spec_devices(text: str) -> tuple[str, ...] | None:
    """The nvidia.com/gpu device names a CDI spec file defines; None when it is not such a spec."""
    try:
        data = yaml.safe_load(text)  # JSON is YAML too (mostly: tabs are not)
    except yaml.YAMLError:
        try:
            data = json.loads(text)
        except ValueError:
            return None
    if not isinstance(data, dict) or data.get("kind") != KIND:
        return None
    names = [str(d.get("name")) for d in data.get("devices") or [] if isinstance(d, dict) and d.get("name")]
    return tuple(f"{KIND}={name}" for name in names)


def _order(names: set[str]) -> tuple[str, ...]:
    """Index names first in numeric order, then UUIDs, then 'all'."""

    def key(name: str) -> tuple[int, int, str]:
        tail = name.split("=", 1)[-1]
        if tail.isdigit():
            return (0, int(tail), "")
        return (2, 0, "") if tail == "all" else (1, 0, tail)

    return tuple(sorted(names, key=key))


def cdi_answer(engine: EngineFacts, spec_texts: Mapping[str, str] | None = None) -> CdiAnswer:
    """The engine's CDI state and its nvidia.com/gpu devices. Pure: spec files come in as texts."""
    if not engine.answered:
        return CdiAnswer("unknown", why=f"the engine did not answer: {engine.error}")
    if engine.cdi_spec_dirs is None:
        return CdiAnswer(
            "not reported", why=f"engine {engine.version or '?'} does not report CDI (Engine 25+ does)"
        )
    dirs = engine.cdi_spec_dirs
    if not dirs:
        return CdiAnswer("off", why="CDI is off on this engine (docker info: CDISpecDirs is empty)")
    specs: list[str] = []
    from_files: set[str] = set()
    for path, text in sorted((spec_texts or {}).items()):
        if not any(path.startswith(d.rstrip("/") + "/") for d in dirs):
            continue  # a file outside the engine's folders is not the engine's
        found = spec_devices(text)
        if found is not None:
            specs.append(path)
            from_files.update(found)
    where = ", ".join(dirs)
    if engine.discovered_devices is not None:
        listed = {d for d in engine.discovered_devices if d.startswith(f"{KIND}=")}
        why = (
            f"the engine discovered {len(listed)} nvidia.com/gpu device(s) (specs read from {where})"
            if listed
            else f"CDI is on (specs read from {where}) but the engine found no nvidia.com/gpu device"
        )
        return CdiAnswer("on", dirs, tuple(specs), _order(listed), "engine" if listed else "none", why)
    if from_files:
        why = f"CDI is on; {', '.join(specs)} define(s) nvidia.com/gpu devices"
        return CdiAnswer("on", dirs, tuple(specs), _order(from_files), "spec files", why)
    why = f"CDI is on (specs read from {where}) but no spec there defines nvidia.com/gpu devices"
    return CdiAnswer("on", dirs, tuple(specs), (), "none", why)


def read_cdi_specs(dirs: tuple[str, ...] | list[str]) -> dict[str, str]:
    """The spec files' texts in DIRS (unreadable files and missing folders are skipped)."""
    texts: dict[str, str] = {}
    for folder in dirs:
        path = Path(folder)
        if not path.is_dir():
            continue
        for file in sorted(path.iterdir()):
            if file.suffix in SPEC_SUFFIXES and file.is_file():
                with contextlib.suppress(OSError):
                    texts[str(file)] = file.read_text(errors="replace")
    return texts
