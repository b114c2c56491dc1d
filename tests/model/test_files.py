"""The standard-library file checks: safetensors headers, the size a header implies, every cut point
of a shard found, and no input that makes them raise instead of answering."""

from __future__ import annotations

import json

from fake_hub import model_files, safetensors_bytes, write_folder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kit.model import files

STATUSES = {files.OK, files.MISSING, files.TRUNCATED, files.TOO_LARGE, files.CORRUPT}


def test_header_size_and_a_complete_folder(tmp_path):
    folder = write_folder(tmp_path / "m", model_files(shard_bytes=1000))
    shard = folder / "model-00001-of-00003.safetensors"
    assert files.size_from_header(*files.read_header(str(shard))) == shard.stat().st_size
    rows = files.check_folder(str(folder))
    assert all(r.ok for r in rows), [r for r in rows if not r.ok]
    assert sorted(r.name for r in rows if r.kind == "shard") == files.shard_names(str(folder))
    assert {r.kind for r in rows} == {"config", "tokenizer", "index", "shard"}


def test_every_cut_of_a_shard_is_found_without_a_hub_listing(tmp_path):
    data = safetensors_bytes({"w": 300})
    path = tmp_path / "x.safetensors"
    for cut in range(0, len(data), 7):
        path.write_bytes(data[:cut])
        row = files.check_shard(str(path), "x.safetensors", None, deep=True)
        assert row.status in (files.TRUNCATED, files.CORRUPT), (cut, row)
    path.write_bytes(data + b"extra")
    assert files.check_shard(str(path), "x.safetensors", None, deep=True).status == files.TOO_LARGE


def test_the_hub_size_wins_and_stat_only_mode_reads_no_header(tmp_path):
    path = tmp_path / "x.safetensors"
    path.write_bytes(b"\xff" * 100)  # not a safetensors file at all
    assert files.check_shard(str(path), "x", 100, deep=False).status == files.OK  # sizes only
    assert files.check_shard(str(path), "x", 100, deep=True).status == files.CORRUPT
    assert files.check_shard(str(path), "x", 120, deep=False).status == files.TRUNCATED


def test_a_broken_index_and_a_missing_vocabulary_are_named(tmp_path):
    contents = model_files(shard_bytes=100)
    contents["model.safetensors.index.json"] = b"{not json"
    del contents["tokenizer.json"]
    rows = {r.name: r for r in files.check_folder(str(write_folder(tmp_path / "m", contents)))}
    assert rows["model.safetensors.index.json"].status == files.CORRUPT
    assert rows["tokenizer.json"].status == files.MISSING


def test_the_script_form_prints_json_rows(tmp_path, capsys):
    folder = write_folder(tmp_path / "m", model_files(shard_bytes=100))
    assert files.main([str(folder)]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(row["status"] == "ok" for row in rows)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=600), st.one_of(st.none(), st.integers(0, 700)))
def test_any_bytes_get_an_answer_never_an_exception(tmp_path, data, expected):
    path = tmp_path / "fuzz.safetensors"
    path.write_bytes(data)
    row = files.check_shard(str(path), "fuzz.safetensors", expected, deep=True)
    assert row.status in STATUSES
    if row.ok:
        assert files.size_from_header(*files.read_header(str(path))) == len(data)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.text(min_size=1, max_size=8), st.integers(0, 64), min_size=1, max_size=6))
def test_any_valid_shard_passes(tmp_path, tensors):
    path = tmp_path / "ok.safetensors"
    data = safetensors_bytes(tensors)
    path.write_bytes(data)
    assert files.check_shard(str(path), "ok", len(data), deep=True).ok
