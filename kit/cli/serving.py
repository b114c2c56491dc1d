"""`--serve` and the probe's settings, shared by `kit up` and `kit watch`: one `serve` argument
(ServingLimits, or None without --serve) for the command (kit/startup/serving.py does the work)."""

from __future__ import annotations

import functools

import click

from kit.cli.params import FiniteFloat
from kit.errors import InputError


def serve_options(func):
    """Put directly above the command's function: it receives `serve` (ServingLimits | None)."""

    @functools.wraps(func)
    def wrapper(*args, serve, probe_every, probe_timeout, probe_budget, **kwargs):
        if not serve:
            _refuse_probes_without_serve(click.get_current_context())
        return func(*args, serve=serving_limits(serve, probe_every, probe_timeout, probe_budget), **kwargs)

    seconds = FiniteFloat(example="10")  # nan and inf refused (a probe every nan s never runs)
    for name, default, help in (
        ("--probe-budget", 5.0, "With --serve: a probe slower than this is DEGRADED."),
        ("--probe-timeout", 25.0, "With --serve: a probe unanswered this long, nothing served, is HUNG."),
        ("--probe-every", 10.0, "With --serve: seconds between probes (SGLang's /health_generate)."),
    ):
        wrapper = click.option(
            name, type=seconds, default=default, show_default=True, metavar="SECONDS", help=help
        )(wrapper)
    return click.option(
        "--serve",
        is_flag=True,
        help="After READY keep watching the server while it serves (docs/serving.md): HUNG and CRASHED "
        "write a bundle and end the watch with that verdict; Ctrl-C or SIGTERM ends the watch.",
    )(wrapper)


def _refuse_probes_without_serve(ctx: click.Context) -> None:
    """A probe setting given without --serve would be ignored without a word: a usage error."""
    from click.core import ParameterSource

    for name in ("probe_every", "probe_timeout", "probe_budget"):
        if ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT):
            flag = "--" + name.replace("_", "-")
            raise InputError(
                flag, f"{flag} sets the probe of --serve, which is not given", f"add --serve, or drop {flag}"
            )


def serving_limits(serve: bool, every: float, timeout: float, budget: float):
    """The probe's settings as ServingLimits; a budget at or over the deadline is a usage error."""
    from kit.logs.serving import ServingLimits

    if not serve:
        return None
    if budget >= timeout:
        raise InputError(
            "--probe-budget", f"{budget:g} s is not below --probe-timeout {timeout:g} s", "lower it"
        )
    return ServingLimits(probe_every_s=every, probe_timeout_s=timeout, probe_budget_s=budget)
