"""`kit image ...`: build, inspect and compare the kit's images."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from kit.cli import cli
from kit.cli.exits import DOCUMENT, PLAIN, exits
from kit.cli.image_build import build_with_progress, built_line
from kit.cli.params import LINE, FiniteFloat, InputFile, resolver_timeout
from kit.cli.signals import interruptible
from kit.output import console, show


@exits(*PLAIN)
@cli.group()
def image() -> None:
    """Pinned SGLang images: one manifest each in images/."""


@exits("OK", "FAILED", "USAGE", "ENVIRONMENT", "INTERRUPTED", json=DOCUMENT)
@image.command("build")
@click.argument("name", required=False)
@click.option(
    "--from-bundle",
    "from_bundle",
    type=click.Path(path_type=Path),
    help="Build the image a bundle ran, from the lock it carries (untrusted: shown and judged first).",
)
@click.option(
    "--trust-bundle", is_flag=True, help="With --from-bundle: build packages none of the kit's locks hold."
)
@click.option(
    "--ca-bundle",
    type=InputFile(example="--ca-bundle /etc/ssl/certs/ca-certificates.crt"),
    help="PEM bundle trusted during the build (default: the one your pip uses, if any).",
)
@click.option("--no-host-ca", is_flag=True, help="Do not pass the host pip's CA bundle.")
@click.option(
    "--wheel-dir",
    "wheel_dirs",
    multiple=True,
    type=click.Path(path_type=Path, exists=True, file_okay=False),
    help="Folder with a local torch wheel (default: your pip's find-links folders).",
)
@click.option("--no-cache", is_flag=True, help="Build every layer again.")
@click.option(
    "--apt",
    "apt",
    type=click.Choice(["locked", "snapshot", "today"]),
    default="locked",
    show_default=True,
    help="System packages: the lock's versions; the same from the snapshot of the lock's date "
    "(snapshot.debian.org / snapshot.ubuntu.com: a version the mirror dropped); or the mirror's of "
    "today, the lock's system part ignored (the build to relock it from: kit image lock NAME --system).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON document.")
def build(
    name: str | None,
    from_bundle: Path | None,
    trust_bundle: bool,
    ca_bundle: Path | None,
    no_host_ca: bool,
    wheel_dirs: tuple[Path, ...],
    no_cache: bool,
    apt: str,
    as_json: bool,
) -> None:
    """Build kit/sglang:NAME from images/NAME.toml and its lock images/NAME.lock, with live progress.
    With --from-bundle B: the image bundle B ran, from its lock, as kit/sglang:NAME-bundle-DIGEST."""
    from kit.errors import InputError
    from kit.images.build import BuildOptions
    from kit.images.manifest import load_manifest
    from kit.images.pipconfig import pip_defaults

    if (name is None) == (from_bundle is None):
        raise InputError("NAME", "name an image, or give --from-bundle (one of them)", "kit image list")
    lock_text, tag = None, None
    if from_bundle is not None:
        name, lock_text, tag = bundle_build_options(from_bundle, trusted=trust_bundle)
    manifest = load_manifest(name or "")
    defaults = pip_defaults()
    options = BuildOptions(
        ca_bundle=ca_bundle or (None if no_host_ca else defaults.cert),
        wheel_dirs=wheel_dirs or defaults.find_links,
        no_cache=no_cache,
        lock_text=lock_text,
        tag=tag,
        apt=apt,  # type: ignore[arg-type]
    )
    show(build_with_progress(manifest, options), as_json=as_json, human=lambda r, c: c.print(built_line(r)))


def bundle_build_options(path, *, trusted: bool) -> tuple[str, str, str]:
    """`kit image build --from-bundle`: show the bundle's lock, judge it, and refuse (exit 2, before
    any build) what the kit does not build. Returns (manifest name, lock text, tag)."""
    from kit import paths
    from kit.check.locks import LOCK_DIR
    from kit.diagnose.from_bundle import bundle_lock, judge, kit_locks
    from kit.errors import InputError
    from kit.images.manifest import list_manifests

    text, name = bundle_lock(path)
    judged = judge(text, name, list_manifests(), kit_locks([paths.images_dir(), LOCK_DIR]))
    out = console()
    out.print(f"bundle {path}: its lock, before anything is built", markup=False, highlight=False)
    for line in judged.lines():
        out.print(f"  {line}", markup=False, highlight=False)
    for refusal in judged.fatal:
        out.print(f"  NEVER BUILT {refusal.line()}", markup=False, highlight=False)
    for refusal in judged.refused:
        out.print(f"  REFUSED {refusal.line()}", markup=False, highlight=False)
    if judged.fatal:
        raise InputError("--from-bundle", judged.fatal[0].line(), "the kit builds only a hashed kit lock")
    if judged.refused and not trusted:
        raise InputError(
            "--from-bundle",
            f"{len(judged.refused)} package(s) outside the kit's own locks, first {judged.refused[0].line()}",
            "read them above; --trust-bundle builds them anyway",
        )
    assert judged.manifest is not None
    return judged.manifest, text, f"kit/sglang:{judged.manifest}-bundle-{judged.digest[7:19]}"


@exits(*PLAIN)
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


def _yes_no(built: bool | None) -> str:
    return "?" if built is None else ("yes" if built else "no")


@exits("OK", "USAGE", "ENVIRONMENT", json=DOCUMENT)
@image.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the list as one JSON document.")
def list_images(as_json: bool) -> None:
    """Every manifest in images/, with its main pins and whether it is built here."""
    from kit.images.inspect import image_info_if_engine
    from kit.images.manifest import load_all
    from kit.images.summary import list_row

    rows = []
    for manifest in load_all():
        info, problem = image_info_if_engine(manifest.tag)
        rows.append(list_row(manifest, None if problem else info is not None))
    show(rows, as_json=as_json, human=_human_list)


def _human_list(rows, out) -> None:
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("image", no_wrap=True, min_width=max((len(r.name) for r in rows), default=5))
    for column in ("flavor", "sglang", "torch", "cuda", "built"):
        table.add_column(column)
    for row in rows:
        table.add_row(row.name, row.flavor, row.sglang, row.torch, row.cuda, _yes_no(row.built))
    out.print(table)
    if any(r.built is None for r in rows):
        out.print("built: ? = no Docker engine answered", style="dim")


@exits("OK", "USAGE", "ENVIRONMENT", json=DOCUMENT)
@image.command("show")
@click.argument("name")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the manifest and image facts as one JSON document."
)
def show_image(name: str, as_json: bool) -> None:
    """The pins of images/NAME.toml and, if built here, the image's id, size, date and labels."""
    from kit.images.build import build_args
    from kit.images.inspect import image_info_if_engine
    from kit.images.manifest import load_manifest
    from kit.images.summary import show_result

    manifest = load_manifest(name)
    info, problem = image_info_if_engine(manifest.tag)
    args = build_args(manifest)
    show(show_result(manifest, args, info, problem), as_json=as_json, human=_human_show)


