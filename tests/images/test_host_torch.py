"""scripts/host-torch: the GPU image's torch pins for a host venv (KIT_TORCH_PYTHON of the bare-metal
gpu tests). What it would install comes from images/IMAGE.toml; a wrong name is one line, exit 2."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "host-torch"


def run(*args: str, cache: Path) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cache), "KIT_CACHE_DIR": str(cache)}
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=60, env=env)


def test_dry_run_names_the_images_own_pins_and_the_venv(tmp_path):
    image = "sglang-0.5.23-cu130-sm120"
    pins = tomllib.loads((ROOT / "images" / f"{image}.toml").read_text())["pins"]
    done = run(image, "--dry-run", cache=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{tmp_path}/host-torch/{image}/bin/python"
    said = done.stderr
    assert f"torch=={pins['torch']}" in said and pins.get("torch_index", "https://pypi.org/simple") in said
    assert f"{pins['nccl_package']}=={pins['nccl']}" in said
    assert not (tmp_path / "host-torch").exists()  # a dry run makes nothing


def test_an_unknown_image_is_one_line_exit_2_naming_the_known_ones(tmp_path):
    for args in (("nope",), ()):
        done = run(*args, cache=tmp_path)
        assert done.returncode == 2 and done.stdout == ""
        [line] = done.stderr.splitlines()
        assert line.startswith("host-torch: IMAGE:") and "sglang-0.5.23-cu130-sm120" in line


def test_a_fresh_clone_without_a_venv_is_enough(tmp_path):
    # The script and the manifests alone, as in a clone where scripts/bootstrap never ran: python3
    # reads the manifest (it needed the repository's .venv before).
    import shutil

    clone = tmp_path / "clone"
    (clone / "scripts").mkdir(parents=True)
    shutil.copy2(SCRIPT, clone / "scripts" / "host-torch")
    shutil.copytree(ROOT / "images", clone / "images", ignore=shutil.ignore_patterns("wheels", "*.lock"))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KIT_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run(
        [str(clone / "scripts" / "host-torch"), "sglang-0.5.23-cu130-sm120", "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{tmp_path}/cache/host-torch/sglang-0.5.23-cu130-sm120/bin/python"
    assert not (clone / ".venv").exists()
