"""`kit cache show|clear`, and the host options other commands share: `--gpus` and `--gpu-access`.

kit cache show [--json]     the compile-cache volume: size per cache, the containers using it
kit cache clear [--json]    remove it (refused, FAILED, while a container uses it)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.console import Console

from kit.cli import cli
from kit.cli.exits import DOCUMENT, PLAIN, exits
from kit.output import show

F = TypeVar("F", bound=Callable[..., Any])


def gpus_option(func: F) -> F:
    """--gpus LIST: which host GPUs (NVML indices or UUIDs); KIT_GPUS when not given."""
    return click.option(
        "--gpus",
        "gpus",
        metavar="LIST",
        default=None,
        help="Host GPUs to use, e.g. 0,1,2,3 (NVML indices as nvidia-smi numbers them, or UUIDs); "
        "default: $KIT_GPUS, else the first N.",
    )(func)


def gpu_access_option(default: str) -> Callable[[F], F]:
    """--gpu-access: how a rendered container gets its GPUs."""

    def decorate(func: F) -> F:
        return click.option(
            "--gpu-access",
            type=click.Choice(["auto", "request", "cdi", "runtime"]),
            default=default,
            show_default=True,
            help="How the container gets GPUs: auto (this host's best way: docker info, CDI specs), "
            "request (--gpus / Compose driver nvidia), cdi (nvidia.com/gpu=N devices), runtime "
            "(--runtime nvidia).",
        )(func)

    return decorate


def json_option(func: F) -> F:  # kit.cli.catalog's, here too: catalog imports this module
    return click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON document.")(
        func
    )


def _gib(value: int | None) -> str:
    if value is None:
        return "unknown"
    return f"{value / (1 << 30):.2f} GiB" if value >= 1 << 27 else f"{value / (1 << 20):.1f} MiB"


@exits(*PLAIN)
@cli.group()
def cache() -> None:
    """The compile cache: one volume for Triton, flashinfer, torch inductor, deep_gemm and SGLang's
    JIT caches, mounted by `kit up`, preflight and every render, kept by `kit down --all`."""


def _show_human(state: Any, out: Console) -> None:
    if not state.exists:
        out.print(f"volume {state.volume}: not created yet (the first start creates it)", markup=False)
        return
    out.print(
        f"volume {state.volume}: {_gib(state.size_bytes)}, mounted at {state.mount}"
        + (f" (size from {state.size_from})" if state.size_from else ""),
        markup=False,
        highlight=False,
    )
    for name, size in sorted(state.caches.items(), key=lambda item: -item[1]):
        out.print(f"  {name:<12} {_gib(size)}", markup=False, highlight=False)
    for user in state.used_by:
        out.print(f"  used by {user.name} ({user.status})", markup=False, highlight=False)


@exits("OK", "USAGE", "ENVIRONMENT", json=DOCUMENT)
@cache.command("show")
@json_option
def cache_show(as_json: bool) -> None:
    """The volume: whether it exists, its size per cache, the variables, the containers using it."""
    from kit.runtime.cache import cache_state

    show(cache_state(), as_json=as_json, human=_show_human)


@exits("OK", "FAILED", "USAGE", "ENVIRONMENT", json=DOCUMENT)
@cache.command("clear")
@json_option
def cache_clear(as_json: bool) -> None:
    """Remove the volume; the next start compiles again. FAILED while a container uses it."""
    from kit.runtime.cache import clear_cache

    cleared = clear_cache()

    def human(result: Any, out: Console) -> None:
        if result.removed:
            out.print(f"removed volume {result.volume} ({_gib(result.freed_bytes)})", markup=False)
        else:
            out.print(f"no volume {result.volume}: nothing to clear", markup=False)

    show(cleared, as_json=as_json, human=human)
