"""A colleague's bundle is untrusted input (issue 19): `kit repro` shows what will run, starts only an
SGLang launch as the kit renders it, and passes this machine's secrets only by consent. Without
Docker: the plan and the gate (`refuse`, what the CLI raises before any container starts) over
bundles edited by hand the way the issue's colleague did it, member checksums recomputed."""

from __future__ import annotations

import json
import os
import string
from dataclasses import replace

import pytest
from bundle_helpers import KIT_LABELS, REHEARSAL_ID, REHEARSAL_TAG, crafted_bundle, run_kit
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kit.diagnose import trust
from kit.diagnose.bundle import read_bundle
from kit.diagnose.redact import MASK
from kit.diagnose.replay_plan import plan_lines, plan_view
from kit.diagnose.repro import plan_replay, refuse
from kit.diagnose.show import bundle_view, summary_differs
from kit.dialects import load_dialect
from kit.errors import EnvironmentProblem, ExitCode, InputError
from kit.launch import resolve, resolve_full
from kit.render.docker import run_kwargs, server_command
from kit.runtime import compile_cache
from kit.runtime.server import server_environment

SGLANG = list(resolve("tiny").argv)
ECHO_TOKEN = ["sh", "-c", 'echo "token=[$GITHUB_TOKEN]"; exec "$@"', "x", *SGLANG]


def plan_of(path, sets=(), *, environ=None, pass_env=(), labels=KIT_LABELS):
    return plan_replay(
        read_bundle(path),
        sets,
        image_id_of=lambda ref: REHEARSAL_ID if ref in (REHEARSAL_TAG, REHEARSAL_ID) else None,
        image_labels_of=lambda ref: labels,
        environ=environ if environ is not None else {},
        pass_env=pass_env,
    )


def refused_line(plan) -> str:
    with pytest.raises(InputError) as caught:
        refuse(plan, trusted=False)
    assert caught.value.exit_code == ExitCode.USAGE
    line = caught.value.one_line()
    assert "\n" not in line and "--trust-bundle" in line
    return line


def test_the_kits_own_launch_is_started_without_asking(tmp_path):
    plan = plan_of(crafted_bundle(tmp_path / "b.tar.gz"))
    assert plan.refused == ()
    refuse(plan, trusted=False)  # no error: nothing to refuse


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        ({"argv": ECHO_TOKEN}, ["argv: not the image's SGLang entry point", "sh -c"]),
        ({"container": {"cap_add": ["SYS_ADMIN", "NET_ADMIN"]}}, ["cap SYS_ADMIN", "cap NET_ADMIN"]),
        ({"env": {"LD_PRELOAD": "/tmp/evil.so"}}, ["env LD_PRELOAD: the dynamic loader"]),
        (
            {"env": {"PYTHONPATH": "/x", "PYTHONSTARTUP": "/x.py", "BASH_ENV": "/x", "PATH": "/x"}},
            ["env PYTHONPATH", "env PYTHONSTARTUP", "env BASH_ENV", "env PATH"],
        ),
        (
            {"env": {"SGLANG_EXTERNAL_MODEL_PACKAGE": "evil", "NCCL_NET_PLUGIN": "evil"}},
            ["env SGLANG_EXTERNAL_MODEL_PACKAGE", "env NCCL_NET_PLUGIN"],
        ),
        ({"env": {"TRITON_CACHE_DIR": "/tmp/poisoned"}}, ["env TRITON_CACHE_DIR: the kit sets it to"]),
        ({"argv": [*SGLANG, "--trust-remote-code"]}, ["argv --trust-remote-code: not a flag"]),
        ({"argv": [*SGLANG, "--disable-cuda-graph", "extra"]}, ["argv --disable-cuda-graph: takes no value"]),
        ({"argv": ["python3", "-m", "sglang.launch_server", *SGLANG[3:]]}, ["argv: not the image's"]),
        (
            {"container": {"privileged": True, "pid_mode": "host"}},
            ["container.pid_mode", "container.privileged"],
        ),
        (
            {"container": {"mounts": [{"destination": "/root", "source": "/"}]}},
            ["mount /root: from /"],
        ),
        ({"container": {"ipc_mode": "container:other"}}, ["container.ipc_mode"]),
    ],
    ids=[
        "sh-c",
        "caps",
        "ld-preload",
        "python-and-shell",
        "sglang-and-nccl-imports",
        "compile-cache",
        "unknown-flag",
        "stray-value",
        "other-entry",
        "privileged",
        "mount",
        "ipc",
    ],
)
def test_a_hand_edited_launch_is_refused_naming_each_item(tmp_path, edit, named):
    plan = plan_of(crafted_bundle(tmp_path / "b.tar.gz", **edit))
    line = refused_line(plan)
    for item in named:
        assert item in line, line
    assert len(plan.refused) >= len(named) - 1
    refuse(plan, trusted=True)  # --trust-bundle: started as it is


