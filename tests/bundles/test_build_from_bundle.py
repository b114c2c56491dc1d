"""`kit image build --from-bundle B`: a bundle's lock is untrusted input. It is shown first, and a
package outside the kit's own locks, a lock line that is not a pinned package with its hash, or a lock
without hashes is refused with exit 2 before any build (the build function is never reached)."""

from __future__ import annotations

from pathlib import Path

import pytest
from bundle_helpers import hung_input, run_kit

from kit.diagnose.bundle import build_members, write_bundle
from kit.diagnose.from_bundle import judge, kit_locks
from kit.diagnose.redact import Redactor
from kit.errors import KitError
from kit.images import build as build_module
from kit.images.image_lock import lock_digest

ROOT = Path(__file__).resolve().parents[2]
CPU = "sglang-0.5.23-cpu"
COMMITTED = (ROOT / "images" / f"{CPU}.lock").read_text(encoding="utf-8")
FOREIGN = "evilpkg==1.0 \\\n    --hash=sha256:" + "e" * 64 + "\n"


def _bundle(tmp_path: Path, lock_text: str, name: str = CPU) -> Path:
    fingerprint = {"format": 1, "image": {"name": name, "tag": f"kit/sglang:{name}"}, "launch": {}}
    bundle = hung_input(fingerprint=fingerprint, lock_text=lock_text)
    return write_bundle(tmp_path / "b.tar.gz", bundle.name, build_members(bundle, Redactor()))


@pytest.fixture
def builds(monkeypatch) -> list:
    """What reached the build function (nothing, for a refused bundle)."""
    reached: list = []

    def build_image(*args, **kwargs):
        reached.append((args, kwargs))
        raise KitError("the test stops here: nothing is built")

    monkeypatch.setattr(build_module, "build_image", build_image)
    return reached


def test_a_package_outside_the_kits_locks_is_named_and_refused_before_any_build(tmp_path, builds):
    path = _bundle(tmp_path, COMMITTED + FOREIGN)
    done = run_kit("image", "build", "--from-bundle", str(path))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "REFUSED evilpkg==1.0: in none of the kit's own locks" in done.stdout
    assert "evilpkg==1.0" in done.stderr and "--trust-bundle" in done.stderr
    assert builds == []
    assert done.stdout.index("its lock, before anything is built") < done.stdout.index("REFUSED")
    assert "torch==2.13.0+cpu (1 hash(es))" in done.stdout  # what matters is shown first


def test_a_changed_file_of_a_known_version_is_refused(tmp_path, builds):
    tampered = COMMITTED.replace(
        "torch==2.13.0+cpu \\\n    --hash=sha256:6746", "torch==2.13.0+cpu \\\n    --hash=sha256:0000", 1
    )
    assert tampered != COMMITTED
    done = run_kit("image", "build", "--from-bundle", str(_bundle(tmp_path, tampered)))
    assert done.returncode == 2 and builds == []
    assert "torch==2.13.0+cpu: a hash none of the kit's own locks carries" in done.stdout


@pytest.mark.parametrize(
    ("lock", "said"),
    [
        ("--index-url https://evil.example/simple\n" + COMMITTED, "lock line 1: not a pinned package"),
        (COMMITTED + "-e git+https://evil.example/x#egg=x\n", "not a pinned package or its hash"),
        ((ROOT / "tests/fixtures/locks/sglang-0.5.23-cpu.lock.txt").read_text(), "without a hash"),
    ],
)
def test_what_pip_would_act_on_beyond_pinned_hashed_packages_is_never_built_even_trusted(
    tmp_path, builds, lock, said
):
    done = run_kit("image", "build", "--from-bundle", str(_bundle(tmp_path, lock)), "--trust-bundle")
    assert done.returncode == 2 and builds == []
    assert said in done.stdout + done.stderr


def test_a_bundle_of_no_kit_manifest_is_never_built(tmp_path, builds):
    done = run_kit("image", "build", "--from-bundle", str(_bundle(tmp_path, COMMITTED, "not-a-kit-image")))
    assert done.returncode == 2 and builds == []
    assert "not-a-kit-image is not an image manifest of this kit" in done.stdout


def test_the_kits_own_lock_is_accepted_and_built_under_its_own_tag(tmp_path, builds):
    judged = judge(COMMITTED, CPU, [CPU], kit_locks([ROOT / "images"]))
    assert judged.fatal == [] and judged.refused == []
    done = run_kit("image", "build", "--from-bundle", str(_bundle(tmp_path, COMMITTED)))
    assert len(builds) == 1 and "nothing is built" in done.stderr  # reached the build, stopped there
    (manifest, options), _ = builds[0]
    assert manifest.name == CPU and options.lock_text == COMMITTED
    assert options.tag == f"kit/sglang:{CPU}-bundle-{lock_digest(COMMITTED)[7:19]}"


def test_name_and_from_bundle_are_one_or_the_other(tmp_path, builds):
    assert run_kit("image", "build").returncode == 2
    assert run_kit("image", "build", CPU, "--from-bundle", str(_bundle(tmp_path, COMMITTED))).returncode == 2
    assert builds == []


def test_a_system_package_outside_the_kits_locks_is_refused_and_a_malformed_one_never_built(tmp_path, builds):
    """The lock's system lines reach apt-get's argv: judged like its Python packages."""
    extra = COMMITTED.replace(
        "# kit-apt: bash ", "# kit-apt: openssh-server 1:9.2p1-2+deb12u3 amd64\n# kit-apt: bash ", 1
    )
    judged = judge(extra, CPU, [CPU], kit_locks([ROOT / "images"]))
    assert judged.fatal == []
    assert [r.line() for r in judged.refused] == [
        "system package openssh-server 1:9.2p1-2+deb12u3: in none of the kit's own locks"
    ]
    done = run_kit("image", "build", "--from-bundle", str(_bundle(tmp_path, extra)))
    assert done.returncode == 2 and builds == []

    option = COMMITTED.replace(
        "# kit-apt: bash ", "# kit-apt: -oAPT::Get::AllowUnauthenticated=true 1 x\n# kit-apt: bash ", 1
    )
    judged = judge(option, CPU, [CPU], kit_locks([ROOT / "images"]))
    assert [r.line() for r in judged.fatal] == [
        "lock: not a Debian package, version and architecture: "
        "# kit-apt: -oAPT::Get::AllowUnauthenticated=true 1 x"
    ]
    done = run_kit("image", "build", "--from-bundle", str(_bundle(tmp_path, option)), "--trust-bundle")
    assert done.returncode == 2 and builds == []
