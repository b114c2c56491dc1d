"""Every doc and hint fetches the model at its pinned commit with the kit (`kit model fetch`) or with
huggingface_hub's own CLI at that commit (`hf download REPO --revision C`). huggingface_hub 1.x ships
only `hf`: a hint naming `huggingface-cli` fails where the kit is installed, and one without
`--revision` fetches main, which the server (offline, `--revision <pin>`) never loads."""

from __future__ import annotations

import re

from kit import paths

ROOT = paths.project_root()
TEXT = (".md", ".py", ".toml", ".yml", ".yaml", ".json", ".txt", "")
OLD_CLI = "huggingface" + "-cli"  # spelled apart so this file does not match itself
HF_DOWNLOAD = re.compile(r"\bhf download\b")


def shipped_text_files():
    roots = [ROOT / "docs", ROOT / "kit", ROOT / "scripts", ROOT / ".github"]
    files = [ROOT / "README.md", ROOT / "compose.yaml", ROOT / "Dockerfile"]
    for root in roots:
        files += [
            p for p in root.rglob("*") if p.is_file() and p.suffix in TEXT and "__pycache__" not in p.parts
        ]
    return [p for p in files if p.is_file()]


def test_no_doc_or_hint_names_the_old_cli():
    found = []
    for path in shipped_text_files():
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if OLD_CLI in line.lower():
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "use `kit model fetch TARGET` or `hf download REPO --revision C`:\n" + "\n".join(found)


def test_every_hf_download_names_the_revision():
    found = []
    for path in shipped_text_files():
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if HF_DOWNLOAD.search(line) and "--revision" not in line:
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "an `hf download` without --revision fetches main, not the pin:\n" + "\n".join(found)


def test_the_doctor_and_launch_hints_fetch_with_the_kit():
    from kit.model.snapshots import fetch_hint

    assert fetch_hint("qwen-base", "Qwen/Qwen3.5-122B-A10B", "a" * 40) == "kit model fetch qwen-base"
    assert fetch_hint(None, "Qwen/Qwen3.5-122B-A10B", "a" * 40) == (
        "hf download Qwen/Qwen3.5-122B-A10B --revision " + "a" * 40
    )
