"""Values rendered into files: a control character is refused by every renderer (one test each), and
random printable values render into files each renderer's own validator accepts, the value intact:
`systemd-analyze verify` for the unit, `docker compose config` (no engine needed) for Compose, YAML
read back for LWS (the repository carries no LWS schema; the Compose schema test is in test_render.py)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml
from catalog_helpers import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kit.errors import InputError
from kit.launch import resolve
from kit.render.compose import render_compose
from kit.render.docker import docker_run_argv
from kit.render.lws import render_lws
from kit.render.systemd import render_systemd

RENDERERS = {
    "systemd": lambda spec: render_systemd(spec),
    "compose": lambda spec: render_compose([spec]),
    "lws": lambda spec: render_lws(spec),
    "docker": lambda spec: docker_run_argv(spec),
}
INJECTED = "1\nExecStartPre=/bin/true"


def _with_env(value: str):
    """qwen-base with env A=VALUE set behind --set's back (as a hand-edited catalog file would)."""
    spec = resolve("qwen-base")
    return spec.model_copy(update={"env": {**spec.env, "A": value}})


@pytest.mark.parametrize("renderer", sorted(RENDERERS))
@pytest.mark.parametrize("bad", [INJECTED, "a\rb", "a\x1b]0;title\x07", "a\x00b", "a\tb"])
def test_every_renderer_refuses_a_control_character(renderer, bad):
    with pytest.raises(InputError) as info:
        RENDERERS[renderer](_with_env(bad))
    assert info.value.one_line().startswith("env.A: a control character")


@pytest.mark.parametrize("renderer", sorted(RENDERERS))
def test_an_argument_with_a_newline_is_refused_too(renderer):
    spec = resolve("qwen-base")
    spec = spec.model_copy(update={"argv": (*spec.argv, "--served-model-name", "x\nExecStartPre=/bin/true")})
    with pytest.raises(InputError, match=r"^argv\[\d+\]"):
        RENDERERS[renderer](spec)


@pytest.mark.parametrize("kind", ["systemd", "compose", "lws", "docker", "sglang"])
def test_the_cli_refuses_the_injection_before_rendering(kind):
    code, out, err = run_cli(["render", kind, "qwen-base", "--set", f"env.A={INJECTED}"])
    assert (code, out) == (2, "")
    assert err.startswith("kit: error: --set env.A: a control character") and err.count("\n") == 1


# Printable text as a person would put into an env value: quotes, $, %, backslashes, spaces, unicode.
values = st.text(
    alphabet=st.characters(
        blacklist_categories=("Cc", "Cs", "Cn", "Co", "Zl", "Zp", "Cf"), max_codepoint=0x2FFF
    ),
    min_size=1,
    max_size=24,
).filter(lambda v: v.isprintable() and v.strip() == v and v.lower() != "none")


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=values)
def test_random_values_make_units_systemd_analyze_verify_accepts(tmp_path, value):
    unit = tmp_path / "kit-qwen-base.service"
    unit.write_text(render_systemd(resolve("qwen-base", overrides=[f"env.A={value}"])), encoding="utf-8")
    run = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0 and "ignoring" not in run.stderr, run.stderr
    assert unit.read_text(encoding="utf-8").count("\nExec") == 3  # ExecStartPre, ExecStart, ExecStop


def _compose_cli() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30).returncode == 0


@pytest.mark.skipif(not _compose_cli(), reason="the docker compose plugin is not installed")
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=values)
def test_random_values_make_compose_files_docker_compose_config_accepts(tmp_path, value):
    path = tmp_path / "compose.yaml"
    path.write_text(render_compose([resolve("qwen-base", overrides=[f"env.A={value}"])]), encoding="utf-8")
    run = subprocess.run(
        ["docker", "compose", "-f", str(path), "--profile", "*", "config", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    import json

    service = next(iter(json.loads(run.stdout)["services"].values()))
    # Compose read back exactly what was set (its config output escapes `$` again, as `$$`)
    assert service["environment"]["A"] == value.replace("$", "$$")


@settings(max_examples=40, deadline=None)
@given(value=values)
def test_random_values_read_back_from_lws_yaml_unchanged(value):
    documents = list(yaml.safe_load_all(render_lws(resolve("qwen-base", overrides=[f"env.A={value}"]))))
    found = [e["value"] for doc in documents for e in _walk_env(doc) if e.get("name") == "A"]
    assert found and all(v == value for v in found)


def _walk_env(node):
    if isinstance(node, dict):
        if isinstance(node.get("env"), list):
            yield from (e for e in node["env"] if isinstance(e, dict))
        for child in node.values():
            yield from _walk_env(child)
    elif isinstance(node, list):
        for child in node:
            yield from _walk_env(child)