def _human_show(result, out) -> None:
    from rich.table import Table

    out.print(f"[bold]{result.tag}[/]  {result.description}")
    out.print(f"flavor {result.flavor}, dialect {result.dialect}, base {result.base_image}, {result.python}")
    from kit.dialects import load_dialect

    covers = load_dialect(result.dialect).sglang
    out.print(f"  (dialect {result.dialect}: the flags and log lines of SGLang {covers})", style="dim")
    table = Table(show_header=False, show_edge=False, pad_edge=False)
    table.add_column("pin", style="bold")
    table.add_column("value")
    for pin in result.pins:
        table.add_row(pin.key, pin.value)
    out.print(table)
    if result.extra_pip:
        out.print(f"extra pip: {' '.join(result.extra_pip)}", markup=False)
    if result.built is None:
        out.print(f"built: unknown ({result.engine_problem})", markup=False)
    elif not result.built:
        out.print(f"built: no (run 'kit image build {result.name}')", markup=False)
    else:
        image = result.image
        out.print(
            f"built: {image.id[:19]}  {image.size_gb:.2f} GB  created {image.created[:19]}", markup=False
        )
        for key in sorted(image.labels):
            if key.startswith(("io.kit.", "org.opencontainers.")):
                out.print(f"  {key}={image.labels[key]}", markup=False)
        for line in result.label_drift:
            out.print(f"[yellow]label differs from the manifest:[/] {line} (rebuild it)")


