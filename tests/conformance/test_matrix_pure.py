"""The conformance matrix's pure parts: cells, the kit's side, comparing, the table. No venv needed."""

from __future__ import annotations

import pytest

from kit.check.conformance import (
    Cell,
    KitSide,
    Probe,
    Releases,
    Report,
    cells_of,
    companion_cells,
    compare,
    fate,
    kit_side,
    load_matrix,
    read_matrix_toml,
    render_markdown,
)
from kit.dialects import Rule, dialect_for, list_dialects, load_dialect
from kit.errors import InputError
from kit.images.manifest import load_all

MATRIX = load_matrix()


def _rule(rule_id="r", rejects="^AssertionError: no_buffer", stage="parser"):
    return Rule(id=rule_id, severity="error", when={}, message="m", fix="f", rejects=rejects, stage=stage)


def _kit(*errors, expect=None):
    return KitSide("sglang-x", tuple(errors), (), (), {"id": "c"}, expect)


CELL = Cell("g", "qwen-base", ("mamba_cache=no_buffer",))


@pytest.mark.parametrize(
    ("errors", "parser", "status", "mark"),
    [
        ((), {"accepted": True}, "agree", "ok"),
        ((_rule(),), {"accepted": False, "stage": "parser", "error_type": "AssertionError",
                      "error": "no_buffer do not support overlap schedule."}, "agree", "r"),
        ((_rule(),), {"accepted": True}, "disagree", "kit refuses (r)"),
        ((), {"accepted": False, "stage": "parser", "error_type": "ValueError", "error": "x"},
         "disagree", "SGLang refuses (parser)"),
        ((_rule(),), {"accepted": False, "stage": "parser", "error_type": "ValueError", "error": "other"},
         "disagree", "different reasons"),
        # The right words at the wrong stage are not agreement: the rule says where SGLang refuses.
        ((_rule(stage="load"),), {"accepted": False, "stage": "parser", "error_type": "AssertionError",
                                  "error": "no_buffer x"}, "disagree", "different reasons"),
        ((), {"internal": True, "error_type": "Timeout", "error": "no answer"}, "error", "check failed"),
    ],
)  # fmt: skip
def test_compare_agrees_only_on_the_same_verdict_for_the_same_reason(errors, parser, status, mark):
    outcome = compare("0.5.23", CELL, _kit(*errors), parser)
    assert (outcome.status, outcome.mark) == (status, mark)


def test_a_stage_that_did_not_run_is_not_run_never_agreement():
    parser = {"accepted": True, "load": {"ran": False, "why": "ImportError: x"}}
    # The kit claims a refusal at load, or claims nothing: either way the load stage decided nothing.
    for kit in (_kit(_rule(stage="load")), _kit()):
        outcome = compare("0.5.9", CELL, kit, parser)
        assert (outcome.status, outcome.mark) == ("not run", "load not run")
        assert "ImportError" in outcome.detail
    assert "kit rule r is not checked" in compare("0.5.9", CELL, _kit(_rule(stage="load")), parser).detail
    # A parser-stage rule against an accepting parser is a disagreement whatever the load stage did.
    assert compare("0.5.9", CELL, _kit(_rule()), parser).status == "disagree"
    # A companion the parser does not need may still be needed at load: not run, not 'not needed'.
    cell = Cell("g", "qwen-base", (), without="sm120-hybrid-triton")
    base = {"accepted": True, "load": {"ran": True, "accepted": True}}
    assert compare("0.5.9", cell, _kit(expect="refused"), parser, base=base).status == "not run"


def test_an_attribute_the_stand_in_runner_lacks_fails_the_cell():
    parser = {"accepted": True, "load": {"ran": False, "why": "lacks x", "unknown": ["is_hybrid_swa"]}}
    outcome = compare("0.5.23", CELL, _kit(), parser)
    assert (outcome.status, outcome.mark) == ("error", "runner lacks is_hybrid_swa")
    report = Report(outcomes=[outcome])
    assert report.disagreements == [outcome]


def test_the_stand_in_runner_raises_and_records_an_attribute_it_does_not_know():
    from kit.check.driver import _Runner

    runner = _Runner(object(), {"attention_backend": "triton"}, None, None)
    assert runner.decode_attention_backend_str == "triton" and runner.unknown == []
    with pytest.raises(AttributeError, match="no 'is_hybrid_swa'"):
        runner.is_hybrid_swa  # noqa: B018 - the read is the test
    assert getattr(runner, "spec_algorithm", None) is None and not hasattr(runner, "draft_model")
    assert runner.unknown == ["is_hybrid_swa", "spec_algorithm", "draft_model"]


