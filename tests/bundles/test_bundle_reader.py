"""The reader trusts nothing: truncation, foreign members, unsafe names, links, a newer format, a
missing or damaged file are each one InputError (exit 2 at the CLI) naming what is wrong, and the
reader writes nothing anywhere."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import zlib

import pytest
from bundle_helpers import run_kit
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kit.diagnose import bundle as bundle_module
from kit.diagnose.bundle import read_bundle, tar_gz
from kit.errors import InputError


def members_of(path) -> tuple[str, dict[str, bytes]]:
    bundle = read_bundle(path)
    return bundle.name, dict(bundle.members)


def repack(tmp_path, name: str, members: dict[str, bytes], extra: list[tarfile.TarInfo] = (), data=None):
    """A tar.gz of NAME/member entries plus raw extra entries (with `data` bodies)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for rel, body in members.items():
            info = tarfile.TarInfo(f"{name}/{rel}")
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
        for info in extra:
            tar.addfile(info, io.BytesIO(data or b""))
    path = tmp_path / "repacked.tar.gz"
    path.write_bytes(gzip.compress(raw.getvalue()))
    return path


def problem(path) -> str:
    with pytest.raises(InputError) as caught:
        read_bundle(path)
    return caught.value.one_line()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.floats(min_value=0.0, max_value=0.999))
def test_a_truncated_bundle_is_refused_or_reads_back_whole(hung_bundle, tmp_path, cut):
    data = hung_bundle.read_bytes()
    short = tmp_path / "short.tar.gz"
    short.write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(InputError) as caught:
        read_bundle(short)
    assert str(short) in caught.value.one_line()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(position=st.integers(min_value=0), flip=st.integers(min_value=1, max_value=255))
def test_a_flipped_byte_is_refused_or_changes_nothing_that_matters(hung_bundle, tmp_path, position, flip):
    data = bytearray(hung_bundle.read_bytes())
    position %= len(data)
    data[position] ^= flip
    damaged = tmp_path / "damaged.tar.gz"
    damaged.write_bytes(bytes(data))
    try:
        name, members = members_of(damaged)
    except InputError:
        return
    # gzip's header (mtime, flags) can change without touching the content; the content cannot.
    assert (name, members) == members_of(hung_bundle)


_unsafe_names = st.sampled_from(
    [
        "../evil.txt",
        "/etc/passwd",
        "kit-tiny-2c8fd4a6-hung/../../evil.txt",
        "kit-tiny-2c8fd4a6-hung/stacks/../../x.txt",
        "kit-tiny-2c8fd4a6-hung\\..\\evil.txt",
        "kit-tiny-2c8fd4a6-hung/./summary.md",
        "kit-tiny-2c8fd4a6-hung//summary.md",
    ]
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=_unsafe_names)
def test_unsafe_member_names_are_refused_and_nothing_is_written(hung_bundle, tmp_path, name):
    bundle_name, members = members_of(hung_bundle)
    info = tarfile.TarInfo(name)
    info.size = 4
    path = repack(tmp_path, bundle_name, members, [info], b"evil")
    before = sorted(p.name for p in tmp_path.parent.rglob("*"))
    message = problem(path)
    assert "unsafe path" in message or "outside the bundle's folder" in message
    assert sorted(p.name for p in tmp_path.parent.rglob("*")) == before
    assert not (tmp_path / "evil.txt").exists()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rel=st.text(alphabet="abcdefghijklmnopqrstuvwxyz./_-", min_size=1, max_size=30).filter(
        lambda s: s.strip("/") and ".." not in s and "//" not in s and not s.startswith(("/", "."))
    )
)
def test_a_foreign_member_is_refused(hung_bundle, tmp_path, rel):
    bundle_name, members = members_of(hung_bundle)
    if rel.rstrip("/") in members or rel.rstrip("/") in ("log", "stacks", "log/tails"):
        return
    if any(part in (".", "") for part in rel.rstrip("/").split("/")):
        return
    info = tarfile.TarInfo(f"{bundle_name}/{rel}")
    info.size = 3
    message = problem(repack(tmp_path, bundle_name, members, [info], b"abc"))
    assert "foreign" in message or "unsafe" in message or "not listed" in message


def test_a_stacks_file_not_listed_in_bundle_json_is_foreign(hung_bundle, tmp_path):
    bundle_name, members = members_of(hung_bundle)
    members["stacks/TP7.txt"] = b"injected"
    assert "foreign member 'stacks/TP7.txt'" in problem(repack(tmp_path, bundle_name, members))


