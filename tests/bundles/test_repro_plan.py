"""kit repro's plan and verdict, without Docker: which image it starts, the launch it replays with
--set on top, the secrets it takes from this machine, and when it says "reproduced"."""

from __future__ import annotations

import re

import pytest
from bundle_helpers import HUNG_RESULT, hung_input

from kit.diagnose import facts
from kit.diagnose.bundle import build_members, read_bundle, write_bundle
from kit.diagnose.redact import MASK, Redactor
from kit.diagnose.replay_launch import patch_argv
from kit.diagnose.repro import compare, find_image, fresh_api_key, plan_replay
from kit.errors import EnvironmentProblem, ExitCode
from kit.launch import resolve
from kit.logs.limits import limits_from_spec

TAG = "kit/sglang:sglang-0.5.23-cpu"
ID = "sha256:" + "ab" * 32
API_KEY = "sk-kit-0123456789abcdef"


def a_bundle(
    tmp_path, *, image: dict | None = None, runtime_env: dict | None = None, overrides=(), result=None
):
    spec = resolve("tiny", overrides=list(overrides))
    limits = limits_from_spec(spec, stall_windows={"init": 8})
    spec = spec.model_copy(update={"argv": (*spec.argv, "--api-key", API_KEY)})
    env = (
        {"KIT_FAULT": "hang-init:rank=1", "HF_TOKEN": "hf_" + "x" * 34}
        if runtime_env is None
        else runtime_env
    )
    fingerprint = {
        "format": 1,
        "image": image if image is not None else {"name": "sglang-0.5.23-cpu", "tag": TAG, "id": ID},
        "launch": facts.launch_of_spec(spec, limits, env, "test"),
    }
    bundle = hung_input(fingerprint=fingerprint, **({"result": result} if result else {}))
    redactor = Redactor.for_launch({**spec.env, **env}, list(spec.argv))
    return read_bundle(write_bundle(tmp_path / "b.tar.gz", bundle.name, build_members(bundle, redactor)))


def ids(**known: str):
    return lambda ref: known.get(ref)


def test_the_image_is_started_by_its_tag_while_the_tag_still_names_the_bundles_id():
    assert find_image({"name": "n", "tag": TAG, "id": ID}, image_id_of=ids(**{TAG: ID, ID: ID})) == (
        TAG,
        None,
    )


def test_a_retagged_image_is_started_by_id_and_a_pushed_one_by_digest():
    digest = "registry.example/kit@sha256:" + "cd" * 32
    image = {"name": "n", "tag": TAG, "id": ID, "digest": digest}
    assert find_image(image, image_id_of=ids(**{TAG: "sha256:other", ID: ID})) == (ID, None)
    assert find_image(image, image_id_of=ids(**{digest: ID})) == (digest, None)


def test_a_rebuild_of_the_same_manifest_is_used_and_said():
    ref, note = find_image({"name": "n", "tag": TAG, "id": ID}, image_id_of=ids(**{TAG: "sha256:rebuilt"}))
    assert ref == TAG and "is not here; using kit/sglang:sglang-0.5.23-cpu" in note


def test_a_missing_image_is_exit_3_with_the_exact_build_command():
    with pytest.raises(EnvironmentProblem) as caught:
        find_image({"name": "sglang-0.5.23-cpu", "tag": TAG, "id": ID}, image_id_of=ids())
    assert caught.value.exit_code == ExitCode.ENVIRONMENT
    assert "run 'kit image build sglang-0.5.23-cpu'" in caught.value.one_line()


LABELS = {"io.kit.image": "sglang-0.5.23-cpu", "io.kit.managed": "image"}


def plan_of(bundle, sets=(), **kwargs):
    kwargs.setdefault("environ", {})
    return plan_replay(
        bundle, sets, image_id_of=ids(**{TAG: ID}), image_labels_of=lambda ref: LABELS, **kwargs
    )


def test_the_replay_has_the_bundles_argv_environment_and_limits(tmp_path):
    bundle = a_bundle(tmp_path)
    plan = plan_of(bundle, environ={"HF_TOKEN": "hf_here"})
    spec = plan.spec
    assert plan.image_ref == TAG and plan.image_note is None and plan.image_id == ID
    assert spec.env["KIT_FAULT"] == "hang-init:rank=1"
    assert spec.argv[:3] == ("python", "-m", "sglang.launch_server")
    key = spec.argv[spec.argv.index("--api-key") + 1]
    assert key not in (API_KEY, MASK) and len(key) >= 24  # masked in the bundle: a fresh one
    assert plan.limits.stall_window_s.init == 8  # the bundle's limits, not the catalog's 20 s
    assert plan.changes == () and plan.refused == () and plan.no_effect == ()
    assert any("--api-key" in n for n in plan.notes)


def test_a_secret_name_of_the_bundle_is_passed_only_with_consent(tmp_path):
    bundle = a_bundle(tmp_path)
    # tiny passes no secret of its own (pass_env = []): the bundle's HF_TOKEN is listed, not passed.
    plan = plan_of(bundle, environ={"HF_TOKEN": "hf_here"})
    assert "HF_TOKEN" not in plan.spec.env and plan.spec.pass_env == ()
    assert plan.withheld == ("HF_TOKEN",)
    named = plan_of(bundle, environ={"HF_TOKEN": "hf_here"}, pass_env=("HF_TOKEN",))
    assert named.spec.pass_env == ("HF_TOKEN",) and named.withheld == ()  # read here, by name, at start
    assert "HF_TOKEN" not in named.spec.env