@exits(*PLAIN)
@image.command("build-args")
@click.argument("name")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["env", "json"]),
    default="env",
    show_default=True,
    help="env: KEY=value lines (docker build --build-arg, build-push-action build-args, $GITHUB_ENV).",
)
def build_args_cmd(name: str, fmt: str) -> None:
    """The build args `kit image build NAME` feeds the Dockerfile (torch from the manifest's index)."""
    import json

    from kit.images.build import committed_build_args
    from kit.images.manifest import load_manifest

    args = committed_build_args(load_manifest(name))
    if fmt == "json":
        click.echo(json.dumps(args, indent=2))
        return
    for key, value in args.items():
        click.echo(f"{key}={value}")


@exits("OK", "FAILED", "USAGE", "ENVIRONMENT", "INTERRUPTED", json=DOCUMENT)
@image.command("verify")
@click.argument("name")
@click.option(
    "--gpus",
    type=click.Choice(["auto", "all", "none"]),
    default="auto",
    show_default=True,
    help="auto: give the probe the host's GPUs if the engine can (nvidia runtime, runtime hook or CDI); "
    "all: fail if it cannot; none: run no GPU check (versions only, said so in the verdict).",
)
@click.option(
    "--collective-timeout",
    type=FiniteFloat(5, 1800, example="90", low_open=False),
    default=90,
    show_default=True,
    help="Seconds the all_reduce may take, process start to result.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON document.")
def verify(name: str, gpus: str, collective_timeout: float, as_json: bool) -> None:
    """Check inside kit/sglang:NAME that torch, CUDA, NCCL, sglang, flashinfer, sglang-kernel, py-spy
    and the compiled arch list match images/NAME.toml, and that it runs: sgl_kernel and flashinfer
    import, one sgl_kernel op and a matmul per GPU match torch, an all_reduce over every GPU (NCCL;
    gloo over 2 CPU ranks in the CPU image) finishes in time.

    Each check is ok, DRIFT or not checked (with why). OK: every check ran and matched, or only the
    GPU checks were turned off with --gpus none. FAILED: drift. ENVIRONMENT: no drift, but checks
    could not run (a GPU image without GPUs), or the image is not built.
    """
    from kit.errors import CheckFailed, EnvironmentProblem
    from kit.images.manifest import load_manifest
    from kit.images.verify import verify_image

    interruptible()
    result = verify_image(load_manifest(name), gpus=gpus, collective_timeout_s=collective_timeout)  # type: ignore[arg-type]
    show(result, as_json=as_json, human=_human_verify)
    if result.verdict == "drift":
        checks = ", ".join(r.check for r in result.drift)
        raise CheckFailed(
            f"{result.tag} differs from images/{name}.toml in {len(result.drift)} check(s): {checks}",
            hint="rebuild it with 'kit image build NAME' or fix the manifest",
        )
    if result.verdict == "incomplete":
        checks = ", ".join(r.check for r in result.not_checked)
        raise EnvironmentProblem(
            f"{result.tag}: no drift, but {len(result.not_checked)} check(s) not run: {checks}",
            hint=f"{result.not_checked[0].why}; run it on a GPU host, or --gpus none to check versions only",
        )


_STATUS_MARK = {"ok": "[green]ok[/]", "drift": "[bold red]DRIFT[/]", "not checked": "[yellow]not checked[/]"}


def _human_verify(result, out) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"{result.tag} ({result.image_id[:19]})", title_justify="left", show_edge=False)
    table.add_column("check", no_wrap=True)
    for column in ("expected", "found", ""):
        table.add_column(column)
    for row in result.rows:
        mark = _STATUS_MARK[row.status] + (f"[dim]: {escape(row.why)}[/]" if row.why else "")
        table.add_row(escape(row.check), escape(row.expected), escape(row.found), mark)
    out.print(table)
    access = result.gpus
    if result.flavor == "cuda":
        out.print(f"GPUs: {escape(access.why)}", style="dim")
        for line in access.detail:
            out.print(f"  {escape(line)}", style="dim")
    n = result.counts
    ran = n["ok"] + n["drift"]
    if result.verdict == "pass":
        verdict = f"[bold green]matches its manifest[/]: all {ran} checks ran and matched"
    elif result.verdict == "waived":
        verdict = (
            f"[bold yellow]matches its manifest in the {ran} checks that ran[/]; "
            f"{n['not checked']} GPU check(s) not run (--gpus none): not a full pass"
        )
    elif result.verdict == "incomplete":
        verdict = f"[bold yellow]NOT FULLY CHECKED[/]: no drift in {ran} checks, {n['not checked']} not run"
    else:
        verdict = f"[bold red]DRIFT[/] in {n['drift']} of {ran} checks"
        if n["not checked"]:
            verdict += f", {n['not checked']} not run"
    out.print(f"{verdict} ({result.seconds:.1f} s)")


