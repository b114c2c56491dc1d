"""`kit model fetch | verify`: the model's files in the HF cache, before any container starts."""

from __future__ import annotations

import time
from typing import Any

import click

from kit.cli import cli
from kit.cli.catalog import json_option, target_options
from kit.cli.exits import DOCUMENT, PLAIN, exits
from kit.cli.params import LINE
from kit.output import err_console, show

PLAIN_EVERY_S = 10.0


@exits(*PLAIN)
@cli.group()
def model() -> None:
    """Model files: fetch a hub model at its pinned commit into the HF cache, verify them."""


@exits("OK", "FAILED", "USAGE", "ENVIRONMENT", "INTERRUPTED", json=DOCUMENT)
@model.command("fetch")
@target_options
@click.option(
    "--revision", type=LINE, metavar="COMMIT", help="Fetch this commit instead of the catalog's pin."
)
@click.option("--no-xet", is_flag=True, help="Plain HTTP (resumable by byte) even where hf_xet is installed.")
@json_option
def fetch_cmd(
    target: str,
    image: str | None,
    overrides: tuple[str, ...],
    revision: str | None,
    no_xet: bool,
    as_json: bool,
) -> None:
    """Download TARGET's model (only the files a launch needs) into the HF cache its container mounts.

    Resumable: run it again after an interruption and it continues where it stopped. HF_TOKEN is
    read from the environment. A bad revision or token is USAGE; no network or no space ENVIRONMENT.
    """
    from kit.model import fetch, fetch_plan

    # A bad target, image or revision is one line before the progress header.
    fetch_plan(target, revision=revision, image=image, overrides=overrides)
    with FetchView(target) as view:
        result = fetch(
            target,
            revision=revision,
            image=image,
            overrides=overrides,
            on_progress=view.update,
            use_xet=not no_xet,
        )
    show(result, as_json=as_json, human=_fetch_human)


def _fetch_human(result: Any, out) -> None:
    from kit.model.fetch import gb

    rate = result.bytes_fetched / result.seconds if result.seconds else 0
    out.print(
        f"[bold green]fetched[/] {result.repo}@{result.revision[:12]}: {result.files} files, "
        f"{gb(result.bytes_total)} ({gb(result.bytes_fetched)} now at {gb(int(rate))}/s, "
        f"{gb(result.bytes_kept)} already here) in {result.seconds:.0f} s"
    )
    out.print(f"  {result.snapshot}", markup=False, highlight=False)
    out.print(f"  next: kit model verify {_target_hint(result)}", markup=False, highlight=False, style="dim")


def _target_hint(result: Any) -> str:
    return click.get_current_context().params.get("target", "TARGET")


class FetchView:
    """A rich progress bar (bytes, rate, ETA) on a terminal; a plain line every 10 s elsewhere (CI)."""

    def __init__(self, target: str):
        self.target = target
        self.console = err_console()
        self.tty = self.console.is_terminal
        self._bar = None
        self._task = None
        self._last_line = 0.0
        self._started = time.monotonic()
        self._first_done: int | None = None

    def __enter__(self) -> FetchView:
        if self.tty:
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )

            self._bar = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                TimeRemainingColumn(),
                TextColumn("{task.fields[file]}"),
                console=self.console,
                transient=True,
            )
            self._bar.__enter__()
        else:
            self.console.print(
                f"fetching {self.target}: listing the hub's files", markup=False, highlight=False
            )
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._bar:
            self._bar.__exit__(*exc)

    def update(self, p) -> None:
        if self._first_done is None:
            self._first_done = p.done - p.file_done
        where = f"{p.file} ({p.files_done}/{p.files_total} files, {p.backend})"
        if self._bar is not None:
            if self._task is None:
                self._task = self._bar.add_task(
                    f"fetch {self.target}", total=p.total, completed=p.done, file=where
                )
            self._bar.update(self._task, completed=p.done, file=where)
            return
        now = time.monotonic()
        finished = p.file_done == p.file_total
        if now - self._last_line < PLAIN_EVERY_S and not finished:
            return
        self._last_line = now
        self.console.print(plain_line(self.target, p, now - self._started, self._first_done), markup=False)


def plain_line(target: str, p, elapsed: float, first_done: int) -> str:
    """'fetch qwen-base: 12.3 of 234.0 GB (5%), 110.0 MB/s, ETA 33 min; model-00003... (3/39 files)'."""
    from kit.model.fetch import gb

    rate = (p.done - first_done) / elapsed if elapsed > 0 else 0.0
    left = p.total - p.done
    eta = f"{left / rate / 60:.0f} min" if rate > 0 and left > 0 else "-"
    percent = 100 * p.done / p.total if p.total else 100
    return (
        f"fetch {target}: {gb(p.done)} of {gb(p.total)} ({percent:.0f}%), {gb(int(rate))}/s, ETA {eta}; "
        f"{p.file} ({p.files_done}/{p.files_total} files, {p.backend})"
    )


@exits("OK", "FAILED", "USAGE", "ENVIRONMENT", json=DOCUMENT)
@model.command("verify")
@target_options
@click.option(
    "--offline", is_flag=True, help="Never ask the hub for sizes (use the saved listing or headers)."
)
@json_option
def verify_cmd(
    target: str, image: str | None, overrides: tuple[str, ...], offline: bool, as_json: bool
) -> int:
    """Check TARGET's model files: every shard the index names is present, as large as the hub lists
    it, with a readable safetensors header; config and tokenizer files exist.

    A model inside the image (the CPU rehearsal's) is checked inside the image. FAILED names the
    missing or broken files; no engine or image is ENVIRONMENT.
    """
    from kit.model import verify

    report = verify(target, image=image, overrides=overrides, online=not offline)
    show(report, as_json=as_json, human=_verify_human)
    return report.exit_code


def _verify_human(report: Any, out) -> None:
    from rich.table import Table

    from kit.model.verify import describe

    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("file", "kind", "status", "bytes", "expected", "detail"):
        table.add_column(column)
    shown = [row for row in report.files if not row.ok] or list(report.files)
    ok_shards = sum(row.ok and row.kind == "shard" for row in report.files)
    for row in shown[:60]:
        style = "green" if row.ok else "red"
        table.add_row(
            row.name,
            row.kind,
            f"[{style}]{row.status}[/]",
            "-" if row.size is None else str(row.size),
            "-" if row.expected is None else str(row.expected),
            row.detail[:60],
        )
    out.print(table)
    if len(shown) > 60:
        out.print(f"... and {len(shown) - 60} more", markup=False)
    out.print(
        f"where: {report.where}; sizes from {report.sizes_from}", markup=False, highlight=False, style="dim"
    )
    if report.pin is not None:
        style = {"confirmed": "dim", "unconfirmed": "yellow", "unknown": "red"}[report.pin.status]
        out.print(report.pin.line, markup=False, highlight=False, style=style)
    if report.ok:
        out.print(f"[bold green]OK[/] {report.model}: {len(report.files)} files, {ok_shards} shards")
    else:
        out.print(f"[bold red]BROKEN[/] {report.model}: ", end="")
        what = describe(report.problems, limit=10) if report.problems else report.pin.detail
        out.print(what, markup=False, highlight=False)
        out.print(f"  fix: {report.fix}", markup=False, highlight=False)
