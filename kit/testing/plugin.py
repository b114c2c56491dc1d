"""The kit's pytest plugin (entry point `kit`): smoke-test SGLang servers started by the kit.

Fixtures
    kit_server   session-scoped: the target's container started with testcontainers, ready per the
                 kit's own phase tracker (no sleeps); parametrise it indirectly with target names.
    kit_launch   a factory that starts a target (optionally with a planted fault) and returns the
                 kit's verdict; the container is always removed.
Options
    --kit-target, --kit-image, --kit-set KEY=VALUE, --kit-deadline STAGE=S, --kit-stall STAGE=S,
    --kit-keep (leave containers for inspection), --kit-no-validate (start a launch that
    `kit validate` rejects), --kit-require-gpu (or KIT_REQUIRE_GPU=1: a skipped `gpu` test fails,
    so a GPU runner cannot go green having tested nothing)
Markers
    docker (needs an engine), gpu (needs NVIDIA GPUs; a test that needs the GPU image is marked docker
    too, one marked gpu alone runs on a bare GPU host) and full_model (needs NVIDIA GPUs and a production
    model's weights in the HF cache: the nightly GPU workflow's tests): tests skip with a reason naming
    what is missing. A failing test's report shows the kit's timeline, verdict and log tail; phase
    durations and first-token times become JUnit properties.

The plugin waits to be asked: it is loaded in every pytest session of an environment where the kit
is installed (entry point `kit`), so until a test of this session uses a kit fixture or a `docker`
marker it touches no Docker engine, pulls nothing and sets no process-wide variable (a `gpu` marker
asks NVML only). A `docker` marker asks the engine whether it answers (for the skip reason); a kit
fixture, just before its first container, decides about the reaper; the end-of-session cleanup runs
only in a session whose fixtures started containers.

Containers carry the label io.kit.session=<this run> and are removed by label at the end. On top,
testcontainers' Ryuk reaper (which also removes them if pytest itself is killed) stays on wherever its
image is present or can be pulled; where no registry answers it is switched off for this process
(testcontainers' own setting, not an environment variable), and the label cleanup is what remains.
TESTCONTAINERS_RYUK_DISABLED (or ryuk.disabled in ~/.testcontainers.properties) set by you always wins.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from dataclasses import dataclass, field

import pytest

_SESSION = secrets.token_hex(4)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kit", "the kit: SGLang servers in containers")
    group.addoption("--kit-target", default=None, help="Catalog target when a test does not choose one.")
    group.addoption("--kit-image", default=None, help="Image manifest (default: the target's).")
    group.addoption("--kit-set", action="append", default=[], metavar="KEY=VALUE", help="Profile override.")
    group.addoption("--kit-deadline", action="append", default=[], metavar="STAGE=SECONDS")
    group.addoption("--kit-stall", action="append", default=[], metavar="STAGE=SECONDS")
    group.addoption("--kit-keep", action="store_true", help="Leave the kit's containers afterwards.")
    group.addoption(
        "--kit-no-validate", action="store_true", help="Start launches that `kit validate` rejects."
    )
    group.addoption(
        "--kit-require-gpu",
        action="store_true",
        default=os.environ.get("KIT_REQUIRE_GPU", "") not in ("", "0", "false"),
        help="A skipped `gpu` test is a failure (default from KIT_REQUIRE_GPU).",
    )


# Set by a kit fixture just before its first container: the session's cleanup and the reaper
# decision are owed only then. Nothing else may act at configure time (see the module's doc).
_STARTED = pytest.StashKey[bool]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "docker: needs a running Docker engine")
    config.addinivalue_line("markers", "gpu: needs NVIDIA GPUs (with `docker` too: and the GPU image)")
    config.addinivalue_line(
        "markers", "full_model: needs NVIDIA GPUs and a production model's weights (the nightly workflow)"
    )


def needs_gpu(item: pytest.Item) -> bool:
    """gpu or full_model: skips without GPUs, and fails that way under --kit-require-gpu."""
    return bool(item.get_closest_marker("gpu") or item.get_closest_marker("full_model"))


def _engage(config: pytest.Config) -> None:
    """Once per session, before the first container a kit fixture starts: keep testcontainers'
    reaper where it can run, else switch it off for this process. The user's own setting wins."""
    if config.stash.get(_STARTED, False):
        return
    config.stash[_STARTED] = True
    from testcontainers.core.config import testcontainers_config

    if "TESTCONTAINERS_RYUK_DISABLED" in os.environ or "ryuk.disabled" in testcontainers_config.tc_properties:
        return
    testcontainers_config.ryuk_disabled = not ryuk_available()


