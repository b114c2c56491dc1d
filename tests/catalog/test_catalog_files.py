"""The catalog loader: every problem in a data file is one line naming the file, the key and the fix."""

from __future__ import annotations

import json
import tomllib

import pytest
from catalog_helpers import copy_catalog, dumps_toml

from kit.catalog import load_catalog
from kit.errors import InputError
from kit.launch import resolve


def _edit(root, name, change):
    path = root / "models" / f"{name}.toml"
    data = tomllib.loads(path.read_text())
    change(data)
    path.write_text(dumps_toml(data))
    return path


def _error(root) -> str:
    with pytest.raises(InputError) as info:
        load_catalog(root)
    line = info.value.one_line()
    assert "\n" not in line
    return line


def test_the_kits_catalog_loads_with_its_targets():
    catalog = load_catalog()
    assert sorted(catalog.targets) == [
        "qwen-base", "qwen-mtp", "qwen-tiny", "qwen-tiny-mtp", "tiny", "tiny-qwen",
    ]  # fmt: skip
    assert set(catalog.models["qwen3.5-122b-a10b"].profiles) == {"base", "mtp"}
    qwen = catalog.models["qwen3.5-122b-a10b"].facts
    assert (qwen.layers, qwen.full_attention_layers, qwen.attention_heads, qwen.kv_heads) == (48, 12, 32, 2)
    assert qwen.architecture == "Qwen3_5MoeForConditionalGeneration"
    config = json.loads(catalog.models["qwen3.5-122b-a10b"].config_path.read_text())
    assert config["architectures"] == [qwen.architecture]
    assert config["text_config"]["num_hidden_layers"] == qwen.layers
    assert config["text_config"]["layer_types"].count("full_attention") == qwen.full_attention_layers


def test_every_estimate_is_marked_with_its_reason():
    facts = load_catalog().models["qwen3.5-122b-a10b"].facts
    for key in ("kv_heads", "head_dim", "linear_value_heads"):
        assert facts.sources[key].startswith("estimate:")


def test_mtp_extends_base_and_keeps_its_deadlines():
    model = load_catalog().models["qwen3.5-122b-a10b"]
    base, mtp = model.profile("base"), model.profile("mtp")
    assert (mtp.tp, mtp.context_length, mtp.mem_fraction, mtp.reasoning_parser) == (4, 262144, 0.8, "qwen3")
    assert mtp.speculative.model_dump() == {
        "algorithm": "NEXTN",
        "num_steps": 3,
        "eagle_topk": 1,
        "num_draft_tokens": 4,
    }
    assert base.speculative is None
    assert mtp.timing.deadlines.capture > base.timing.deadlines.capture
    assert mtp.timing.deadlines.init == base.timing.deadlines.init
    assert base.timing.stall_windows.init <= 60 < base.timing.deadlines.init


def test_unknown_key_names_file_key_and_allowed_keys(tmp_path):
    root = copy_catalog(tmp_path)
    path = _edit(root, "tiny", lambda d: d["profiles"]["tiny"].update(tp_size=2))
    line = _error(root)
    assert line.startswith(f"{path}: profiles.tiny.tp_size: unknown key (allowed keys: description, tp,")


def test_bad_value_names_the_key(tmp_path):
    root = copy_catalog(tmp_path)
    path = _edit(root, "tiny", lambda d: d["profiles"]["tiny"]["timing"]["deadlines"].update(init=-1))
    assert _error(root).startswith(
        f"{path}: profiles.tiny.timing.deadlines.init: Input should be greater than 0"
    )


def test_model_facts_errors(tmp_path):
    root = copy_catalog(tmp_path)
    path = _edit(root, "tiny", lambda d: d["model"].pop("layers"))
    assert _error(root).startswith(f"{path}: model.layers: missing (allowed keys: name, hf_id, path,")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda d: d["profiles"]["tiny"].update(extends="nope"),
            "profiles.tiny.extends: unknown profile 'nope'",
        ),
        (lambda d: d["profiles"]["tiny"].update(extends="tiny"), "profiles.tiny.extends: extends itself"),
        (
            lambda d: d["targets"]["tiny"].update(profile="nope"),
            "targets.tiny.profile: unknown profile 'nope'",
        ),
        (lambda d: d["targets"]["tiny"].update(gpus=2), "targets.tiny.hardware: a target that asks for GPUs"),
        (lambda d: d["targets"]["tiny"].update(gpus=2, hardware="h100"), "unknown hardware 'h100'"),
        (
            lambda d: d["targets"]["tiny"].update(gpus="tp"),
            "targets.tiny.hardware: a target that asks for GPUs",
        ),
        (lambda d: d["targets"]["tiny"].update(gpus="all"), "targets.tiny.gpus"),
        (lambda d: d["model"].update(name="other"), "model.name: 'other' differs from the file name"),
        (
            lambda d: d["model"].update(config_json="missing.json"),
            "model.config_json: cannot read missing.json",
        ),
        (lambda d: d["model"].update(kv_heads=3), "kv_heads: must divide attention_heads"),
        (lambda d: d.update(profiles=[]), "profiles: Input should be a valid dictionary"),
    ],
)
def test_structural_errors(tmp_path, change, expected):
    root = copy_catalog(tmp_path)
    _edit(root, "tiny", change)
    assert expected in _error(root)


def test_target_names_are_global(tmp_path):
    root = copy_catalog(tmp_path)
    _edit(root, "tiny", lambda d: d["targets"].update({"qwen-base": {"profile": "tiny", "image": "x"}}))
    assert "targets.qwen-base: also defined by model" in _error(root)


def test_invalid_toml_is_one_line(tmp_path):
    root = copy_catalog(tmp_path)
    (root / "models" / "tiny.toml").write_text("[model\nname=")
    assert "not valid TOML" in _error(root)


def test_a_new_model_is_one_file(tmp_path, monkeypatch):
    root = copy_catalog(tmp_path)
    data = tomllib.loads((root / "models" / "tiny.toml").read_text())
    data["model"]["name"] = "tiny2"
    data["targets"] = {"tiny2": {"profile": "tiny", "image": "sglang-0.5.23-cpu"}}
    (root / "models" / "tiny2.toml").write_text(dumps_toml(data))
    monkeypatch.setenv("KIT_CATALOG_DIR", str(root))
    assert resolve("tiny2").argv == resolve("tiny").argv
