"""Before any container starts: resolve the launch and hold it against `kit validate`'s rules.

`kit up`, `kit smoke` and the pytest plugin call `prepare_launch`; a launch SGLang would refuse (TP
that does not divide the heads, a release rule, a known pitfall of severity error) ends here in well
under a second, as one line naming the finding and its fix (exit 2), with no container created.
The failing deployment's first crash was such a launch, found only after the container started.
"""

from __future__ import annotations

from collections.abc import Sequence

from kit.errors import InputError
from kit.launch import resolve, resolve_full
from kit.spec import LaunchSpec


def prepare_launch(
    target: str, *, image: str | None = None, overrides: Sequence[str] = (), validate: bool = True
) -> LaunchSpec:
    """The LaunchSpec, after validation unless `validate=False` (`--no-validate`).

    Raises InputError for bad input and for the first validation error (the rest are counted).
    """
    if not validate:
        return resolve(target, image=image, overrides=overrides)
    from kit.validate import findings_for  # imports the rules only when they are used

    resolved = resolve_full(target, image=image, overrides=overrides)
    findings, _ = findings_for(resolved)
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        first = errors[0]
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        fix = "; ".join(
            part
            for part in (
                first.fix,
                f"'kit validate {target}' lists every finding; --no-validate starts it anyway",
            )
            if part
        )
        raise InputError(first.id, f"{first.message}{more}", fix)
    return resolved.spec


def proxy_warnings(spec: LaunchSpec, client_env: dict[str, str]) -> list[str]:
    """`kit up`'s proxy check: the container gets the Docker client's configured proxies
    (`client_env`, ~/.docker/config.json) and then the target's env; warn when the server's own
    warm-up request would go to a proxy. Pure: the caller reads the client config."""
    from kit.validate import proxy_findings

    where = "the container's env (the target's env and ~/.docker/config.json proxies)"
    return [f"warning: {f.message}; fix: {f.fix}" for f in proxy_findings({**client_env, **spec.env}, where)]