def ryuk_available() -> bool:
    """Can testcontainers' reaper run here: its image present, or pulled now (fails fast offline)?"""
    try:
        from docker.errors import ImageNotFound
        from testcontainers.core.config import testcontainers_config

        from kit.runtime.engine import client

        engine = client()
        image = testcontainers_config.ryuk_image
        try:
            engine.images.get(image)
        except ImageNotFound:
            engine.images.pull(image)
    except Exception:  # no engine, no registry, no such image: the label cleanup stands alone
        return False
    return True


def docker_missing() -> str | None:
    """Why no Docker engine can be used, or None."""
    try:
        from kit.runtime.engine import client

        client()
    except Exception as exc:  # any failure to reach it is a reason to skip
        return f"no Docker engine answers ({type(exc).__name__}: {str(exc)[:80]})"
    return None


def gpu_missing() -> str | None:
    """Why no NVIDIA GPU can be used, or None."""
    from kit.runtime.nvml import nvml_missing

    reason = nvml_missing()
    return None if reason is None else f"no NVIDIA GPU: {reason}"


@pytest.hookimpl(tryfirst=True)  # before fixtures start containers
def pytest_runtest_setup(item: pytest.Item) -> None:
    if needs_gpu(item):
        reason = gpu_missing()
        if reason:
            pytest.skip(reason)
    # A gpu test that needs the GPU image is marked docker too; one without it runs on a bare GPU
    # host with no engine (tests/runtime/test_gpu_host.py).
    if item.get_closest_marker("docker"):
        reason = docker_missing()
        if reason:
            pytest.skip(reason)


@dataclass
class KitServer:
    """A started server: its spec, URL, the kit's start-up result, and measurements for JUnit."""

    spec: object
    limits: object
    container: object
    result: object
    url: str
    measurements: dict[str, float] = field(default_factory=dict)

    def record(self, name: str, seconds: float | None) -> None:
        if seconds is not None:
            self.measurements[name] = round(seconds, 4)

    def logs(self, tail: int = 40) -> str:
        from kit.runtime.server import logs_text

        return logs_text(self.container.get_wrapped_container(), tail=tail)


def _resolve(config: pytest.Config, param):
    """param: a target name, or (target, overrides) for a start with --set overrides of its own."""
    from kit.errors import InputError
    from kit.model import require_model
    from kit.runtime.engine import image_exists
    from kit.startup import limits_from_spec, parse_limit_overrides
    from kit.startup.prepare import prepare_launch

    target, own = (param[0], tuple(param[1])) if isinstance(param, tuple | list) else (param, ())
    target = target or config.getoption("--kit-target") or "tiny"
    try:
        spec = prepare_launch(
            target,
            image=config.getoption("--kit-image"),
            overrides=(*config.getoption("--kit-set"), *own),
            validate=not config.getoption("--kit-no-validate"),
        )
    except InputError as exc:  # a launch SGLang would refuse: no container, one line
        pytest.fail(f"kit: {exc.one_line()}", pytrace=False)
    limits = limits_from_spec(
        spec,
        deadlines=parse_limit_overrides(config.getoption("--kit-deadline"), "--kit-deadline"),
        stall_windows=parse_limit_overrides(config.getoption("--kit-stall"), "--kit-stall"),
    )
    if not image_exists(spec.image_ref):
        pytest.skip(f"image {spec.image_ref} not built (run 'kit image build {spec.image}')")
    try:
        require_model(spec)  # no container for a model that is not (all) there
    except InputError as exc:
        pytest.skip(exc.one_line())
    return spec, limits


