"""The check venvs' locks (kit/check/locks/): one per release of the matrix and one for the shared
base, each holding deps.toml's pins and the release's own wheel pins, every package hashed; a pin
edited in deps.toml without relocking is named (`python -m kit.check.locks --check`, pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.check import locks
from kit.check.matrix import load_matrix
from kit.images.image_lock import header, parse_entries


@pytest.mark.parametrize("release", [None, *load_matrix().releases])
def test_every_check_venv_has_a_lock_that_holds_deps_toml(release):
    text = locks.lock_file(release).read_text(encoding="utf-8")
    assert locks.check_text(release, text) == []
    entries = parse_entries(text)
    assert entries["torch"].version.endswith("+cpu")  # the CPU build, never PyPI's CUDA one
    if release is not None:
        assert entries["sglang"].version == release
        pins = dict(p.split("=", 1) for p in header(text)["wheel-pins"].split() if "=" in p)
        assert entries["transformers"].version == pins.get("transformers", entries["transformers"].version)
    assert header(text)["python"] and header(text)["platform"].startswith("x86_64-manylinux_")


def test_the_release_pins_come_from_its_wheel():
    requires = ["transformers==5.19.0", "xgrammar==0.2.7", "torch==2.14.1", "kernels ; extra == 'x'"]
    assert locks.wheel_pins_from(requires) == {"transformers": "5.19.0", "xgrammar": "0.2.7"}
    text = locks.lock_file("0.5.9").read_text(encoding="utf-8")
    assert parse_entries(text)["transformers"].version == "4.57.1"  # 0.5.9's METADATA pin


def test_a_deps_toml_pin_edited_without_relocking_is_named(tmp_path: Path, monkeypatch, capsys):
    edited = tmp_path / "deps.toml"
    edited.write_text(locks.DEPS.read_text().replace('"transformers==5.3.0"', '"transformers==5.4.0"'))
    monkeypatch.setattr(locks, "DEPS", edited)
    problems = locks.check_text("0.5.10.post1", locks.lock_file("0.5.10.post1").read_text(encoding="utf-8"))
    assert [p.package for p in problems] == ["transformers", "requirements"]
    assert "deps.toml pins 5.4.0; the lock has 5.3.0" in problems[0].detail
    assert locks.main(["--check"]) == 1
    assert "sglang-0.5.10.post1.lock: transformers" in capsys.readouterr().out


def test_a_host_with_another_python_resolves_as_before(monkeypatch):
    assert locks.lock_for("0.5.23") is not None
    monkeypatch.setattr(locks, "host_python", lambda: "3.99")
    assert locks.lock_for("0.5.23") is None
