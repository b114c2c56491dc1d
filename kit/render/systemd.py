"""LaunchSpec -> a systemd unit that runs the server container (the failing deployment used systemd).

The container is the one `kit render docker` prints (SYS_PTRACE, the compile-cache volume, GPUs the
way it is given), run in the foreground so systemd sees it stop; HF_TOKEN (and the API key of a
server published beyond loopback) come from an optional EnvironmentFile, never from the unit.
"""

from __future__ import annotations

import re

from kit.render.docker import docker_run_argv
from kit.runtime.engine import LABEL_RESTART
from kit.runtime.host.gpus import GpuWay
from kit.spec import PHASES, LaunchSpec


def unit_name(spec: LaunchSpec) -> str:
    return f"kit-{spec.target}"


_BARE = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")


def _systemd_quote(arg: str) -> str:
    """One argument as systemd's ExecStart reads it: bare when plain, else double-quoted with C-style
    escapes (systemd unescapes backslashes inside quotes too: a shell's 'a\\' would swallow the
    quote). systemd expands %specifiers and $VARIABLES; the argv means them literally."""
    text = arg if _BARE.match(arg) else '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text.replace("%", "%%").replace("$", "$$")


def render_systemd(
    spec: LaunchSpec,
    *,
    docker: str = "/usr/bin/docker",
    env_file: str | None = None,
    way: GpuWay | None = None,
) -> str:
    from kit.render._values import require_one_line

    require_one_line(spec, "a systemd unit")
    name = unit_name(spec)
    argv = docker_run_argv(spec, name=name, host_port=spec.port, way=way)
    argv.remove("-d")  # systemd supervises the foreground process
    # systemd replaces the container by name after a crash (Restart= below): the label tells
    # `kit watch` to follow the next launch attempt rather than end at the first crash.
    first_label = argv.index("--label")
    argv[first_label:first_label] = ["--label", f"{LABEL_RESTART}=on-failure"]
    exec_start = " \\\n    ".join(_wrapped(argv, docker))
    env_file = env_file or f"/etc/kit/{spec.target}.env"
    # systemd must not kill a start-up that is still inside the profile's deadlines.
    start_budget = int(sum(spec.timing.deadlines[phase] for phase in PHASES))
    from kit.render.sglang import dialect_line

    secrets = [key for key in spec.pass_env if key != spec.api_key_env]
    put = " and ".join(f"{key}=..." for key in [*secrets, *([spec.api_key_env] if spec.api_key_env else [])])
    lines = [
        f"# {name}.service, from `kit render systemd`: {spec.target} on {spec.image_ref}",
        f"# {dialect_line(spec)}",
        *(f"# {note}" for note in spec.notes),
        f"# Install: copy to /etc/systemd/system/{name}.service"
        + (f"; put {put} in {env_file} (mode 600)." if put else "."),
        "[Unit]",
        f"Description=SGLang {spec.target} ({spec.model}, profile {spec.profile}) in Docker",
        "After=docker.service network-online.target",
        "Requires=docker.service",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=simple",
        f"EnvironmentFile=-{env_file}",
        f"ExecStartPre=-{docker} rm -f {name}",
        f"ExecStart={exec_start}",
        f"ExecStop={docker} stop -t 60 {name}",
        "Restart=on-failure",
        "RestartSec=30",
        f"TimeoutStartSec={start_budget}",
        "TimeoutStopSec=90",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(lines) + "\n"


def _wrapped(argv: list[str], docker: str) -> list[str]:
    """One option (with its value) per continued line, the server argv likewise."""
    parts = [docker, *argv[1:]]
    out: list[str] = []
    i = 0
    while i < len(parts):
        item = _systemd_quote(parts[i])
        if parts[i].startswith("-") and i + 1 < len(parts) and not parts[i + 1].startswith("-") and i > 1:
            out.append(f"{item} {_systemd_quote(parts[i + 1])}")
            i += 2
        else:
            out.append(item)
            i += 1
    return out


def watcher_unit_name(spec: LaunchSpec) -> str:
    return f"{unit_name(spec)}-watch"


def render_systemd_watcher(spec: LaunchSpec, *, kit: str = "/usr/local/bin/kit") -> str:
    """The companion unit: `kit watch --serve` on the server unit's container (docs/serving.md).

    It watches the container by name rather than with `--unit`: the server unit's main process is
    the docker client, and the server's ranks live in the container. It never stops the server; on
    HUNG or CRASHED it writes a bundle under /var/lib/kit (StateDirectory) and exits 4 / 1, and
    systemd starts it again to watch the server's next run."""
    name = unit_name(spec)
    argv = [kit, "watch", name, "--target", spec.target, "--serve"]
    lines = [
        f"# {watcher_unit_name(spec)}.service, from `kit render systemd --watcher`: watches {name}.service",
        f"# Install beside {name}.service: copy to /etc/systemd/system/; bundles in /var/lib/kit/bundles.",
        "[Unit]",
        f"Description=kit watch --serve for {name} (HUNG and CRASHED bundles)",
        f"After={name}.service",
        f"PartOf={name}.service",
        "",
        "[Service]",
        "Type=simple",
        "StateDirectory=kit",
        "Environment=KIT_CACHE_DIR=/var/lib/kit",
        # The container may not exist yet (the server unit removes and starts it): try again.
        f"ExecStart={' '.join(_systemd_quote(arg) for arg in argv)}",
        "Restart=always",
        "RestartSec=30",
        "",
        "[Install]",
        f"WantedBy={name}.service",
    ]
    return "\n".join(lines) + "\n"
