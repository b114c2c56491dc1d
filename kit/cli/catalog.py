"""`kit targets | validate | check | render`: catalog targets as launches, checked and rendered.

Every command here takes the same TARGET [--image NAME] [--set KEY=VALUE ...] (`target_options`),
so what `kit validate` approved is what `kit render` prints and what `kit up` starts.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.console import Console

from kit.cli import cli
from kit.cli.exits import DOCUMENT, PLAIN, exits
from kit.cli.host import gpu_access_option, gpus_option
from kit.cli.params import LINE, SET_VALUE
from kit.output import err_console, show

F = TypeVar("F", bound=Callable[..., Any])


def image_option(func: F) -> F:
    return click.option(
        "--image",
        type=LINE,
        metavar="NAME",
        default=None,
        help="Image manifest to launch with (images/NAME.toml); default: the target's own.",
    )(func)


def set_option(func: F) -> F:
    return click.option(
        "--set",
        "overrides",
        type=SET_VALUE,  # key and value checked strictly as the command line is read
        metavar="KEY=VALUE",
        multiple=True,
        help="Override a profile key, dotted for nested ones (repeatable): --set mamba_cache=no_buffer, "
        "--set speculative.num_steps=2, --set env.NCCL_P2P_DISABLE=1.",
    )(func)


def target_options(func: F | None = None, *, required: bool = True, many: bool = False) -> Any:
    """TARGET, --image and --set, the same for every command that launches or describes a target.

    The command receives `target` (or `targets` with many=True), `image` and `overrides` (a tuple).
    """

    def decorate(f: F) -> F:
        f = set_option(image_option(f))
        if many:
            return click.argument("targets", metavar="[TARGET]...", nargs=-1)(f)
        return click.argument("target", required=required)(f)

    return decorate(func) if func is not None else decorate


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON document.")(
        func
    )


@exits(*PLAIN, json=DOCUMENT)
@cli.command("targets")
@json_option
def targets_cmd(as_json: bool) -> None:
    """List the catalog's targets: name, model, profile, default image."""
    from kit.catalog import load_catalog

    catalog = load_catalog()
    # gpus = "tp": the GPUs the profile's own TP takes (`--set tp=N` changes both).
    rows = [
        {
            "target": name,
            "model": model,
            "profile": t.profile,
            "image": t.image,
            "gpus": t.gpus_for(catalog.models[model].profile(t.profile)),
            "gpus_follow_tp": t.gpus == "tp",
        }
        for name, (model, t) in sorted(catalog.targets.items())
    ]

    def gpus(row: dict) -> str:
        if not row["gpus"]:
            return ""
        count = f"{row['gpus']} GPU" + ("s" if row["gpus"] > 1 else "")
        return f"  ({count}, --set tp=N for N)" if row["gpus_follow_tp"] else f"  ({count})"

    def human(rows: list[dict], out: Console) -> None:
        columns = ("target", "model", "profile")
        width = {key: max((len(row[key]) for row in rows), default=0) for key in columns}
        for row in rows:
            out.print(
                f"{row['target']:<{width['target']}} {row['model']:<{width['model']}} "
                f"{row['profile']:<{width['profile']}} {row['image']}" + gpus(row),
                markup=False,
                highlight=False,
            )

    show(rows, as_json=as_json, human=human)


@exits("OK", "FAILED", "USAGE", json=DOCUMENT)
@cli.command()
@target_options
@json_option
def validate(target: str, image: str | None, overrides: tuple[str, ...], as_json: bool) -> int:
    """Check TARGET on an image in under a second: parallelism, memory fit, the release's rules, pitfalls.

    OK when nothing is an error (warnings allowed), FAILED when something is.
    """
    from kit.validate import validate as run_validate

    report = run_validate(target, image=image, overrides=overrides)
    show(report, as_json=as_json, human=_validate_human)
    return 0 if report.ok else 1


def _validate_human(report: Any, out: Console) -> None:
    errors = sum(f.severity == "error" for f in report.findings)
    warnings = len(report.findings) - errors
    from kit.dialects import load_dialect

    verdict = "[bold green]VALID[/]" if report.ok else "[bold red]INVALID[/]"
    out.print(
        f"{verdict} {report.target} on {report.image} (dialect {report.dialect}): "
        f"{errors} error(s), {warnings} warning(s) in {report.seconds * 1000:.0f} ms"
    )
    # A dialect is named after the first release of a range that speaks alike (flags, log lines).
    out.print(
        f"dialect {report.dialect}: the flags and log lines of SGLang {load_dialect(report.dialect).sglang}",
        style="dim",
        markup=False,
        highlight=False,
    )
    if report.memory:
        fit = report.memory
        mark = "fits" if fit.fits else "DOES NOT FIT"
        out.print(f"memory {mark}: {fit.summary()}", markup=False, highlight=False)
        if fit.mem_fraction_assumed:
            out.print(f"  (mem_fraction not set; assumed {fit.mem_fraction})", markup=False)
    for finding in report.findings:
        style = "red" if finding.severity == "error" else "yellow"
        out.print(f"[{style}]{finding.severity}[/] {finding.id}: ", end="")
        out.print(finding.message, markup=False, highlight=False)
        if finding.fix:
            out.print(f"  fix: {finding.fix}", markup=False, highlight=False)
    for note in report.notes:
        out.print(f"note: {note}", markup=False, highlight=False)