def test_a_companion_is_needed_only_if_the_launch_without_it_is_refused():
    cell = Cell("g", "qwen-base", (), without="sm120-hybrid-triton")
    refused = {"accepted": False, "stage": "load", "error_type": "AssertionError", "error": "only triton"}
    accepted = {"accepted": True, "load": {"ran": True, "accepted": True}}
    assert compare("0.5.9", cell, _kit(expect="refused"), refused, base=accepted).mark == "needed"
    outcome = compare("0.5.10", cell, _kit(expect="refused"), accepted, base=accepted)
    assert (outcome.status, outcome.mark) == ("disagree", "not needed")
    # Refused with the companion too: the companion decides nothing here.
    moot = compare("0.5.9", cell, _kit(expect="refused"), refused, base=refused)
    assert (moot.status, moot.mark) == ("agree", "moot")
    assert compare("0.5.9", cell, _kit(expect="refused"), refused).status == "error"


@pytest.mark.parametrize(
    ("expect", "parser", "status"),
    [
        ("refused", {"accepted": False, "error_type": "ArgumentError",
                     "error": "unrecognized arguments: --mamba-scheduler-strategy extra_buffer"}, "agree"),
        ("warned", {"accepted": True, "warnings": ["'--mamba-scheduler-strategy' is deprecated"]}, "agree"),
        ("warned", {"accepted": True, "warnings": []}, "disagree"),
        ("accepted", {"accepted": True, "warnings": ["--mamba-scheduler-strategy: deprecated"]}, "disagree"),
        ("accepted", {"accepted": True, "warnings": ["mentions --mamba-scheduler-strategy only"]}, "agree"),
        ("refused", {"accepted": True}, "disagree"),
        ("accepted", {"accepted": False, "error_type": "ValueError", "error": "unrelated"}, "error"),
    ],
)  # fmt: skip
def test_probes_hold_the_dialect_to_what_the_release_does_with_an_old_flag(expect, parser, status):
    probe = Probe(name="p", target="qwen-mtp", args=("--mamba-scheduler-strategy", "extra_buffer"),
                  names="--mamba-scheduler-strategy")  # fmt: skip
    cell = Cell("old-names", "qwen-mtp", probe=probe)
    assert compare("x", cell, _kit(expect=expect), parser).status == status


def test_env_probes_tell_a_notice_from_silence_and_silence_proves_nothing():
    probe = Probe(
        name="p", target="qwen-mtp", env={"SGLANG_ENABLE_SPEC_V2": "1"}, names="SGLANG_ENABLE_SPEC_V2"
    )
    cell = Cell("old-names", "qwen-mtp", probe=probe)
    notice = {
        "accepted": True,
        "warnings": ["SGLANG_ENABLE_SPEC_V2 has been removed: speculative decoding ..."],
    }
    quiet = {"accepted": True, "warnings": []}
    assert compare("0.5.16", cell, _kit(expect="warned"), notice).status == "agree"
    assert compare("0.5.16", cell, _kit(expect="silent"), notice).status == "disagree"
    # Said nothing: whether the release ignores the variable or reads it quietly cannot be seen.
    for expect in ("silent", "accepted"):
        outcome = compare("0.5.21", cell, _kit(expect=expect), quiet)
        assert outcome.status == "unverified" and outcome.status != "agree"
    assert compare("0.5.21", cell, _kit(expect="warned"), quiet).mark == "silent, kit says warned"
    report = Report(outcomes=[compare("0.5.21", cell, _kit(expect="silent"), quiet)])
    assert report.counts()["unverified"] == 1 and report.disagreements == []


def test_cells_are_the_product_of_each_groups_axes_per_target():
    cells = cells_of(MATRIX, ["mamba"])
    group = next(g for g in MATRIX.groups if g.name == "mamba")
    size = 1
    for values in group.axes.values():
        size *= len(values)
    assert len(cells) == size * len(group.targets)
    assert len({c.key for c in cells}) == len(cells)
    assert all(c.group == "mamba" for c in cells)
    probes = cells_of(MATRIX, ["old-names"])
    assert [c.probe.name for c in probes] == [p.name for p in MATRIX.probes]


def test_every_matrix_release_has_exactly_one_dialect_and_ci_covers_every_dialect():
    used = {dialect_for(release).name for release in MATRIX.releases}
    assert used == set(list_dialects()), "a dialect no release in the matrix exercises"
    assert {dialect_for(r).name for r in MATRIX.ci.releases} == set(list_dialects())
    assert set(MATRIX.ci.releases) <= set(MATRIX.releases)
    assert len(cells_of(MATRIX, keys=MATRIX.ci.cells)) == len(MATRIX.ci.cells)
    with pytest.raises(InputError, match="not in the matrix"):
        cells_of(MATRIX, keys=["qwen-base no-such=1"])


