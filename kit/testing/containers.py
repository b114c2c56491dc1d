"""testcontainers for the kit: a LaunchSpec as a DockerContainer, and readiness from the kit's own
phase tracker as a testcontainers wait strategy (composable with theirs, no sleeps)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from testcontainers.core.container import DockerContainer
from testcontainers.core.waiting_utils import WaitStrategy, WaitStrategyTarget

from kit.logs import PhaseLimits
from kit.render.docker import run_kwargs
from kit.runtime import server as runtime
from kit.runtime.engine import LABEL_SESSION
from kit.spec import LaunchSpec, client_host
from kit.startup.overrun import DeadlinePolicy
from kit.startup.result import UpResult, verdict_lines
from kit.startup.up import follow_container


class KitStartupFailed(AssertionError):
    """The server did not become ready; carries the kit's verdict, timeline and evidence."""

    def __init__(self, result: UpResult):
        super().__init__("\n".join(verdict_lines(result)))
        self.result = result


@dataclass
class KitStartupWaitStrategy(WaitStrategy):
    """Ready when the kit's tracker says READY; fails fast with HUNG/CRASHED/DEADLINE verdicts.

    `expect_ready=False` is for planted faults: it returns the verdict instead of raising.
    """

    spec: LaunchSpec
    limits: PhaseLimits
    expect_ready: bool = True
    result: UpResult | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        super().__init__()

    def wait_until_ready(self, container: WaitStrategyTarget) -> None:
        wrapped = container.get_wrapped_container()
        session = wrapped.labels.get(LABEL_SESSION, runtime.new_session_id())
        # A passed deadline fails the test: here the deadline is the assertion (kit up follows on).
        self.result = follow_container(
            wrapped,
            self.spec,
            self.limits,
            session=session,
            first_token=False,
            deadline_policy=DeadlinePolicy.VERDICT,
        )
        if self.expect_ready and self.result.verdict != "ready":
            raise KitStartupFailed(self.result)


def server_url(wrapped, spec: LaunchSpec) -> str:
    """The server's URL on 127.0.0.1 (or the address it is published on). Not testcontainers' host
    name: 'localhost' can resolve to ::1 first, where nothing listens."""
    return f"http://{client_host(spec.publish_address)}:{runtime.published_port(wrapped, spec.port)}"


def kit_container(spec: LaunchSpec, *, session: str, fault: str | None = None) -> DockerContainer:
    """The target's container as testcontainers sees it, labelled for cleanup by session."""
    kwargs = run_kwargs(
        spec,
        name=f"kit-{spec.target}-{session}-{int(time.time() * 1000) % 100000}",
        environment=runtime.server_environment(spec, fault),
        labels={**runtime.run_labels(), LABEL_SESSION: session},
        diagnose=True,
    )
    container = DockerContainer(kwargs.pop("image"), command=kwargs.pop("command"), name=kwargs.pop("name"))
    container.with_envs(**kwargs.pop("environment"))
    for port, binding in kwargs.pop("ports").items():
        # spec.publish_address only: testcontainers' with_bind_ports would publish on every interface.
        container.ports[port] = binding
    for host, mount in kwargs.pop("volumes", {}).items():
        container.with_volume_mapping(host, mount["bind"], mount["mode"])
    kwargs.pop("detach", None)
    return container.with_kwargs(**kwargs)
