"""`kit image lock`: write an image's lock from its manifest, or check that the lock still holds."""

from __future__ import annotations

import click

from kit.cli.exits import exits
from kit.cli.params import resolver_timeout
from kit.output import console, err_console


@exits("OK", "FAILED", "USAGE", "ENVIRONMENT")
@click.command("lock")
@click.argument("names", nargs=-1, metavar="[NAME]...")
@click.option(
    "--check",
    is_flag=True,
    help="Write nothing: does images/NAME.lock still satisfy images/NAME.toml (pins, platform, "
    "Python, indexes, CUDA minor, a hash for every package)? No network.",
)
@resolver_timeout("uv")
def lock(names: tuple[str, ...], check: bool, timeout_s: float) -> None:
    """Resolve images/NAME.toml (default: every manifest) into images/NAME.lock with uv, for the
    image's platform and Python, every file with its hash, and print what changed (package, old ->
    new). The Dockerfile installs the lock and nothing else.

    OK: written (or, with --check, every lock satisfies its manifest). FAILED: --check found a lock
    that no longer satisfies its manifest (each package named). ENVIRONMENT: an index could not be
    reached, or uv is missing; the old lock is left as it was.
    """
    from kit.errors import CheckFailed, EnvironmentProblem
    from kit.images.image_lock import check_file, relock
    from kit.images.manifest import list_manifests, load_manifest

    manifests = [load_manifest(n) for n in names or list_manifests()]
    if check:
        failed = []
        for manifest in manifests:
            problems, count = check_file(manifest)
            if problems:
                failed.append(manifest.name)
                mark = "NO LOCK" if count == 0 else "STALE"
                console().print(f"[bold red]{mark}[/] images/{manifest.name}.lock:", highlight=False)
                for p in problems:
                    console().print(f"  {p.package}: {p.detail}", markup=False, highlight=False)
            else:
                console().print(
                    f"[green]ok[/] images/{manifest.name}.lock satisfies its manifest ({count} packages, "
                    "every one hashed)",
                    highlight=False,
                )
        if failed:
            raise CheckFailed(
                f"{len(failed)} lock(s) no longer satisfy their manifest: {', '.join(failed)}",
                hint="run 'kit image lock NAME' to relock, and commit the lock with the manifest",
            )
        return
    unreachable = []
    for manifest in manifests:
        try:
            written = relock(manifest, timeout_s=timeout_s)
        except EnvironmentProblem as exc:
            unreachable.append(manifest.name)
            err_console().print(
                f"{manifest.name}: not locked: {exc.one_line()}", markup=False, highlight=False
            )
            continue
        console().print(f"[bold]images/{written.path.name}[/]: {written.summary}", highlight=False)
        for line in written.lines:
            console().print(f"  {line}", markup=False, highlight=False)
    if unreachable:
        raise EnvironmentProblem(
            f"not locked: {', '.join(unreachable)} (an index could not be reached)",
            hint="their old locks are left as they were; relock where the index answers",
        )