def test_the_plan_shows_the_whole_command_before_it_starts(tmp_path):
    plan = plan_of(
        crafted_bundle(tmp_path / "b.tar.gz", argv=ECHO_TOKEN, env={"GITHUB_TOKEN": "ghp_" + "x" * 36})
    )
    view = plan_view(plan, [], {"GITHUB_TOKEN": "set"})
    assert view["command"][:3] == ["sh", "-c", 'echo "token=[$GITHUB_TOKEN]"; exec "$@"']
    assert view["not_passed"] == ["GITHUB_TOKEN"] and view["from_this_machine"] == []
    assert "GITHUB_TOKEN" not in view["env"]
    text = "\n".join(plan_lines(view))
    assert (
        'command    sh -c \'echo "token=[$GITHUB_TOKEN]"; exec "$@"\' x python -m sglang.launch_server'
        in text
    )
    assert "not passed (secret names in the bundle): GITHUB_TOKEN" in text
    assert "refused by the trust policy (not started without --trust-bundle):" in text
    for part in ("image      kit/sglang:sglang-0.5.23-cpu (sha256:abababababab)", "caps       SYS_PTRACE"):
        assert part in text
    assert "shm 2g" in text


def test_a_bundles_secret_name_is_listed_and_not_passed(tmp_path):
    path = crafted_bundle(tmp_path / "b.tar.gz", env={"GITHUB_TOKEN": "ghp_" + "x" * 36})
    here = {"GITHUB_TOKEN": "ghp_here_" + "y" * 30, "HF_TOKEN": "hf_" + "z" * 34}
    plan = plan_of(path, environ=here)
    assert plan.withheld == ("GITHUB_TOKEN",) and plan.spec.pass_env == ()
    assert plan.refused == ()  # an SGLang launch: it starts, without the token
    named = plan_of(path, environ=here, pass_env=("GITHUB_TOKEN",))
    assert named.spec.pass_env == ("GITHUB_TOKEN",) and named.withheld == ()


def test_the_targets_own_secret_names_are_passed(tmp_path):
    # qwen-base passes HF_TOKEN itself (a gated model): its bundles' HF_TOKEN is read here.
    path = crafted_bundle(tmp_path / "b.tar.gz", env={"HF_TOKEN": "hf_" + "x" * 34, "GITHUB_TOKEN": "ghp_x"})
    bundle = read_bundle(path)
    plan = plan_replay(
        bundle,
        ['container.pass_env=["HF_TOKEN"]'],
        image_id_of=lambda ref: REHEARSAL_ID,
        image_labels_of=lambda ref: KIT_LABELS,
        environ={},
    )
    assert plan.spec.pass_env == ("HF_TOKEN",) and plan.withheld == ("GITHUB_TOKEN",)


@pytest.mark.parametrize("name", ["KIT_API_KEY", "MY_SERVER_KEY"])
def test_the_kits_own_api_key_wrapper_is_recognised_exactly(tmp_path, name):
    spec = resolve("tiny").model_copy(update={"api_key_env": name})
    wrapped = server_command(spec)
    plan = plan_of(crafted_bundle(tmp_path / "b.tar.gz", argv=wrapped))
    assert plan.refused == ()
    argv = plan.spec.argv
    assert argv[:-2] == spec.argv and argv[-2] == "--api-key" and len(argv[-1]) >= 24
    assert plan.spec.api_key_env is None and name in plan.withheld  # a fresh key, not this machine's
    # The same wrapper with one character changed is not the kit's: refused as a command.
    tampered = [*wrapped[:2], wrapped[2] + " ; id", *wrapped[3:]]
    line = refused_line(plan_of(crafted_bundle(tmp_path / "c.tar.gz", argv=tampered)))
    assert "argv: not the image's SGLang entry point" in line


def test_the_compile_caches_own_folders_pass(tmp_path):
    plan = plan_of(crafted_bundle(tmp_path / "b.tar.gz", env=dict(compile_cache.ENV)))
    assert plan.refused == ()


