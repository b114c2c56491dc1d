"""The kit's containers as data: list, print logs, remove (all by the io.kit.managed label)."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from kit.errors import InputError
from kit.runtime import server as runtime
from kit.runtime.engine import LABEL_IMAGE, LABEL_MANAGED, LABEL_TARGET


@dataclass(frozen=True)
class ServerRow:
    name: str
    id: str
    role: str
    target: str
    image: str
    status: str
    url: str | None


def list_servers() -> list[ServerRow]:
    rows = []
    for container in runtime.kit_containers():
        labels = container.labels
        port = _first_published_port(container) if container.status == "running" else None
        rows.append(
            ServerRow(
                container.name,
                container.short_id,
                labels.get(LABEL_MANAGED, ""),
                labels.get(LABEL_TARGET, "-"),
                labels.get(LABEL_IMAGE, "-"),
                container.status,
                f"http://127.0.0.1:{port}" if port else None,
            )
        )
    return rows


def _first_published_port(container) -> int | None:
    for bindings in (container.attrs.get("NetworkSettings", {}).get("Ports") or {}).values():
        if bindings:
            return int(bindings[0]["HostPort"])
    return None


def _kit_container(name: str):
    container = runtime.attach(name)
    if LABEL_MANAGED not in container.labels:
        raise InputError("CONTAINER", f"'{name}' was not started by the kit", "see 'kit ps'")
    return container


def print_logs(name: str, *, follow: bool, tail: str) -> None:
    container = _kit_container(name)
    tail_value: int | str = int(tail) if tail.isdigit() else "all"
    if not follow:
        sys.stdout.write(runtime.logs_text(container, tail=tail_value))
        return
    for chunk in container.logs(stream=True, follow=True, tail=tail_value):
        sys.stdout.write(chunk.decode("utf-8", "replace"))
        sys.stdout.flush()


COMPOSE_PROJECT = "com.docker.compose.project"


@dataclass(frozen=True)
class Removal:
    removed: tuple[str, ...]
    left: tuple[str, ...]  # Compose's services: `--all` never removes them (compose owns them)


def remove_servers(names: tuple[str, ...], *, all_: bool) -> Removal:
    """Remove the named kit containers, or with all_ every kit container except Compose's services:
    a `docker compose up qwen-base` deployment is not the kit's to stop."""
    if all_:
        found = runtime.kit_containers()
        containers = [c for c in found if COMPOSE_PROJECT not in c.labels]
        left = tuple(c.name for c in found if COMPOSE_PROJECT in c.labels)
    else:
        containers, left = [_kit_container(n) for n in names], ()
    removed = []
    for container in containers:
        runtime.remove(container)
        removed.append(container.name)
    return Removal(tuple(removed), left)