@exits("OK", "FAILED", "USAGE", "ENVIRONMENT", "INTERRUPTED", json=DOCUMENT)
@cli.command()
@target_options
@click.option(
    "--in-image",
    is_flag=True,
    help="Run the parser inside the image (needs it built) instead of the cached venv.",
)
@json_option
def check(target: str, image: str | None, overrides: tuple[str, ...], in_image: bool, as_json: bool) -> int:
    """Run TARGET's launch through the image's own SGLang argument parser (ServerArgs and its rules).

    Uses a venv per SGLang version under the kit's cache (created on first use: minutes), or the
    image itself with --in-image. OK when SGLang accepts the launch, FAILED when it refuses it; an
    unknown target or a bad --set is USAGE, as for every command that takes TARGET.
    """
    from kit.check import check as run_check

    with _Progress(f"checking {target}") as progress:
        result = run_check(
            target, image=image, overrides=overrides, in_image=in_image, progress=progress.update
        )
    show(result, as_json=as_json, human=_check_human)
    return 0 if result.accepted else 1


def _check_human(result: Any, out: Console) -> None:
    verdict = "[bold green]ACCEPTED[/]" if result.accepted else "[bold red]REJECTED[/]"
    out.print(
        f"{verdict} by SGLang {result.sglang}'s own parser: {result.target} on {result.image} "
        f"({result.seconds:.1f} s"
        + (f", venv created in {result.setup_seconds:.0f} s" if result.setup_seconds else "")
        + ")"
    )
    if not result.accepted:
        out.print(f"{result.error_type}: {result.error}", markup=False, highlight=False)
        if result.stage == "load":
            out.print("(at model load: ServerArgs took it, the attention registry did not)", markup=False)
    else:
        shown = ", ".join(
            f"{k}={v}"
            for k, v in result.resolved.items()
            if v is not None and k not in ("model_path", "cuda_graph_config")  # the lists: --json has them
        )
        out.print(f"resolved: {shown}", markup=False, highlight=False)
        if result.load_not_run:
            out.print(
                f"(the parser's answer alone: the load-stage check did not run: {result.load_not_run})",
                markup=False,
                highlight=False,
            )
    if result.emulated:
        e = result.emulated
        out.print(
            f"emulated device: {e['name']}, capability {e['capability'][0]}.{e['capability'][1]}, "
            f"{e['memory_gib']} GiB x {e['device_count']} "
            "(no such GPU here: torch.cuda answered as the target would)",
            markup=False,
            highlight=False,
        )
    for line in result.warnings[:6]:
        out.print(f"sglang warning: {line}", markup=False, highlight=False)
    out.print(f"ran in {result.where}", markup=False, highlight=False, style="dim")


class _Progress:
    """A spinner on a terminal; step lines (not every pip line) elsewhere, all on stderr."""

    def __init__(self, title: str):
        self.tty = sys.stderr.isatty()
        self.title = title
        self.step = ""
        self._status = err_console().status(title) if self.tty else None

    def __enter__(self) -> _Progress:
        if self._status:
            self._status.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._status:
            self._status.__exit__(*exc)

    def update(self, text: str) -> None:
        step = text.split(":", 1)[0]
        if self._status:
            self._status.update(f"{self.title}: {text[:110]}")
        elif step != self.step:
            err_console().print(f"{self.title}: {step}", markup=False, highlight=False)
        self.step = step


@exits(*PLAIN)
@cli.group()
def render() -> None:
    """Print a target's launch as SGLang argv, docker run, Compose, systemd or Kubernetes LWS."""


def _spec(target: str, image: str | None, overrides: tuple[str, ...], *, host_gpus: bool = False, gpus=None):
    """The target's launch; with host_gpus, on the GPUs --gpus (GPUS) or KIT_GPUS chooses."""
    from kit.launch import resolve
    from kit.runtime.host import with_gpus

    spec = resolve(target, image=image, overrides=overrides)
    return with_gpus(spec, gpus) if host_gpus else spec


