"""Whatever a catalog file or a --set holds, the CLI answers with one line, never a traceback.

Hypothesis writes catalog files (mutations of the real tiny.toml, and garbage) into a scratch
catalog ($KIT_CATALOG_DIR) and throws --set overrides at `kit validate` and `kit render`.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from catalog_helpers import copy_catalog, dumps_toml, run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kit.catalog._schema import Profile

TINY = tomllib.loads((Path(__file__).resolve().parents[2] / "kit/catalog/models/tiny.toml").read_text())

scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(min_size=1, max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(node, prefix=()):
    if isinstance(node, dict):
        for key, value in node.items():
            yield (*prefix, key)
            yield from _paths(value, (*prefix, key))


PATHS = list(_paths(TINY))


@st.composite
def mutated(draw):
    doc = tomllib.loads(dumps_toml(TINY))  # a deep copy
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(PATHS))
        parent = doc
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if not isinstance(parent, dict):
            continue
        action = draw(st.sampled_from(["delete", "replace", "add"]))
        if action == "delete":
            parent.pop(path[-1], None)
        elif action == "replace":
            parent[path[-1]] = draw(values)
        else:
            parent[draw(st.text(min_size=1, max_size=10))] = draw(values)
    return dumps_toml(doc)


def _assert_one_line_or_success(code: int, out: str, err: str) -> None:
    assert "Traceback" not in out + err
    assert code in (0, 1, 2), (code, err)
    if code == 2:
        assert err.startswith("kit: error: ") and err.count("\n") == 1, err


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return copy_catalog(tmp_path_factory.mktemp("fuzz"))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.one_of(mutated(), st.text(max_size=200)))
def test_generated_catalog_files_never_trace(scratch, monkeypatch, text):
    (scratch / "models" / "tiny.toml").write_text(text, encoding="utf-8")
    monkeypatch.setenv("KIT_CATALOG_DIR", str(scratch))
    for argv in (["validate", "tiny"], ["render", "sglang", "tiny"]):
        _assert_one_line_or_success(*run_cli(argv))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    # Unknown to the schema, not merely absent from tiny's profile (extra_args is a real key).
    key=st.text(min_size=1, max_size=12).filter(
        lambda k: k not in TINY["profiles"]["tiny"] and (k == "extends" or k not in Profile.model_fields)
    )
)
def test_an_unknown_key_in_a_profile_is_exit_2(scratch, monkeypatch, key):
    doc = tomllib.loads(dumps_toml(TINY))
    doc["profiles"]["tiny"][key] = 1
    (scratch / "models" / "tiny.toml").write_text(dumps_toml(doc), encoding="utf-8")
    monkeypatch.setenv("KIT_CATALOG_DIR", str(scratch))
    code, _, err = run_cli(["validate", "tiny"])
    if key == "extends":  # a real key: an unknown parent, still one line
        assert code == 2 and "extends" in err
        return
    assert code == 2 and err.count("\n") == 1 and "unknown key (allowed keys:" in err


override_keys = st.one_of(
    st.sampled_from(["tp", "mamba_cache", "speculative.num_steps", "timing.deadlines.init", "env.X",
                     "container.ulimits.memlock", "container.port", "attention_backend", "extra_args"]),
    st.text(max_size=20),
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(
    target=st.sampled_from(["tiny", "qwen-base", "qwen-mtp"]),
    items=st.lists(st.tuples(override_keys, st.text(max_size=20)), min_size=1, max_size=3),
    command=st.sampled_from([["validate"], ["render", "sglang"], ["render", "compose"], ["render", "lws"]]),
)
def test_generated_overrides_never_trace(target, items, command):
    argv = [*command, target]
    for key, value in items:
        argv += ["--set", f"{key}={value}"]
    _assert_one_line_or_success(*run_cli(argv))


@pytest.mark.parametrize("item", ["tp=0", "nope=1", "speculative.num_steps=x", "mamba_cache=fast", "tp"])
def test_bad_overrides_are_one_line_exit_2(item):
    code, out, err = run_cli(["validate", "qwen-mtp", "--set", item])
    assert (code, out) == (2, "")
    assert err.startswith("kit: error: --set") and err.count("\n") == 1