@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.CHRTYPE, tarfile.FIFOTYPE])
def test_links_and_devices_are_refused(hung_bundle, tmp_path, kind):
    bundle_name, members = members_of(hung_bundle)
    del members["summary.md"]
    info = tarfile.TarInfo(f"{bundle_name}/summary.md")
    info.type = kind
    info.linkname = "/etc/passwd"
    assert "link or device" in problem(repack(tmp_path, bundle_name, members, [info]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    version=st.integers(min_value=2, max_value=10**9),
    kit_version=st.from_regex(r"[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}", fullmatch=True),
)
def test_a_bundle_from_a_newer_kit_says_so(hung_bundle, tmp_path, version, kit_version):
    bundle_name, members = members_of(hung_bundle)
    meta = json.loads(members["bundle.json"])
    meta["format"] = version
    meta["kit_version"] = kit_version
    members["bundle.json"] = json.dumps(meta).encode()
    message = problem(repack(tmp_path, bundle_name, members))
    assert f"made by a newer kit ({kit_version}, bundle format {version})" in message
    assert "upgrade the kit" in message


@pytest.mark.parametrize("version", [0, -1, "1", None, 1.5, True])
def test_a_bundle_without_a_valid_format_number_is_refused(hung_bundle, tmp_path, version):
    bundle_name, members = members_of(hung_bundle)
    meta = json.loads(members["bundle.json"])
    meta["format"] = version
    members["bundle.json"] = json.dumps(meta).encode()
    assert "no valid format number" in problem(repack(tmp_path, bundle_name, members))


def test_a_missing_file_is_named(hung_bundle, tmp_path):
    bundle_name, members = members_of(hung_bundle)
    del members["stacks/TP1.txt"]
    assert "bundle.json lists stacks/TP1.txt but the bundle has no such member" in problem(
        repack(tmp_path, bundle_name, members)
    )


def test_text_from_the_bundle_is_printed_without_control_characters(hung_bundle, tmp_path):
    bundle_name, members = members_of(hung_bundle)
    meta = json.loads(members["bundle.json"])
    meta["format"], meta["kit_version"] = 2, "9.9\x1b[2J\nrm -rf"
    members["bundle.json"] = json.dumps(meta).encode()
    message = problem(repack(tmp_path, bundle_name, members))
    assert "\x1b" not in message and "\n" not in message
    assert "made by a newer kit (9.9?[2J?rm -rf, bundle format 2)" in message


def test_a_changed_file_is_damaged(hung_bundle, tmp_path):
    bundle_name, members = members_of(hung_bundle)
    members["result.json"] = members["result.json"].replace(b'"hung"', b'"ready"')
    assert "result.json is damaged" in problem(repack(tmp_path, bundle_name, members))


def test_a_foreign_tar_is_not_a_kit_bundle(tmp_path):
    path = tmp_path / "other.tar.gz"
    path.write_bytes(tar_gz("project", {"README.md": b"hello", "src/x.py": b"print(1)"}))
    assert "foreign member 'project/README.md': not a kit bundle" in problem(path)


def test_a_tar_bomb_is_refused_before_it_is_unpacked(tmp_path, monkeypatch):
    monkeypatch.setattr(bundle_module, "MAX_TOTAL_BYTES", 4 << 20)  # the same check, at a size a test affords
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = b"\0" * (1 << 20)
    data = b"".join(compressor.compress(chunk) for _ in range(8)) + compressor.flush()
    path = tmp_path / "bomb.tar.gz"
    path.write_bytes(data)
    assert "more than any kit bundle" in problem(path)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=2000))
def test_random_bytes_are_refused(tmp_path, data):
    path = tmp_path / "random.tar.gz"
    path.write_bytes(data)
    problem(path)


def test_the_cli_says_one_line_exits_2_and_writes_nothing(hung_bundle, tmp_path, kit_cache):
    data = hung_bundle.read_bytes()
    short = tmp_path / "short.tar.gz"
    short.write_bytes(data[: len(data) // 2])
    for args in (["bundle", "show", str(short)], ["repro", str(short)], ["analyze", str(short)]):
        before = sorted(kit_cache.rglob("*"))
        proc = run_kit(*args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
        assert proc.stderr.startswith(f"kit: error: {short}: truncated")
        assert sorted(kit_cache.rglob("*")) == before
