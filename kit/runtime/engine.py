"""The one door to the Docker engine: a client, with docker's errors translated into the kit's."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import docker
from docker.errors import APIError, DockerException, ImageNotFound, NotFound

from kit.errors import EnvironmentProblem, InputError, KitError

# Every container the kit starts carries these labels, so `kit ps/down` and test teardown find them.
LABEL_MANAGED = "io.kit.managed"
LABEL_TARGET = "io.kit.target"
LABEL_IMAGE = "io.kit.image"
LABEL_SESSION = "io.kit.session"
# The restart policy of a supervisor outside Docker (systemd), which replaces the container by name.
LABEL_RESTART = "io.kit.restart"


@functools.cache
def client() -> docker.DockerClient:
    try:
        cli = docker.from_env(timeout=120)
        cli.ping()
    except DockerException as exc:
        raise EnvironmentProblem(
            "no Docker engine answers",
            hint="start one, or run scripts/bootstrap as root on Debian/Ubuntu to install and start it",
        ) from exc
    return cli


@contextlib.contextmanager
def translated(action: str) -> Iterator[None]:
    """Re-raise docker SDK errors as kit errors that say what the kit was doing."""
    try:
        yield
    except ImageNotFound as exc:
        raise EnvironmentProblem(
            f"{action}: image not found ({exc.explanation})", hint="build it with 'kit image build NAME'"
        ) from exc
    except NotFound as exc:
        raise KitError(f"{action}: {exc.explanation}") from exc
    except APIError as exc:
        if exc.status_code == 400:  # the engine refused the request itself: a bad name or reference
            raise InputError(
                action, f"the engine refused it: {exc.explanation or exc}", "check the name"
            ) from exc
        raise KitError(f"{action}: the engine said: {exc.explanation or exc}") from exc
    except DockerException as exc:
        raise EnvironmentProblem(f"{action}: {exc}") from exc


def image_exists(ref: str) -> bool:
    try:
        client().images.get(ref)
    except ImageNotFound:
        return False
    return True