@exits("OK", "FAILED", "USAGE", "ENVIRONMENT", json=DOCUMENT)
@image.command("diff")
@click.argument("a", type=LINE)
@click.argument("b", type=LINE)
@click.option(
    "--files",
    is_flag=True,
    help="Compare the two filesystems file by file (path, type, mode, owner, size, sha256) instead of "
    "their locks; FAILED when a file differs outside the documented list (kit/images/may_differ.toml).",
)
@click.option(
    "--show",
    "show_n",
    type=click.IntRange(0, 100_000),
    default=20,
    show_default=True,
    help="With --files: how many differing files to print (the count is always printed).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the difference as one JSON document.")
def diff(a: str, b: str, files: bool, show_n: int, as_json: bool) -> None:
    """Python packages added, removed and changed from image A to image B (their build-time locks);
    with --files, every file that differs.

    A and B are manifest names (kit/sglang:NAME), or any image reference or id; without --files both
    must be kit images (they record their lock at /opt/kit/lock.txt). FAILED: only with --files,
    a file differs outside the documented list.
    """
    (ref_a, name_a), (ref_b, name_b) = _image_ref(a), _image_ref(b)
    if files:
        from kit.errors import CheckFailed
        from kit.images.files import diff_image_files

        found = diff_image_files(ref_a, ref_b, a_name=name_a, b_name=name_b)
        shown = found if as_json else dataclasses.replace(found, differences=found.differences[:show_n])
        show(shown, as_json=as_json, human=_human_files)
        if not found.same:
            raise CheckFailed(
                f"{found.differing} of {found.paths} paths differ between {name_a} and {name_b}",
                hint="each is listed above"
                if as_json
                else "the first are listed above; --json lists them all",
            )
        return
    from kit.images.lock import diff_locks, read_image_lock

    result = diff_locks(read_image_lock(ref_a), read_image_lock(ref_b), a_name=name_a, b_name=name_b)
    show(result, as_json=as_json, human=_human_diff)


def _human_files(result, out) -> None:
    out.print(
        f"{result.a} ({result.paths_a} paths) and {result.b} ({result.paths_b} paths): "
        f"{result.differing} of {result.paths} differ, {result.documented} more on the documented list",
        markup=False,
        highlight=False,
    )
    for difference in result.differences:
        why = f"  (may differ: {difference.reason})" if difference.reason else ""
        out.print(f"  {difference.path}: {', '.join(difference.what)}{why}", markup=False, highlight=False)
    hidden = result.differing + result.documented - len(result.differences)
    if hidden > 0:
        out.print(f"  ... {hidden} more (--show N, or --json for all)", markup=False, highlight=False)


def _image_ref(arg: str) -> tuple[str, str]:
    """A manifest name -> its tag, checked to be built; anything else is taken as an image reference."""
    from kit.errors import InputError
    from kit.images.inspect import image_info, require_image
    from kit.images.manifest import IMAGE_REPOSITORY, list_manifests

    known = list_manifests()
    if arg in known:
        ref = f"{IMAGE_REPOSITORY}:{arg}"
        require_image(ref, arg)
        return ref, arg
    if image_info(arg) is None:
        raise InputError(
            "image", f"'{arg}' is neither a manifest nor a local image", f"known images: {', '.join(known)}"
        )
    return arg, arg


def _human_diff(result, out) -> None:
    from rich.table import Table

    if result.same:
        out.print(f"{result.a} and {result.b}: same {result.unchanged} packages", markup=False)
        return
    table = Table(show_edge=False, pad_edge=False)
    for column in ("package", result.a, result.b, ""):
        table.add_column(column)
    for change in result.changed:
        table.add_row(change.name, change.before, change.after, "changed")
    for package in result.removed:
        table.add_row(package.name, package.version, "-", "[red]removed[/]")
    for package in result.added:
        table.add_row(package.name, "-", package.version, "[green]added[/]")
    out.print(table)
    out.print(
        f"{len(result.changed)} changed, {len(result.removed)} removed, {len(result.added)} added, "
        f"{result.unchanged} the same",
        markup=False,
    )