def test_a_passed_secret_missing_here_is_named(tmp_path):
    plan = plan_of(a_bundle(tmp_path), pass_env=("HF_TOKEN",))
    assert "HF_TOKEN: passed by name, not set here (the replay runs without it)" in plan.notes


def test_set_env_changes_and_removes_variables_of_the_replay(tmp_path):
    plan = plan_of(a_bundle(tmp_path), ["env.KIT_FAULT=none", "env.NCCL_P2P_DISABLE=1"])
    assert "KIT_FAULT" not in plan.spec.env and plan.spec.env["NCCL_P2P_DISABLE"] == "1"
    assert plan.changes == (
        "env KIT_FAULT: hang-init:rank=1 -> (unset)",
        "env NCCL_P2P_DISABLE: (unset) -> 1",
    )
    assert ("override: env.KIT_FAULT=none") in plan.spec.notes  # the replay's own bundle records it


def test_set_of_a_profile_key_changes_the_bundles_own_flag(tmp_path):
    plan = plan_of(a_bundle(tmp_path), ["max_total_tokens=32768"])
    argv = plan.spec.argv
    assert argv[argv.index("--max-total-tokens") + 1] == "32768"
    assert plan.changes == ("argv: --max-total-tokens 65536 -> 32768",)
    assert "--api-key" in argv  # a flag only the bundle's launch had is kept


def test_patching_argv_replaces_adds_and_removes_flags_and_keeps_the_rest():
    bundle = ["python", "-m", "s", "--tp", "2", "--api-key", "k", "--disable-cuda-graph"]
    base = ["python", "-m", "s", "--tp", "2", "--disable-cuda-graph"]
    changed = ["python", "-m", "s", "--tp", "4", "--mem-fraction-static", "0.8"]
    assert patch_argv(bundle, base, changed) == [
        *["python", "-m", "s", "--tp", "4", "--api-key", "k"],
        *["--mem-fraction-static", "0.8"],
    ]


def test_recorded_overrides_are_replayed(tmp_path):
    bundle = a_bundle(tmp_path, overrides=["max_total_tokens=16384"])
    plan = plan_of(bundle)
    assert plan.spec.argv[plan.spec.argv.index("--max-total-tokens") + 1] == "16384"
    assert "override: max_total_tokens=16384" in plan.spec.notes


@pytest.mark.parametrize(
    ("replay", "reproduced"),
    [
        ({"verdict": "hung", "phase": "init", "stuck_ranks": ["TP1", "TP0"]}, True),
        ({"verdict": "deadline", "phase": "init", "stuck_ranks": ["TP0", "TP1"]}, True),
        ({"verdict": "hung", "phase": "load", "stuck_ranks": ["TP0", "TP1"]}, False),
        ({"verdict": "hung", "phase": "init", "stuck_ranks": ["TP1"]}, False),
        ({"verdict": "ready", "phase": "serving", "stuck_ranks": []}, False),
        ({"verdict": "crashed", "phase": "init", "stuck_ranks": ["TP0", "TP1"]}, False),
    ],
)
def test_reproduced_means_the_same_verdict_phase_and_stuck_ranks(replay, reproduced):
    same, rows = compare(HUNG_RESULT, replay)
    assert same is reproduced
    assert [r.what for r in rows] == ["verdict", "phase", "stuck ranks"]


def test_the_plan_lists_the_deadlines_and_says_whether_they_decide_the_verdict(tmp_path):
    """A DEADLINE bundle replays under the strict policy (kit/startup/replay.py): its deadlines decide."""
    from bundle_helpers import HUNG_RESULT

    from kit.diagnose.replay_plan import plan_lines, plan_view

    hung = plan_of(a_bundle(tmp_path), environ={})
    text = "\n".join(plan_lines(plan_view(hung, [], {})))
    assert "  deadlines  launch 600 s, init 60 s, load " in text
    assert "said when passed, not a verdict (HUNG and CRASHED decide)" in text
    late = {**HUNG_RESULT, "verdict": "deadline", "exit_code": 5}
    (tmp_path / "late").mkdir()
    strict = plan_of(a_bundle(tmp_path / "late", result=late), environ={})
    view = plan_view(strict, [], {})
    assert view["limits"]["deadlines_decide"] is True
    assert "they decide the verdict (the bundle ended at one: DEADLINE)" in "\n".join(plan_lines(view))


def test_a_fresh_api_key_is_never_read_as_a_flag(tmp_path):
    # token_urlsafe starts 1 key in 64 with '-': SGLang's argparse then reads `--api-key -x..` as a
    # missing value and the replay exits 2 (a docker test's flake). 2,000 draws of the old key had one
    # with near certainty (1 - (63/64)**2000).
    assert not [key for key in (fresh_api_key() for _ in range(2000)) if key.startswith("-")]
    plan = plan_of(a_bundle(tmp_path), environ={})
    key = plan.spec.argv[plan.spec.argv.index("--api-key") + 1]
    assert re.fullmatch(r"[0-9a-f]{48}", key), key  # the replay's key is the helper's
