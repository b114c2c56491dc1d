"""`kit repro B --set K=V` acts on what the bundle ran (issue 19): the bundle's flags are read back
into profile keys with the release's dialect, the set is applied, the launch written again; a set
that changes nothing exits 2. Without Docker."""

from __future__ import annotations

import json

import pytest
from bundle_helpers import KIT_LABELS, REHEARSAL_ID, crafted_bundle

from kit.diagnose.bundle import read_bundle
from kit.diagnose.replay_launch import flag_changes
from kit.diagnose.repro import plan_replay, refuse
from kit.dialects import list_dialects, load_dialect
from kit.dialects._translate import read_launch, translate
from kit.errors import InputError
from kit.launch import context_of, list_targets, resolve, resolve_full

SGLANG = list(resolve("tiny").argv)
TWO_NODES = [*SGLANG, "--nnodes", "2", "--node-rank", "0", "--dist-init-addr", "10.0.0.1:5000"]


def plan_of(path, sets=()):
    return plan_replay(
        read_bundle(path),
        sets,
        image_id_of=lambda ref: REHEARSAL_ID,
        image_labels_of=lambda ref: KIT_LABELS,
        environ={},
    )


@pytest.mark.parametrize("dialect_name", list_dialects())
@pytest.mark.parametrize("target", list_targets())
@pytest.mark.parametrize("nodes", [1, 2])
def test_reading_a_launch_back_and_writing_it_again_gives_the_same_flags(dialect_name, target, nodes):
    r = resolve_full(target)
    dialect = load_dialect(dialect_name)
    intent = dict(r.translation.intent)
    if nodes > 1:
        intent.update(nnodes=nodes, node_rank=1, dist_init_addr="10.0.0.1:5000")
    context = context_of(r.model, r.profile, r.hardware, r.spec.gpus)
    written = translate(
        dialect, intent, context=context, profile_env=r.profile.env, extra_args=r.profile.extra_args
    )
    args = [*written.args, "--revision", "abc123"]  # a flag no intent covers comes back as it was
    reading = read_launch(dialect, args, written.env)
    again = translate(
        dialect, reading.intent, context=context, profile_env=r.profile.env, extra_args=reading.extra_args
    )
    assert list(again.args) == args
    assert again.env == written.env
    # the profile's own extra flags (tiny-qwen has some) come back too, followed by the foreign one
    assert reading.extra_args == (*r.profile.extra_args, "--revision", "abc123")


def test_node_rank_and_the_rendezvous_are_written_only_for_several_nodes():
    dialect = load_dialect("sglang-0.5.21")
    one = translate(dialect, {"nnodes": 1, "node_rank": 0, "dist_init_addr": "h:1"}, context={})
    two = translate(dialect, {"nnodes": 2, "node_rank": 0, "dist_init_addr": "h:1"}, context={})
    assert one.args == ()
    assert two.args == ("--nnodes", "2", "--node-rank", "0", "--dist-init-addr", "h:1")


def test_set_nnodes_1_on_a_two_node_bundle_replays_a_single_node_launch(tmp_path):
    plan = plan_of(crafted_bundle(tmp_path / "b.tar.gz", argv=TWO_NODES), ["nnodes=1"])
    assert plan.spec.argv == tuple(SGLANG)
    assert plan.changes == (
        "argv: removed --nnodes 2; removed --node-rank 0; removed --dist-init-addr 10.0.0.1:5000",
    )
    assert plan.no_effect == ()
    refuse(plan, trusted=False)


def test_set_nnodes_1_on_a_single_node_bundle_changes_nothing_and_exits_2(tmp_path):
    plan = plan_of(crafted_bundle(tmp_path / "b.tar.gz"), ["nnodes=1", "max_total_tokens=4096"])
    assert plan.no_effect == ("nnodes=1",)
    with pytest.raises(InputError) as caught:
        refuse(plan, trusted=True)  # not a trust question: the set did nothing
    assert caught.value.exit_code == 2
    assert caught.value.one_line().startswith(
        "--set: nnodes=1 changes nothing in the replay's argv, environment, limits or container settings"
    )


@pytest.mark.parametrize(
    ("item", "change"),
    [
        ("tp=4", "argv: --tp-size 2 -> 4"),
        ("cuda_graph=true", "argv: removed --disable-cuda-graph"),
        ("attention_backend=triton", "argv: added --attention-backend triton"),
        ('cpu_threads_bind="1|0"', "env SGLANG_CPU_OMP_THREADS_BIND: 0|1 -> 1|0"),
        ("env.NCCL_P2P_DISABLE=1", "env NCCL_P2P_DISABLE: (unset) -> 1"),
        ("timing.stall_windows.init=30", "limits stall_window_s.init: 8.0 -> 30.0"),
        ("container.shm_size=4g", "container shm_size: 2g -> 4g"),
        ("container.ipc_host=true", "container ipc_host: False -> True"),
    ],
)
def test_each_set_changes_the_bundles_own_launch(tmp_path, item, change):
    plan = plan_of(crafted_bundle(tmp_path / "b.tar.gz"), [item])
    assert change in plan.changes and plan.no_effect == ()


