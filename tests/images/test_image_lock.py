"""The image lock (pip freeze --all at build) and the diff between two of them."""

from __future__ import annotations

from kit.images.lock import Change, Package, diff_locks, normalize, parse_lock

A = """\
# recorded by the kit
aiohttp==3.14.5
Flashinfer_Python==0.6.7.post3
nvidia-nccl-cu12==2.27.5
torch==2.9.1+cu129
sglang==0.5.10.post1
pip==26.0
weird line that pip would not write
tiny @ file:///opt/kit/wheels/tiny-0.1-py3-none-any.whl
-e git+https://github.com/x/y@abc#egg=local_pkg
"""

B = """\
aiohttp==3.14.5
flashinfer-python==0.7.2
nvidia-nccl-cu13==2.30.7
torch==2.14.1+cu130
sglang==0.5.23
pip==26.0
tiny @ file:///opt/kit/wheels/tiny-0.2-py3-none-any.whl
"""


def test_parse_lock():
    lock = parse_lock(A)
    assert lock["flashinfer-python"] == Package("Flashinfer_Python", "0.6.7.post3")
    assert lock["torch"].version == "2.9.1+cu129"
    assert lock["tiny"].version == "@ file:///opt/kit/wheels/tiny-0.1-py3-none-any.whl"
    assert lock["local-pkg"].version.startswith("-e git+")
    assert "weird" not in " ".join(lock)
    assert normalize("Foo.Bar_baz") == "foo-bar-baz"


def test_diff_locks():
    diff = diff_locks(parse_lock(A), parse_lock(B), a_name="old", b_name="new")
    assert (diff.a, diff.b) == ("old", "new")
    assert [p.name for p in diff.added] == ["nvidia-nccl-cu13"]
    assert [p.name for p in diff.removed] == ["local_pkg", "nvidia-nccl-cu12"]
    assert diff.changed == [
        Change("flashinfer-python", "0.6.7.post3", "0.7.2"),
        Change("sglang", "0.5.10.post1", "0.5.23"),
        Change(
            "tiny",
            "@ file:///opt/kit/wheels/tiny-0.1-py3-none-any.whl",
            "@ file:///opt/kit/wheels/tiny-0.2-py3-none-any.whl",
        ),
        Change("torch", "2.9.1+cu129", "2.14.1+cu130"),
    ]
    assert diff.unchanged == 2 and not diff.same


def test_an_image_against_itself_is_the_same():
    lock = parse_lock(A)
    diff = diff_locks(lock, lock)
    assert diff.same and diff.unchanged == len(lock)