def test_a_foreign_image_is_refused(tmp_path):
    path = crafted_bundle(tmp_path / "b.tar.gz")
    line = refused_line(plan_of(path, labels={"io.kit.image": "other"}))
    assert "image: kit/sglang:sglang-0.5.23-cpu is not the kit's build of sglang-0.5.23-cpu" in line
    other_tag = crafted_bundle(
        tmp_path / "c.tar.gz",
        image={"name": "sglang-0.5.23-cpu", "tag": "ubuntu:24.04", "id": "sha256:" + "cd" * 32},
    )
    plan = plan_replay(
        read_bundle(other_tag),
        image_id_of=lambda ref: "sha256:" + "cd" * 32 if ref == "ubuntu:24.04" else None,
        image_labels_of=lambda ref: {},
        environ={},
    )
    assert "image: ubuntu:24.04 is not the kit's tag of sglang-0.5.23-cpu" in refused_line(plan)


def test_a_tampered_summary_is_refused_and_the_launch_is_what_the_fingerprint_says(tmp_path):
    path = crafted_bundle(tmp_path / "b.tar.gz", argv=ECHO_TOKEN)
    honest = read_bundle(path).summary
    lied = honest.replace('sh -c \'echo "token=[$GITHUB_TOKEN]"; exec "$@"\' x python -m', "python -m")
    assert lied != honest
    tampered = crafted_bundle(tmp_path / "t.tar.gz", argv=ECHO_TOKEN, summary=lied)
    line = refused_line(plan_of(tampered))
    assert "summary.md: says what fingerprint.json does not (a hand-edited bundle?)" in line
    assert "argv: not the image's SGLang entry point" in line


def test_untrusted_text_is_printed_with_printable_characters_only(tmp_path):
    path = crafted_bundle(
        tmp_path / "b.tar.gz",
        argv=["\x1b[2J\x1b]0;evil\x07", "-c", "x"],
        env={"LD_\x1bPRELOAD": "a", "X": "\x1b[31mred\nline"},
        container={"cap_add": ["\x1b[2JSYS_ADMIN"]},
    )
    plan = plan_of(path)
    line = refused_line(plan)
    assert "\x1b" not in line and "\x07" not in line
    assert all("\x1b" not in row and "\n" not in row for row in plan_lines(plan_view(plan, [], {})))


# -- no variable of this machine reaches a replay without consent --------------------------------

_names = st.from_regex(r"[A-Z][A-Z0-9_]{0,12}", fullmatch=True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    bundle_secrets=st.lists(_names, max_size=4, unique=True),
    # Distinct values: a leak is found by value, and a passed variable's value must not stand for another's.
    machine=st.dictionaries(
        _names, st.text(string.ascii_letters, min_size=12, max_size=20), max_size=8
    ).filter(lambda d: len(set(d.values())) == len(d)),
    named=st.lists(_names, max_size=2, unique=True),
)
def test_no_machine_variable_reaches_a_replay_unless_the_target_or_the_user_names_it(
    tmp_path_factory, monkeypatch, bundle_secrets, machine, named
):
    path = crafted_bundle(tmp_path_factory.mktemp("b") / "b.tar.gz", launch={"secrets": bundle_secrets})
    plan = plan_of(path, environ=machine, pass_env=tuple(named))
    allowed = set(resolve("tiny").pass_env) | set(named)
    assert set(plan.spec.pass_env) <= allowed
    assert set(plan.withheld) == set(bundle_secrets) - allowed
    # The real run-time path: what kit up hands the engine from this machine's environment.
    with monkeypatch.context() as patch:
        for key in list(os.environ):
            patch.delenv(key)
        for key, value in machine.items():
            patch.setenv(key, value)
        passed = server_environment(plan.spec, None)
        kwargs = run_kwargs(plan.spec, environment=passed)
    assert set(passed) <= allowed
    leaked = {k for k, v in machine.items() if k not in allowed and v in repr(kwargs)}
    assert not leaked


# -- the fingerprint's launch section, fuzzed ----------------------------------------------------