@exits("OK", "FAILED", "USAGE", "ENVIRONMENT", json=DOCUMENT)
@image.command("resolve")
@click.argument("names", nargs=-1, metavar="[NAME]...")
@resolver_timeout("pip")
@click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON document: a list, one report per image."
)
def resolve(names: tuple[str, ...], timeout_s: float, as_json: bool) -> None:
    """Before building: do the pins of each GPU manifest (default: every cuda one) install together
    for the image's platform (pip's resolver, dry run, linux x86_64, the image's Python and glibc, the
    indexes the build uses), and does the base image's CUDA meet what torch asks for?

    OK: every image resolves. FAILED: a conflict (pip refuses, a pin has no wheel, the base's CUDA
    is too old). ENVIRONMENT: not verified, an index could not be reached (the report says which,
    and what it checked instead; never a pass).
    """
    from concurrent.futures import ThreadPoolExecutor

    from kit.errors import InputError
    from kit.images.manifest import load_all, load_manifest
    from kit.images.pipconfig import pip_defaults
    from kit.images.resolve import resolve_image

    manifests = [load_manifest(n) for n in names] or [m for m in load_all() if m.flavor == "cuda"]
    for m in manifests:
        if (
            m.flavor != "cuda"
        ):  # it installs sglang --no-deps beside pinned light packages: nothing to resolve
            raise InputError(
                "NAME",
                f"{m.name} is a {m.flavor} image",
                "name a cuda manifest: kit image list shows each flavor",
            )
    cert = pip_defaults().cert
    with ThreadPoolExecutor(max_workers=max(1, len(manifests))) as pool:  # network-bound: in parallel
        reports = list(pool.map(lambda m: resolve_image(m, cert=cert, timeout_s=timeout_s), manifests))
    show(reports, as_json=as_json, human=_human_resolve)
    codes = {r.exit_code for r in reports}
    raise SystemExit(1 if 1 in codes else max(codes, default=0))


_RESOLVE_MARK = {
    "resolves": "[bold green]RESOLVES[/]",
    "conflict": "[bold red]CONFLICT[/]",
    "unverified": "[bold yellow]NOT VERIFIED[/]",
    "unreachable": "[bold yellow]NOT CHECKED[/]",
}


def _human_resolve(reports, out) -> None:
    from rich.markup import escape

    for r in reports:
        out.print(f"{_RESOLVE_MARK[r.status]} {r.image}: {escape(r.summary)}")
        out.print(
            f"  platform: linux x86_64, Python {r.python}, glibc {r.glibc} ({r.platforms[0]} .. "
            f"{r.platforms[-1]}); pip {r.pip_version}; {r.seconds:.0f} s",
            markup=False,
            highlight=False,
        )
        for probe in r.indexes:
            mark = "reached" if probe.reachable else "NOT REACHED"
            out.print(f"  index {probe.url}: {mark} ({probe.detail})", markup=False, highlight=False)
        if r.substituted:
            out.print("  checked instead (their index could not be reached):", markup=False, highlight=False)
        for line in r.substituted:
            out.print(f"    {line}", markup=False, highlight=False)
        for line in r.conflict + r.missing:
            out.print(f"  pip: {line}", markup=False, highlight=False)
        if r.cuda is not None:
            out.print(f"  CUDA: {r.cuda.detail}", markup=False, highlight=False)
        if r.resolved:
            key = {"torch", "torchvision", "sglang", "sglang-kernel", "flashinfer-python", "cuda-toolkit"}
            shown = ", ".join(f"{i.name} {i.version}" for i in r.resolved if i.name.lower() in key)
            out.print(f"  {len(r.resolved)} distributions; {shown}", markup=False, highlight=False)
        for note in r.notes:
            out.print(f"  note: {note}", markup=False, highlight=False, style="dim")


# `kit image lock` lives in its own module; the group adds it here, so naming `image` is enough to
# find it (and kit.cli.image_lock imports nothing from this module: no circle).
from kit.cli.image_lock import lock  # noqa: E402

image.add_command(lock)
