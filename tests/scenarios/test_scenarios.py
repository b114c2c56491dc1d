"""GPU-shaped start-ups replayed through the real watcher, tracker, verdict and first-token code."""

from __future__ import annotations

import pytest

from kit.errors import InputError
from kit.scenarios import list_scenarios, load_scenario, run_scenario


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path))  # diagnostics of replayed failures go here


@pytest.mark.parametrize("name", list_scenarios())
def test_every_scenario_reaches_its_verdict(name):
    run = run_scenario(name)
    assert run.ok, "\n".join(f"{e.name}: {e.detail}" for e in run.expectations if not e.ok)


def test_the_scenarios_the_gpu_path_rests_on_exist():
    assert {"init-hang-tp4", "p2p-after-init", "cold-load", "stalled-load", "mtp-ready"} <= set(
        list_scenarios()
    )


def test_init_hang_tp4_is_hung_in_init_within_the_window_plus_5_s():
    run = run_scenario("init-hang-tp4")
    result = run.result
    assert (result.verdict, result.phase, result.exit_code) == ("hung", "init", 4)
    assert 0 <= run.latency_s <= 5
    assert result.stuck_ranks == ("TP0", "TP1", "TP2", "TP3")
    assert result.gpus.count == 4 and result.gpus.devices[0].compute_capability == "12.0"


def test_p2p_after_init_is_hung_not_deadline_although_cpu_and_gpus_are_busy():
    run = run_scenario("p2p-after-init")
    assert run.result.verdict == "hung" and run.result.phase == "capture"
    assert 0 <= run.latency_s <= 5


def test_cold_load_is_never_hung_and_keeps_its_true_load_time():
    run = run_scenario("cold-load")
    assert run.result.verdict == "ready"
    load = max(s.elapsed_s for s in run.result.timeline if s.phase == "load")
    assert 1490 <= load <= 1530


def test_mtp_first_token_arrives_as_reasoning():
    run = run_scenario("mtp-ready")
    assert run.result.first_token_in == "reasoning_content" and run.result.reply.startswith("Okay")


def test_an_unknown_scenario_names_the_known_ones():
    with pytest.raises(InputError) as caught:
        load_scenario("no-such-scenario")
    assert "init-hang-tp4" in caught.value.hint