_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=24)
_flags = st.sampled_from(
    [
        "--tp-size",
        "--nnodes",
        "--node-rank",
        "--api-key",
        "--revision",
        "--disable-cuda-graph",
        "--evil",
        "--port",
    ]
)
_argv = st.one_of(
    st.lists(_text, max_size=6),
    st.lists(st.one_of(_flags, _text), max_size=10).map(lambda rest: [*SGLANG[:3], *rest]),
    st.just(ECHO_TOKEN),
    st.just({"unknown": "fuzzed"}),
)
_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**40), 2**40), _text),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_text, inner, max_size=3)),
    max_leaves=8,
)
_env = st.one_of(
    st.dictionaries(
        st.one_of(_names, st.sampled_from(["LD_PRELOAD", "PYTHONPATH", "HF_TOKEN", "PATH"]), _text),
        st.one_of(_text, st.just(MASK)),
        max_size=5,
    ),
    _json,
)
_container = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "cap_add": st.one_of(
                st.lists(st.sampled_from(["SYS_PTRACE", "SYS_ADMIN", "IPC_LOCK"]), max_size=3), _json
            ),
            "shm_size": st.one_of(st.integers(-5, 2**34), _text, _json),
            "ipc_mode": st.one_of(st.sampled_from(["host", "private", "container:x"]), _json),
            "ulimits": st.one_of(st.dictionaries(_names, st.integers(-1, 2**20), max_size=2), _json),
            "privileged": _json,
            "mounts": _json,
        },
    ),
    _json,
)


_overrides = st.one_of(
    st.none(),
    st.lists(
        st.sampled_from(
            [
                "max_total_tokens=4096",
                'container.pass_env=["GITHUB_TOKEN"]',
                "container.hf_cache=/",
                'container.cap_add=["SYS_ADMIN"]',
                'extra_args=["--evil"]',
                "env.LD_PRELOAD=/x.so",
                "nnodes=2",
            ]
        ),
        max_size=3,
    ),
    _json,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    argv=_argv,
    env=_env,
    container=_container,
    secrets=_json,
    limits=st.one_of(st.none(), _json),
    overrides=_overrides,
)
def test_any_launch_section_is_refused_or_planned_and_a_clean_plan_is_an_sglang_launch(
    tmp_path_factory, argv, env, container, secrets, limits, overrides
):
    launch = {"argv": argv, "env": env, "container": container, "secrets": secrets}
    if limits is not None:
        launch["limits"] = limits
    if overrides is not None:
        launch["overrides"] = overrides
    path = crafted_bundle(tmp_path_factory.mktemp("b") / "b.tar.gz", launch=launch)
    try:
        plan = plan_of(path, environ={"HF_TOKEN": "hf_" + "q" * 34, "LD_PRELOAD": "/x.so"})
    except (InputError, EnvironmentProblem) as exc:
        assert "\n" not in exc.one_line()
        event(f"refused while reading: {exc.one_line().rpartition('.tar.gz: ')[2][:50]}")
        return
    assert set(plan.spec.pass_env) <= set(resolve("tiny").pass_env)
    assert plan.spec.hf_cache == resolve("tiny").hf_cache  # the host's side is this machine's catalog
    lines = plan_lines(plan_view(plan, [], {}))
    assert all(c.isprintable() for row in lines for c in row)
    if plan.refused:
        event("planned, refused")
        refused_line(plan)
        return
    event("planned, started")
    # Nothing refused: the image's SGLang entry point, flags the release knows, no loader variable.
    assert trust.entry_point(plan.spec.argv) is not None
    assert not [name for name in plan.spec.env if trust.env_refusal(name)]
    assert set(run_kwargs(plan.spec, diagnose=True).get("cap_add") or ()) <= set(trust.policy().caps)
    flags = trust.known_flags(load_dialect("sglang-0.5.21"), resolve_full("tiny").profile.extra_args)
    assert not trust.check_argv(plan.spec.argv, flags)


# -- kit bundle show renders what kit repro runs -------------------------------------------------


def test_bundle_show_renders_the_fingerprint_and_says_when_summary_md_disagrees(tmp_path):
    path = crafted_bundle(tmp_path / "b.tar.gz", argv=ECHO_TOKEN)
    lied = read_bundle(path).summary.replace('sh -c \'echo "token=[$GITHUB_TOKEN]"; exec "$@"\' x ', "")
    tampered = crafted_bundle(tmp_path / "t.tar.gz", argv=ECHO_TOKEN, summary=lied)
    proc = run_kit("bundle", "show", str(tampered))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "## summary.md disagrees with the fingerprint (a hand-edited bundle?)" in out
    assert "+python -m sglang.launch_server" in out  # the line only summary.md has
    # What is printed is the fingerprint's launch, the command kit repro would run.
    assert 'argv       sh -c \'echo "token=[$GITHUB_TOKEN]"; exec "$@"\' x python -m' in out
    assert out.count("sh -c 'echo") >= 2  # in the rendered summary too, not summary.md's lie
    assert "argv: not the image's SGLang entry point" in out
    view = json.loads(run_kit("bundle", "show", str(tampered), "--json").stdout)
    assert view["summary_differs"] and view["launch"]["argv"] == ECHO_TOKEN
    assert any(line.startswith("argv: not the image's SGLang entry point") for line in view["trust"])


