"""`kit image diff A B --files`: two filesystems compared file by file (pure over tar streams), and
the real command on two small images built here in seconds."""

from __future__ import annotations

import io
import json
import tarfile
import uuid

import pytest
from image_helpers import ROOT, run_kit

from kit.images.files import MayDiffer, compare_files, entries_of_tar, may_differ


def _tar(members: dict[str, bytes | str | None], *, mode: int = 0o644, uid: int = 0) -> io.BytesIO:
    """A tar as `docker export` writes one: bytes are files, 'dir' a folder, '->x' a symlink."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, body in members.items():
            info = tarfile.TarInfo(name)
            info.mode, info.uid, info.mtime = mode, uid, 1
            if body == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif isinstance(body, str) and body.startswith("->"):
                info.type, info.linkname = tarfile.SYMTYPE, body[2:]
                tar.addfile(info)
            else:
                data = body or b""
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    out.seek(0)
    return out


def test_entries_hash_files_and_keep_type_mode_owner_size_and_link_targets():
    entries = entries_of_tar(
        _tar({"etc": "dir", "etc/os-release": b"bookworm\n", ".dockerenv": b"", "bin": "->usr/bin"})
    )
    assert set(entries) == {"/etc", "/etc/os-release", "/.dockerenv", "/bin"}
    release = entries["/etc/os-release"]
    assert (release.kind, release.mode, release.owner, release.size) == ("file", "0644", "0:0", 9)
    assert release.content == "sha256:" + __import__("hashlib").sha256(b"bookworm\n").hexdigest()
    assert entries["/bin"].kind == "symlink" and entries["/bin"].content == "-> usr/bin"
    assert entries["/etc"].kind == "dir" and entries["/etc"].content == ""


def test_times_do_not_count_but_content_mode_owner_and_presence_do():
    a = entries_of_tar(_tar({"a": b"1", "b": b"2", "c": b"3", "gone": b"x"}))
    b_tar = _tar({"a": b"1", "b": b"22", "new": b"y"})
    b = entries_of_tar(b_tar)
    b["/c"] = entries_of_tar(_tar({"c": b"3"}, mode=0o755, uid=1000))["/c"]
    found = compare_files(a, b, a_name="one", b_name="two")
    rows = {d.path: d.what for d in found.differences}
    assert rows == {
        "/b": ("size 1 -> 2", "content"),
        "/c": ("mode 0644 -> 0755", "owner 0:0 -> 1000:0"),
        "/gone": ("only in A",),
        "/new": ("only in B",),
    }
    assert (found.paths, found.differing, found.documented, found.same) == (5, 4, 0, False)


def test_a_documented_path_is_counted_apart_with_its_reason_never_dropped():
    a = entries_of_tar(_tar({"etc/hostname": b"one", "opt/kit/x.pyc": b"1"}))
    b = entries_of_tar(_tar({"etc/hostname": b"two", "opt/kit/x.pyc": b"2"}))
    allowed = (MayDiffer("/etc/hostname", "the engine writes it"),)
    found = compare_files(a, b, allowed)
    assert (found.differing, found.documented) == (1, 1)
    assert [(d.path, d.reason) for d in found.differences] == [
        ("/opt/kit/x.pyc", ""),
        ("/etc/hostname", "the engine writes it"),
    ]
    same = compare_files(a, dict(a), allowed)
    assert same.same and same.differences == []


def test_the_documented_list_is_short_every_entry_has_its_reason_and_docs_show_each():
    entries = may_differ()
    assert 0 < len(entries) <= 12
    assert all(e.pattern.startswith("/") and len(e.reason) > 20 for e in entries)
    docs = (ROOT / "docs" / "images.md").read_text(encoding="utf-8")
    table = docs.split("### Two builds, file by file", 1)[1].split("Measured on", 1)[0]
    shown = {
        cell
        for row in table.splitlines()
        if row.startswith("| `")
        for cell in row.split("|")[1].split("`")[1::2]
    }
    assert shown == {e.pattern for e in entries}


# -- the real command: two small images, built here in seconds -------------------------------------


@pytest.fixture(scope="module")
def two_small_images():
    """Two images FROM the local Debian base, one file apart."""
    from kit.errors import EnvironmentProblem
    from kit.runtime.engine import client

    try:
        engine = client()
    except EnvironmentProblem as exc:
        pytest.skip(exc.one_line())
    tags = [f"kit-test/files-diff:{uuid.uuid4().hex[:8]}-{n}" for n in ("a", "b")]
    for tag, body in zip(tags, ("one", "two"), strict=True):
        dockerfile = (
            f"FROM debian:bookworm-slim\nRUN echo {body} > /opt/differs && echo same > /opt/same\n"
        ).encode()
        context = io.BytesIO()
        with tarfile.open(fileobj=context, mode="w") as tar:
            info = tarfile.TarInfo("Dockerfile")
            info.size = len(dockerfile)
            tar.addfile(info, io.BytesIO(dockerfile))
        context.seek(0)
        engine.images.build(
            fileobj=context, custom_context=True, tag=tag, rm=True, labels={"io.kit.test": "files"}
        )
    yield tags
    for tag in tags:
        engine.images.remove(tag, force=True)


@pytest.mark.docker
def test_diff_files_names_the_differing_file_and_exits_1(two_small_images, capsys):
    a, b = two_small_images
    assert run_kit(["image", "diff", a, b, "--files", "--json"]) == 1
    captured = capsys.readouterr()
    found = json.loads(captured.out)
    assert (found["differing"], found["documented"]) == (1, 0)
    assert found["differences"] == [{"path": "/opt/differs", "what": ["content"], "reason": ""}]
    assert found["paths"] > 1000 and found["paths_a"] == found["paths_b"]
    assert "1 of" in captured.err and "paths differ" in captured.err

    assert run_kit(["image", "diff", a, a, "--files"]) == 0
    out = capsys.readouterr().out
    assert ": 0 of " in out and "0 more on the documented list" in out


@pytest.mark.docker
def test_diff_of_locks_against_an_image_that_is_not_a_kit_image_is_bad_input(two_small_images, capsys):
    from kit.runtime.engine import client

    a, _ = two_small_images
    assert run_kit(["image", "diff", a, a]) == 2
    err = capsys.readouterr().err
    assert "it is not a kit image" in err and "--files" in err and "rebuild" not in err
    assert not client().containers.list(all=True, filters={"label": ["io.kit.managed=verify"]})