def test_a_broken_scenario_file_names_the_key(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text(
        'name = "x"\ntitle = "x"\nabout = "x"\nsources = ["x"]\ntarget = "tiny"\n'
        'duration_s = 10\nranks = 1\n[expect]\nverdict = "sideways"\n[[at]]\nt = 0\n'
    )
    with pytest.raises(InputError) as caught:
        load_scenario(str(path))
    assert "expect.verdict" in caught.value.field


# -- a supervisor restarting the server: the watcher judges the last launch attempt ----------


def _watch(scenario, **options):
    from kit.launch import resolve
    from kit.logs.limits import limits_from_spec
    from kit.scenarios import ReplaySource
    from kit.startup.watch import Watcher

    source = ReplaySource(scenario)
    watcher = Watcher(source, limits_from_spec(resolve(scenario.target, image=scenario.image)), **options)
    verdict = watcher.run()
    return watcher, verdict, source.clock()


def test_restart_loop_is_judged_as_attempt_3_with_the_earlier_crashes_counted():
    result = run_scenario("restart-loop").result
    assert (result.verdict, result.phase, result.attempt) == ("hung", "init", 3)
    assert result.earlier_attempts == ("CRASHED in load", "CRASHED in load")
    assert result.attempts == "attempt 3 of 3; attempts 1-2 CRASHED in load"


def test_without_a_restart_policy_the_first_crash_is_the_verdict():
    scenario = load_scenario("restart-loop").model_copy(update={"restart_policy": "no"})
    watcher, verdict, at = _watch(scenario)
    assert verdict.kind == "crashed" and verdict.phase.value == "load"
    assert watcher.attempts.number == 1 and at < 120  # before the supervisor would have restarted it


def test_a_crash_loop_is_judged_at_the_last_allowed_attempt():
    watcher, verdict, _ = _watch(load_scenario("restart-loop"), max_attempts=2)
    assert verdict.kind == "crashed" and verdict.phase.value == "load"
    assert watcher.attempts.number == 2
    assert [a.outcome for a in watcher.attempts.earlier] == ["crashed"]


def test_a_server_its_supervisor_never_starts_again_is_judged_after_the_grace():
    scenario = load_scenario("restart-loop")
    first_only = scenario.model_copy(update={"at": tuple(a for a in scenario.at if a.t < 120)})
    watcher, verdict, at = _watch(first_only, restart_grace_s=30)
    assert verdict.kind == "crashed" and watcher.attempts.number == 1
    assert 110 + 30 <= at <= 112 + 30 + 5  # the fatal line at 110 s, the exit at 112 s, then the grace


def test_a_fatal_error_from_a_server_that_never_exits_is_judged_after_the_grace():
    scenario = load_scenario("restart-loop")
    # attempt 1 prints its OOM and sigquit, but the process never stops (no exit, no restart)
    never_exits = scenario.model_copy(
        update={"at": tuple(a.model_copy(update={"exit_code": None}) for a in scenario.at if a.t < 120)}
    )
    watcher, verdict, at = _watch(never_exits, restart_grace_s=30)
    assert verdict.kind == "crashed" and watcher.attempts.number == 1
    assert at <= 110 + 10 + 30 + 5  # the fatal line, the tracker's crash grace, then the hold


# -- evidence: every entry says where it comes from ----------------------------------------------

# A public issue (owner/repo#N or its URL), a release's own file (sglang 0.5.x srt/...), or a path
# inside this repository (docs/sources.md#...): tests/citations.py; any other path fails.


@pytest.mark.parametrize("name", list_scenarios())
def test_every_log_block_and_activity_shape_cites_where_it_comes_from(name):
    from citations import citation_problems, path_problems

    scenario = load_scenario(name)
    for entry in scenario.at:
        problems = citation_problems(entry.source)
        assert not problems, f"{name} t={entry.t:g}: " + "; ".join(problems)
    for text in scenario.sources:
        assert not path_problems(text), f"{name} sources: " + "; ".join(path_problems(text))


def test_a_scenario_source_outside_the_repository_is_rejected():
    from citations import citation_problems

    beside = "shared" + "/reference"  # built, so the project-wide grep for it stays clean
    for text in (f"{beside}/x.md", "../x", f"the field notes ({beside}/facts.md §5)"):
        assert citation_problems(text), text


@pytest.mark.parametrize("name", list_scenarios())
def test_gpu_memory_is_flat_while_shards_stream(name):
    # SGLang allocates the weights when it builds the model (model_loader/loader.py): memory jumps at
    # load start and stays flat while the shards stream into it, so no scenario grows it in load.
    from kit.scenarios import ReplaySource

    run = run_scenario(name)
    if run.result is None:
        pytest.skip("no verdict")
    source = ReplaySource(load_scenario(name))
    for span in run.result.timeline:
        if span.phase != "load" or span.end_s is None or span.end_s - span.start_s < 10:
            continue
        early, late = source.sample(span.start_s + 2), source.sample(span.end_s - 1)
        assert early.gpu_mem_bytes == late.gpu_mem_bytes, f"{name}: GPU memory grows during load"


# -- the new GPU-path claims ---------------------------------------------------------------------


def test_a_first_run_compile_is_never_hung_and_only_compile_activity_keeps_it_alive():
    run = run_scenario("first-run-compile")
    assert run.result.verdict == "ready"
    # The same replay, with compile writes and live compilers not counted: HUNG in capture, the
    # verdict the kit gave every cold start before.
    import dataclasses

    from kit.launch import resolve
    from kit.logs.limits import limits_from_spec
    from kit.scenarios import ReplaySource
    from kit.startup.watch import Watcher

    scenario = load_scenario("first-run-compile")
    limits = dataclasses.replace(limits_from_spec(resolve(scenario.target)), compile_counts_in=frozenset())
    verdict = Watcher(ReplaySource(scenario), limits).run()
    assert (verdict.kind, verdict.phase.value) == ("hung", "capture")


def test_a_stall_in_flashinfer_autotune_is_named_after_autotune():
    run = run_scenario("autotune-stall")
    result = run.result
    assert (result.verdict, result.phase) == ("hung", "autotune")
    assert any(s.phase == "autotune" for s in result.timeline)
    assert result.likely_causes[0].id in ("autotune-hang", "pcie-acs")
    assert result.activity.shape == "spinning"


def test_a_harmless_traceback_in_load_is_evidence_not_a_verdict():
    result = run_scenario("harmless-traceback-load").result
    assert result.verdict == "ready"
    assert result.survived_errors == ("TP2: ModuleNotFoundError: No module named 'sgl_kernel_fused_gdn'",)


def test_p2p_after_init_says_what_nccl_prints_with_cumem_off_and_spares_custom_all_reduce():
    scenario = load_scenario("p2p-after-init")
    text = "".join(entry.log or "" for entry in scenario.at)
    assert "via P2P/IPC" in text and "P2P/CUMEM" not in text  # SGLang sets NCCL_CUMEM_ENABLE=0
    result = run_scenario("p2p-after-init").result
    assert "custom-allreduce" not in {c.id for c in result.likely_causes}
    assert [c.id for c in result.likely_causes[:2]] == ["nccl-p2p", "pcie-acs"]
    assert any(e.startswith("activity=") for c in result.likely_causes[:2] for e in c.evidence)


def test_a_quiet_init_hang_on_one_node_puts_missing_rank_and_bootstrap_first_and_no_multi_node_cause():
    result = run_scenario("init-hang-tp4").result
    assert result.activity.shape == "quiet"
    ids = [c.id for c in result.likely_causes]
    assert set(ids[:2]) == {"rank-missing", "nccl-bootstrap"}
    assert "rendezvous-timeout" not in ids and "peer-unreachable" not in ids  # they need several nodes
    bootstrap = next(c for c in result.likely_causes if c.id == "nccl-bootstrap")
    assert bootstrap.facts == ("needs gpu: gpu yes (device cuda)",)


def test_a_quick_restart_ends_the_crashed_attempt_although_the_next_run_is_busy():
    # The engine starts the server again within half a second of its exit, and the new run imports
    # (a core busy) for 30 s before its launch line: that activity is not the crashed run's life.
    scenario = load_scenario("restart-loop")
    third = next(a for a in scenario.at if a.t == 250)
    entries = [a for a in scenario.at if a.t < 232]
    entries += [
        next(a for a in scenario.at if a.t == 232).model_copy(update={"t": 232.1}),
        third.model_copy(update={"t": 232.2, "log": None}),
        third.model_copy(update={"t": 262, "start": False}),
    ]
    quick = scenario.model_copy(update={"at": tuple(entries)})
    watcher, verdict, at = _watch(quick, max_attempts=2)
    assert (verdict.kind, verdict.phase.value, watcher.attempts.number) == ("crashed", "load", 2)
    assert at < 262  # judged before the next run's launch line


def test_an_xid_119_in_capture_names_gpu_lost_first_through_the_real_nvml_reader():
    run = run_scenario("xid-119-capture")
    result = run.result
    assert (result.verdict, result.phase) == ("hung", "capture")
    assert result.likely_causes[0].id == "gpu-lost"
    assert "fatal Xid 119 on GPU 2 (GSP RPC timeout" in result.gpu_error