def test_tp_changes_the_ranks_the_verdict_expects(tmp_path):
    plan = plan_of(crafted_bundle(tmp_path / "b.tar.gz"), ["tp=4"])
    assert plan.limits.expected_ranks == 4 and "limits expected_ranks: 2 -> 4" in plan.changes


@pytest.mark.parametrize(
    "item",
    ["env.KIT_FAULT=hang-init:rank=1", "max_total_tokens=65536", "container.shm_size=2g", "env.NOT_SET=none"],
)
def test_a_set_the_bundle_already_has_changes_nothing(tmp_path, item):
    path = crafted_bundle(tmp_path / "b.tar.gz", env={"KIT_FAULT": "hang-init:rank=1"})
    assert plan_of(path, [item]).no_effect == (item,)


def test_a_set_acts_on_the_flags_of_the_bundle_not_the_catalogs(tmp_path):
    # The bundle ran --max-total-tokens 9999 (not the catalog's 65536): setting the catalog's value
    # changes the replay.
    argv = [*SGLANG]
    argv[argv.index("--max-total-tokens") + 1] = "9999"
    plan = plan_of(crafted_bundle(tmp_path / "b.tar.gz", argv=argv), ["max_total_tokens=65536"])
    assert plan.changes == ("argv: --max-total-tokens 9999 -> 65536",)


def test_a_set_on_a_wrapped_launch_changes_the_sglang_part_and_keeps_the_wrapper(tmp_path):
    wrapped = ["sh", "-c", 'exec "$@"', "x", *TWO_NODES]
    plan = plan_of(crafted_bundle(tmp_path / "b.tar.gz", argv=wrapped), ["nnodes=1"])
    assert plan.spec.argv == ("sh", "-c", 'exec "$@"', "x", *SGLANG)
    assert plan.refused  # still not an SGLang launch the kit starts without --trust-bundle


def test_a_profile_key_on_a_command_without_sglang_is_bad_input(tmp_path):
    path = crafted_bundle(tmp_path / "b.tar.gz", argv=["sh", "-c", "sleep 1"])
    with pytest.raises(InputError) as caught:
        plan_of(path, ["nnodes=1"])
    assert "not an SGLang launch, so profile keys cannot be read from it" in caught.value.one_line()


def test_flag_changes_name_each_flag():
    a = ["--tp-size", "2", "--a=1", "--x"]
    b = ["--tp-size", "4", "--a=2", "--y", "3"]
    assert flag_changes(a, b) == "--tp-size 2 -> 4; --a 1 -> 2; removed --x; added --y 3"


def _host_bundle(path, summary=None):
    unknown = {"unknown": "a host process (pid 4242): no kit image ran it"}
    return crafted_bundle(
        path,
        container={"kind": "host process"},
        image={"name": unknown, "tag": unknown, "id": unknown},
        summary=summary,
    )


def test_a_host_bundle_replayed_in_the_nearest_image_is_not_read_as_hand_edited(tmp_path):
    from kit.diagnose.nearest import host_replay
    from kit.diagnose.show import summary_differs

    replay = host_replay(read_bundle(_host_bundle(tmp_path / "host.tar.gz")))
    assert replay is not None and replay.bundle.fingerprint["image"]["name"] == replay.choice.manifest
    assert summary_differs(replay.bundle) == []


def test_a_host_bundles_replay_fingerprint_is_built_for_the_image_it_replays_in(tmp_path):
    # Made by fingerprint.build (HostReplayFacts), not the host's dict with two fields swapped: the
    # image section is the chosen manifest's, never the host's "no kit image ran it"; the host's
    # versions stay (the differences the plan shows first); the catalog's container settings.
    from kit.diagnose.nearest import host_replay

    host = read_bundle(_host_bundle(tmp_path / "host.tar.gz"))
    replay = host_replay(host)
    finger = replay.bundle.fingerprint
    assert finger["image"]["manifest"]["name"] == replay.choice.manifest
    assert finger["image"]["tag"] == replay.choice.tag
    assert "no kit image ran it" not in json.dumps(finger["image"])
    assert replay.choice.manifest in finger["image"]["id"]["unknown"]
    assert finger["versions"] == host.fingerprint.get("versions", finger["versions"])
    assert "the bundle records no versions" in json.dumps(finger["versions"])  # this one has none
    from kit.diagnose.fact_sources import HostReplayFacts

    versions = {"sglang": "0.5.21", "torch": "2.9.1"}
    with_versions = HostReplayFacts({**host.fingerprint, "versions": versions}, "x", "tiny", [], "argv")
    assert with_versions.image()[1] == versions
    assert finger["launch"]["container"] == {} and finger["made"]["by"].startswith("kit repro")


def test_a_host_bundle_whose_summary_was_edited_still_shows_the_edit_after_the_rewrite(tmp_path):
    from kit.diagnose.nearest import host_replay
    from kit.diagnose.show import summary_differs

    replay = host_replay(read_bundle(_host_bundle(tmp_path / "host.tar.gz", summary="# READY, honest\n")))
    assert replay is not None
    assert "+# READY, honest" in summary_differs(replay.bundle)