def test_bundle_show_of_an_honest_bundle_finds_no_disagreement(tmp_path, hung_bundle):
    for path in (hung_bundle, crafted_bundle(tmp_path / "b.tar.gz", env={"HF_TOKEN": "hf_" + "x" * 34})):
        view = bundle_view(path)
        assert view.summary_differs == [] and view.summary == read_bundle(path).summary


def test_a_bundle_of_another_kit_version_is_compared_by_its_argv(tmp_path):
    path = crafted_bundle(tmp_path / "b.tar.gz")
    bundle = read_bundle(path)
    older = replace(bundle, meta={**bundle.meta, "kit_version": "0.0.1"})
    other_layout = replace(
        older, members={**bundle.members, "summary.md": bundle.members["summary.md"] + b"\nmore\n"}
    )
    assert summary_differs(other_layout) == []  # its layout may differ; its argv does not
    lied = bundle.summary.replace("--tp-size 2", "--tp-size 4")
    assert summary_differs(replace(older, members={**bundle.members, "summary.md": lied.encode()}))


def test_bundle_show_prints_untrusted_text_with_printable_characters_only(tmp_path):
    path = crafted_bundle(
        tmp_path / "b.tar.gz", argv=["\x1b[2Jpython", "-c", "x"], env={"X": "\x1b]0;title\x07"}
    )
    proc = run_kit("bundle", "show", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout
    assert "?[2Jpython" in proc.stdout


# -- the policy's lists --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LD_AUDIT",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PYTHONHOME",
        "PYTHONUSERBASE",
        "PYTHONWARNINGS",
        "PYTHONBREAKPOINT",
        "BASH_ENV",
        "ENV",
        "BASH_FUNC_ls%%",
        "PATH",
        "HOME",
        "GCONV_PATH",
        "GLIBC_TUNABLES",
        "CUDA_HOME",
        "NVCC_PREPEND_FLAGS",
        "CC",
        "NCCL_NET_PLUGIN",
        "NCCL_TUNER_PLUGIN",
        "TRITON_PTXAS_PATH",
        "TRITON_CACHE_MANAGER",
        "OPENSSL_CONF",
        "SGLANG_EXTERNAL_MODEL_PACKAGE",
        "SGLANG_HTTP_SERVER_APP_PATH",
    ],
)
def test_names_that_load_code_or_move_the_loader_are_refused(name):
    assert trust.env_refusal(name)


@pytest.mark.parametrize(
    "name",
    [
        "PYTHONUNBUFFERED",
        "PYTHONHASHSEED",
        "NCCL_DEBUG",
        "NCCL_P2P_DISABLE",
        "KIT_FAULT",
        "HF_HUB_OFFLINE",
        "OMP_NUM_THREADS",
    ],
)
def test_names_that_load_nothing_pass(name):
    assert trust.env_refusal(name) is None


def test_capabilities_are_read_with_or_without_their_prefix():
    assert trust.check_caps(["SYS_PTRACE", "CAP_IPC_LOCK", "sys_nice"]) == []
    assert [r.what for r in trust.check_caps(["CAP_SYS_ADMIN", "NET_RAW"])] == [
        "cap CAP_SYS_ADMIN",
        "cap NET_RAW",
    ]


def test_the_flags_a_release_knows_come_from_its_dialect():
    flags = trust.known_flags(load_dialect("sglang-0.5.21"), ("--enable-metrics",))
    assert flags["--tp-size"] == 1 and flags["--disable-cuda-graph"] == 0
    assert flags["--revision"] == 1 and flags["--api-key"] == 1 and flags["--enable-metrics"] is None
    assert (
        "--mamba-scheduler-strategy" in flags
    )  # a renamed flag's old name (0.5.21 refuses it; SGLang says so)
    assert "--trust-remote-code" not in flags