def _start(config: pytest.Config, spec, limits, *, fault: str | None, expect_ready: bool):
    from kit.testing.containers import KitStartupFailed, KitStartupWaitStrategy, kit_container

    _engage(config)
    strategy = KitStartupWaitStrategy(spec, limits, expect_ready=expect_ready)
    container = kit_container(spec, session=_SESSION, fault=fault).waiting_for(strategy)
    try:
        container.start()
    except KitStartupFailed as exc:
        if not config.getoption("--kit-keep"):
            container.stop()
        pytest.fail(f"{spec.target} did not start:\n{exc}", pytrace=False)
    except BaseException:
        container.stop()
        raise
    return container, strategy.result


def _stop(container) -> None:
    """Remove a container; one already gone (removed by hand, `kit down --all`) is not an error."""
    from docker.errors import NotFound

    with contextlib.suppress(NotFound):
        container.stop()


@pytest.fixture(scope="session")
def kit_server(request: pytest.FixtureRequest):
    """The target's server, started once per target for the whole session."""
    config = request.config
    spec, limits = _resolve(config, getattr(request, "param", None))
    container, result = _start(config, spec, limits, fault=None, expect_ready=True)
    from kit.testing.containers import server_url

    url = server_url(container.get_wrapped_container(), spec)
    server = KitServer(spec, limits, container, result, url)
    server.record("startup_s", result.startup_s)
    for span in result.timeline:
        if span.rank != "main":
            key = f"phase.{span.phase}_s"
            server.measurements[key] = max(server.measurements.get(key, 0.0), span.elapsed_s)
    yield server
    if not config.getoption("--kit-keep"):
        _stop(container)


@pytest.fixture
def kit_launch(request: pytest.FixtureRequest):
    """launch(target=None, *, fault=None, expect_ready=False) -> UpResult; the container is removed."""
    config = request.config
    runs: list = []

    def launch(target: str | None = None, *, fault: str | None = None, expect_ready: bool = False):
        spec, limits = _resolve(config, target)
        container, result = _start(config, spec, limits, fault=fault, expect_ready=expect_ready)
        runs.append(result)
        if not config.getoption("--kit-keep"):
            _stop(container)
        return result, limits

    launch.runs = runs  # type: ignore[attr-defined]
    yield launch


def _report_sections(item: pytest.Item) -> list[tuple[str, str]]:
    from kit.startup.result import verdict_lines

    sections: list[tuple[str, str]] = []
    server = item.funcargs.get("kit_server") if hasattr(item, "funcargs") else None
    results = []
    if isinstance(server, KitServer):
        results.append(server.result)
    launch = item.funcargs.get("kit_launch") if hasattr(item, "funcargs") else None
    results.extend(getattr(launch, "runs", []))
    for result in results:
        timeline = "\n".join(
            f"{s.rank:8} {s.phase:8} start {s.start_s:7.1f} s  {s.elapsed_s:7.1f} s"
            + ("  (open)" if s.open else "")
            for s in result.timeline
        )
        sections.append((f"kit {result.target}: verdict", "\n".join(verdict_lines(result))))
        sections.append((f"kit {result.target}: phase timeline", timeline or "(no phase reached)"))
    if isinstance(server, KitServer):
        sections.append((f"kit {server.spec.target}: log tail", server.logs()))
    return sections


def skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    server = getattr(item, "funcargs", {}).get("kit_server")
    if call.when == "call" and isinstance(server, KitServer):
        for name, value in sorted(server.measurements.items()):
            if (f"kit.{name}", value) not in item.user_properties:
                item.user_properties.append((f"kit.{name}", value))
    outcome = yield
    report = outcome.get_result()
    if report.skipped and needs_gpu(item) and item.config.getoption("--kit-require-gpu"):
        report.outcome = "failed"
        report.longrepr = f"a gpu test skipped under --kit-require-gpu: {skip_reason(report)}"
    if report.failed and call.when == "call":
        for title, text in _report_sections(item):
            report.sections.append((title, text))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Remove what this run started, by label, even after a crash mid-test. A session whose kit
    fixtures started nothing has nothing to remove and asks the engine nothing."""
    if not session.config.stash.get(_STARTED, False):
        return
    if session.config.getoption("--kit-keep", default=False) or docker_missing():
        return
    from kit.runtime.server import kit_containers, remove

    for container in kit_containers(session=_SESSION):
        remove(container)