def test_every_image_speaks_the_dialect_its_sglang_falls_in():
    for manifest in load_all():
        assert manifest.dialect == dialect_for(manifest.pins.sglang).name, manifest.name


def test_dialect_ranges_do_not_overlap_or_leave_a_gap_inside_the_matrix():
    with pytest.raises(InputError, match=r"0 dialects cover sglang 0\.5\.8"):
        dialect_for("0.5.8")
    with pytest.raises(InputError, match="not a version"):
        dialect_for("latest")


def test_every_dialect_rule_names_its_source_and_every_error_rule_sglangs_words():
    for name in list_dialects():
        for rule in load_dialect(name).rules:
            assert rule.source, f"{name}:{rule.id} has no source"
            if rule.severity == "error":
                assert rule.rejects, f"{name}:{rule.id}"


def test_the_kit_side_of_a_cell_is_kit_validates_path(tmp_path):
    made = Releases(tmp_path)
    side = kit_side(
        Cell("mamba", "qwen-base", ("mamba_cache=no_buffer", "overlap_schedule=false")), "0.5.23", made
    )
    assert isinstance(side, KitSide)
    assert side.dialect == "sglang-0.5.21"
    assert "--disable-overlap-schedule" in side.request["args"]
    assert side.request["stages"] == ["load"] and side.request["emulate"]["capability"] == [12, 0]
    # tiny runs on the CPU: no emulated GPU, no load stage.
    tiny = kit_side(Cell("tp", "tiny", ("tp=1",)), "0.5.9", made)
    assert tiny.request["emulate"] is None and "stages" not in tiny.request
    assert tiny.dialect == "sglang-0.5.9"


def test_a_cell_the_catalog_refuses_is_skipped_with_the_reason(tmp_path):
    side = kit_side(Cell("g", "qwen-mtp", ("speculative.num_steps=0",)), "0.5.23", Releases(tmp_path))
    assert isinstance(side, str) and "speculative.num_steps" in side


def test_companion_variants_exist_only_where_a_companion_filled_in_intent(tmp_path):
    made = Releases(tmp_path)
    old = companion_cells(Cell("attention", "qwen-base", ("attention_backend=auto",)), "0.5.9", made)
    assert [c.without for c in old] == ["sm120-hybrid-triton"]
    assert companion_cells(Cell("attention", "qwen-base", ("attention_backend=triton",)), "0.5.9", made) == []


def test_fate_of_an_old_name_follows_renamed_removed_and_deprecated():
    d = load_dialect("sglang-0.5.9")
    assert fate(d, "--mamba-scheduler-strategy") == "accepted"
    newer = d.model_copy(update={"renamed": {"--a": "--b"}})
    assert fate(newer, "--a") == "refused"


def test_the_table_counts_cells_and_names_disagreements():
    kit = _kit()
    report = Report(releases=("0.5.9", "0.5.23"), seconds=12.0)
    report.outcomes = [
        compare("0.5.9", CELL, kit, {"accepted": True}),
        compare(
            "0.5.23",
            CELL,
            kit,
            {"accepted": False, "stage": "parser", "error_type": "AssertionError", "error": "a|b"},
        ),
    ]
    not_run = {"accepted": True, "load": {"ran": False, "why": "ImportError: x"}}
    report.outcomes.append(compare("0.5.9", Cell("g", "qwen-mtp", ("x=1",)), kit, not_run))
    text = render_markdown(report, MATRIX, command="scripts/conformance", when="now")
    assert "- cells: 3 run on 2 releases" in text
    assert "- agree: 1; unverified: 0 (SGLang said nothing that shows who is right); not run: 1" in text
    assert "- disagreements: **1**" in text
    assert "- not run: `qwen-mtp x=1` on 0.5.9: the parser accepts; the load stage did not run" in text
    assert "| `qwen-mtp x=1` | – load not run |  |" in text
    assert "a\\|b" in text  # a pipe in SGLang's words does not break the table
    assert "| `qwen-base mamba_cache=no_buffer` | ok | **≠** SGLang refuses (parser) |" in text


def test_a_matrix_file_is_checked_like_every_data_file():
    with pytest.raises(Exception, match="releases"):
        read_matrix_toml(
            'releases = ["0.5.9", "0.5.9"]\n[ci]\nreleases = []\ncells = []\n'
            '[[groups]]\nname="g"\ntargets=[]\naxes={}\n'
        )