def _print(text: str) -> None:
    click.echo(text, nl=False)


@exits(*PLAIN, json=DOCUMENT)
@render.command("sglang")
@target_options
@json_option
def render_sglang(target: str, image: str | None, overrides: tuple[str, ...], as_json: bool) -> None:
    """`python -m sglang.launch_server ...` with its env, for the image's SGLang release."""
    from kit.render.sglang import launch_command, render_sglang

    spec = _spec(target, image, overrides)
    if as_json:
        show(launch_command(spec), as_json=True, human=lambda *_: None)
    else:
        _print(render_sglang(spec))


@exits("OK", "USAGE", "ENVIRONMENT", json=DOCUMENT)
@render.command("docker")
@target_options
@gpus_option
@gpu_access_option("auto")
@click.option("--diagnose", is_flag=True, hidden=True, help="Kept for old scripts: SYS_PTRACE is always on.")
@json_option
def render_docker(
    target: str,
    image: str | None,
    overrides: tuple[str, ...],
    gpus: str | None,
    gpu_access: str,
    diagnose: bool,
    as_json: bool,
) -> None:
    """The `docker run` line (and with --json the docker SDK arguments) `kit up` uses: SYS_PTRACE,
    the compile-cache volume, and the GPUs the way this host gives them (--gpu-access)."""
    from kit.render.docker import chosen_way, docker_run_argv, docker_run_line, run_kwargs

    spec = _spec(target, image, overrides, host_gpus=True, gpus=gpus)
    way = chosen_way(spec, gpu_access)
    if as_json:
        show(
            {"argv": docker_run_argv(spec, way=way), "sdk_kwargs": run_kwargs(spec, way=way)},
            as_json=True,
            human=lambda *_: None,
        )
    else:
        _print(docker_run_line(spec, way=way) + "\n")


@exits(*PLAIN)
@render.command("compose")
@target_options(many=True)
@gpus_option
@gpu_access_option("request")
@click.option(
    "--build-context",
    default=".",
    show_default=True,
    type=LINE,
    metavar="PATH",
    help="The repository root as the file will see it (build: context), for a file kept elsewhere.",
)
def render_compose(
    targets: tuple[str, ...],
    image: str | None,
    overrides: tuple[str, ...],
    gpus: str | None,
    gpu_access: str,
    build_context: str,
) -> None:
    """A Compose file with a service per TARGET (default: every catalog target, i.e. compose.yaml).

    Each service builds its pinned image from the Dockerfile when missing and never pulls it, gets
    SYS_PTRACE and the compile-cache volume, and its GPUs by --gpu-access (default: the portable
    device request; `cdi` needs Compose 2.30+). Publishing beyond 127.0.0.1 (--set
    container.publish_address=0.0.0.0) needs an API key variable (--set
    container.api_key_env=KIT_API_KEY); without one it is refused (USAGE).
    """
    from kit.launch import list_targets
    from kit.render.compose import render_compose
    from kit.render.docker import chosen_way

    names = targets or tuple(list_targets())
    specs = [_spec(name, image, overrides, host_gpus=True, gpus=gpus) for name in names]
    ways = {spec.target: way for spec in specs if (way := chosen_way(spec, gpu_access)) is not None}
    _print(render_compose(specs, context=build_context, ways=ways))


@exits("OK", "USAGE", "ENVIRONMENT")
@render.command("systemd")
@target_options
@gpus_option
@gpu_access_option("auto")
@click.option(
    "--watcher", is_flag=True, help="The companion unit instead: `kit watch --serve` on the server."
)
def render_systemd(
    target: str,
    image: str | None,
    overrides: tuple[str, ...],
    gpus: str | None,
    gpu_access: str,
    watcher: bool,
) -> None:
    """A systemd unit that runs the server container in the foreground (as `kit render docker`);
    --watcher: its companion that watches it while it serves (docs/serving.md)."""
    from kit.render.docker import chosen_way
    from kit.render.systemd import render_systemd, render_systemd_watcher

    spec = _spec(target, image, overrides, host_gpus=True, gpus=gpus)
    _print(
        render_systemd_watcher(spec) if watcher else render_systemd(spec, way=chosen_way(spec, gpu_access))
    )


@exits(*PLAIN)
@render.command("lws")
@target_options
@click.option("--nodes", type=click.IntRange(1, 64), default=None, help="Pods per group (default: nnodes).")
def render_lws(target: str, image: str | None, overrides: tuple[str, ...], nodes: int | None) -> None:
    """Kubernetes LeaderWorkerSet + Service (multi-node: --set tp=8 --set nnodes=2)."""
    from kit.render.lws import render_lws

    _print(render_lws(_spec(target, image, overrides), nodes=nodes))
