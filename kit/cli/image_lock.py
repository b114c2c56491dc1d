"""`kit image lock`: write an image's lock from its manifest, or check that the lock still holds."""

from __future__ import annotations

import click

from kit.cli.exits import exits
from kit.cli.params import Line, resolver_timeout
from kit.output import console, err_console


@exits("OK", "FAILED", "USAGE", "ENVIRONMENT")
@click.command("lock")
@click.argument("names", nargs=-1, metavar="[NAME]...")
@click.option(
    "--check",
    is_flag=True,
    help="Write nothing: does images/NAME.lock still satisfy images/NAME.toml (pins, platform, "
    "Python, indexes, CUDA minor, a hash for every package, the base and the named system packages)? "
    "No network. A manifest without a lock is reported as such, not as a failure.",
)
@click.option(
    "--system",
    is_flag=True,
    help="Record the system part instead: the base the image was built on and every Debian/Ubuntu "
    "package in its dpkg database, read from the built image (no process runs in it).",
)
@click.option(
    "--image",
    "image_ref",
    type=Line(),
    metavar="REF",
    help="With --system and one NAME: read this built image instead of kit/sglang:NAME.",
)
@resolver_timeout("uv")
def lock(names: tuple[str, ...], check: bool, system: bool, image_ref: str | None, timeout_s: float) -> None:
    """Resolve images/NAME.toml (default: every manifest) into images/NAME.lock with uv, for the
    image's platform and Python, every file with its hash, and print what changed (package, old ->
    new). The Dockerfile installs the lock and nothing else. With --system, the lock's system part
    (base, every system package and version, the lock's date) is read from the built image.

    OK: written (or, with --check, every lock there is satisfies its manifest). FAILED: --check found
    a lock that no longer satisfies its manifest (each package named). ENVIRONMENT: an index could
    not be reached, uv is missing, or (--system) the image is not built; the old lock is left as it was.
    """
    from kit.errors import InputError
    from kit.images.manifest import list_manifests, load_manifest

    if check and system:
        raise InputError("--system", "cannot be combined with --check", "--check checks both parts")
    if image_ref and not (system and len(names) == 1):
        raise InputError(
            "--image", "needs --system and exactly one NAME", "kit image lock NAME --system --image REF"
        )
    manifests = [load_manifest(n) for n in names or list_manifests()]
    if check:
        _check(manifests)
    elif system:
        _lock_system(manifests, image_ref)
    else:
        _relock(manifests, timeout_s)


def _check(manifests) -> None:
    from kit.errors import CheckFailed
    from kit.images.image_lock import check_file

    stale = []
    for manifest in manifests:
        checked = check_file(manifest)
        where = f"images/{manifest.name}.lock"
        if checked.status == "no lock":
            console().print(f"[yellow]NO LOCK[/] {where}: {checked.why}", highlight=False)
        elif checked.problems:
            stale.append(manifest.name)
            console().print(f"[bold red]STALE[/] {where}:", highlight=False)
            for p in checked.problems:
                console().print(f"  {p.package}: {p.detail}", markup=False, highlight=False)
        else:
            console().print(
                f"[green]ok[/] {where} satisfies its manifest ({checked.summary})", highlight=False
            )
    if stale:
        raise CheckFailed(
            f"{len(stale)} lock(s) no longer satisfy their manifest: {', '.join(stale)}",
            hint="run 'kit image lock NAME' to relock, and commit the lock with the manifest",
        )


def _lock_system(manifests, image_ref: str | None) -> None:
    from kit.images.system_lock import lock_system

    def write(manifest) -> tuple[str, tuple[str, ...]]:
        written = lock_system(manifest, image_ref)
        head = (
            f"[bold]{written.path}[/]: {written.packages} system packages; base {written.base}; "
            f"snapshot {written.snapshot}"
        )
        return head, written.changes

    _each(manifests, write, "system part not recorded", "build the image here first (kit image build NAME)")


def _relock(manifests, timeout_s: float) -> None:
    from kit.images.image_lock import relock

    def write(manifest) -> tuple[str, tuple[str, ...]]:
        written = relock(manifest, timeout_s=timeout_s)
        return f"[bold]images/{written.path.name}[/]: {written.summary}", written.lines

    _each(manifests, write, "not locked", "relock where the index answers")


def _each(manifests, write, refused: str, hint: str) -> None:
    """Write each manifest's lock, printing what changed; one whose machine lacks something (an index,
    the built image) is named and left as it was, and the command ends ENVIRONMENT."""
    from kit.errors import EnvironmentProblem

    missing = []
    for manifest in manifests:
        try:
            head, lines = write(manifest)
        except EnvironmentProblem as exc:
            missing.append(manifest.name)
            err_console().print(
                f"{manifest.name}: {refused}: {exc.one_line()}", markup=False, highlight=False
            )
            continue
        console().print(head, highlight=False)
        for line in lines:
            console().print(f"  {line}", markup=False, highlight=False)
    if missing:
        raise EnvironmentProblem(
            f"{refused}: {', '.join(missing)}", hint=f"{hint}; the old locks are left as they were"
        )
