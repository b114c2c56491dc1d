"""`kit image ...`: build, inspect and compare the kit's images."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from kit.cli import cli
from kit.output import console, err_console, show


@cli.group()
def image() -> None:
    """Pinned SGLang images: one manifest each in images/."""


@image.command("build")
@click.argument("name")
@click.option(
    "--ca-bundle",
    type=click.Path(path_type=Path),
    help="PEM bundle trusted during the build (default: the one your pip uses, if any).",
)
@click.option("--no-host-ca", is_flag=True, help="Do not pass the host pip's CA bundle.")
@click.option(
    "--wheel-dir",
    "wheel_dirs",
    multiple=True,
    type=click.Path(path_type=Path),
    help="Folder with a local torch wheel (default: your pip's find-links folders).",
)
@click.option("--no-cache", is_flag=True, help="Build every layer again.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def build(
    name: str,
    ca_bundle: Path | None,
    no_host_ca: bool,
    wheel_dirs: tuple[Path, ...],
    no_cache: bool,
    as_json: bool,
) -> None:
    """Build kit/sglang:NAME from images/NAME.toml, with live progress."""
    from kit.images.build import BuildOptions, build_image
    from kit.images.manifest import load_manifest
    from kit.images.pipconfig import pip_defaults

    manifest = load_manifest(name)
    defaults = pip_defaults()
    options = BuildOptions(
        ca_bundle=ca_bundle or (None if no_host_ca else defaults.cert),
        wheel_dirs=wheel_dirs or defaults.find_links,
        no_cache=no_cache,
    )
    progress = _BuildProgress(manifest.tag)
    with progress:
        result = build_image(manifest, options, on_line=progress.line)
    show(
        result,
        as_json=as_json,
        human=lambda r, c: c.print(
            f"[bold green]built[/] {r.tag} ({r.image_id[:19]}) in {r.seconds:.0f} s; "
            f"torch from {r.torch_source}; log {r.log_path}"
        ),
    )


class _BuildProgress:
    """A spinner with the current build step on a terminal; plain step lines elsewhere (CI logs)."""

    def __init__(self, tag: str):
        self.tag = tag
        self.tty = sys.stderr.isatty()
        self.step = ""
        self._status = err_console().status(f"building {tag}") if self.tty else None

    def __enter__(self):
        if self._status:
            self._status.__enter__()
        else:
            err_console().print(f"building {self.tag}", markup=False)
        return self

    def __exit__(self, *exc):
        if self._status:
            self._status.__exit__(*exc)

    def line(self, text: str) -> None:
        text = text.strip()
        if text.startswith("Step "):
            self.step = text[:120]
            if not self._status:
                err_console().print(self.step, markup=False)
        if self._status:
            self._status.update(f"building {self.tag}  {self.step}\n  {text[:100]}")


@image.command("bases", hidden=True)
@click.option("--debootstrap", is_flag=True, help="Only bases bootstrap can make from Debian packages.")
def bases(debootstrap: bool) -> None:
    """Base images the manifests need, one 'IMAGE SUITE' per line (used by scripts/bootstrap)."""
    from kit.images.manifest import load_all

    seen: set[str] = set()
    for manifest in load_all():
        base = manifest.base
        if base.image in seen or (debootstrap and not base.debootstrap_suite):
            continue
        seen.add(base.image)
        console().print(f"{base.image} {base.debootstrap_suite or '-'}", markup=False, highlight=False)
