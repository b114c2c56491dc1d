"""Every source the kit's data files give is one a reader can open (tests/citations.py says which)."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest
from citations import REPO, citation_problems, comment_blocks, path_problems


def _sources(node, inside: bool = False) -> list[str]:
    """Every string under a key named `source` or `sources` (a table of them too), however deep."""
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in _sources(v, inside or k in ("source", "sources"))]
    if isinstance(node, list):
        return [s for item in node for s in _sources(item, inside)]
    return [node] if isinstance(node, str) and inside else []


_DATA = sorted(
    p.relative_to(REPO).as_posix()
    for p in [*(REPO / "kit").rglob("*.toml"), *(REPO / "images").glob("*.toml")]
)
# Files whose every entry must cite something (not only cite nothing wrong): the rules, the
# release dialects, the GPU-shaped scenarios and the catalog.
_MUST_CITE = (
    "kit/logs/causes.toml",
    "kit/validate/pitfalls.toml",
    "kit/dialects/",
    "kit/scenarios/",
    "kit/catalog/",
)
# A catalog value no public page gives (a hidden size of an unreleased shape) says so, in words.
_ESTIMATE = "estimate:"


def _problems(path: str, text: str) -> list[str]:
    if not path.startswith(_MUST_CITE) or (path.startswith("kit/catalog/") and text.startswith(_ESTIMATE)):
        return path_problems(text)
    return citation_problems(text)


@pytest.mark.parametrize("path", _DATA)
def test_every_source_in_a_data_file_is_one_a_reader_can_open(path):
    document = tomllib.loads((REPO / path).read_text())
    problems = [problem for text in _sources(document) for problem in _problems(path, text)]
    assert not problems, f"{path}: " + "; ".join(problems)


_MANIFESTS = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "images").glob("*.toml"))


@pytest.mark.parametrize("path", _MANIFESTS)
def test_every_path_a_manifests_comments_cite_is_one_a_reader_can_open(path):
    # A manifest says where each pin comes from in comments (a wheel's METADATA, SGLang's Dockerfile
    # at a release), which tomllib drops: read from the text, each block must name files a reader
    # can open, a file upstream with its release.
    blocks = comment_blocks((REPO / path).read_text())
    assert len(blocks) >= 5
    problems = [problem for text in blocks for problem in path_problems(text)]
    assert not problems, f"{path}: " + "; ".join(problems)


def test_a_scenario_source_or_a_manifest_comment_citing_nothing_openable_is_found():
    scenario = "[[sources]]\nsource = 'the field notes: ranks quiet before NCCL connects'\n"
    assert _problems("kit/scenarios/made-up.toml", _sources(tomllib.loads(scenario))[0])
    assert _problems("kit/catalog/models/made-up.toml", "estimate: 64, the family value") == []
    assert _problems("kit/scenarios/made-up.toml", "estimate: 64, the family value")
    manifest = (
        'name = "x"  # from file:///home/dev/facts.md\n'
        "[pins]\n"
        "# torch METADATA: Requires-Dist nvidia-nccl-cu13 (its torch/version.py)\n"
        'torch = "2.14.1"\n'
    )
    blocks = comment_blocks(manifest)
    assert blocks == [
        "from file:///home/dev/facts.md",
        "torch METADATA: Requires-Dist nvidia-nccl-cu13 (its torch/version.py)",
    ]
    assert all(path_problems(block) for block in blocks)


def test_the_data_files_give_sources_at_all():
    # The walk above finds what it checks: a key renamed away from `source` would pass it empty.
    counts = {p: len(_sources(tomllib.loads((REPO / p).read_text()))) for p in _DATA}
    assert counts["kit/logs/causes.toml"] >= 30 and counts["kit/validate/pitfalls.toml"] >= 3
    assert counts["kit/catalog/models/qwen3.5-122b-a10b.toml"] >= 10


@pytest.mark.parametrize(
    "text",
    [
        "shared" + "/reference/x.md",
        "the field notes (shared" + "/reference/facts.md §5)",
        "../x",
        "see ../notes/facts.md",
        "https://github.com/NVIDIA/nccl/issues/1999 ; field-notes.md §5",
        "/work/notes/reference/facts.md",
        "~/notes.md",
        "docs/no-such-page.md",
        "kit/logs/no_such_module.py",
        "the kit's own notes",
        "file:///home/dev/notes/facts.md",
        "sglang 0.5.23 file:///home/dev/notes/facts.md",
        "/facts.md",
        "sglang 0.5.23 srt/server_args.py; /facts.md",
    ],
)
def test_a_path_outside_the_repository_or_nothing_openable_is_rejected(text):
    assert citation_problems(text)
    # Refused on its path alone too, as in a file whose entries need not cite (path_problems).
    assert path_problems(text) or text == "the kit's own notes"


@pytest.mark.parametrize(
    "text",
    [
        "docs/sources.md#pcie-p2p",
        "https://github.com/NVIDIA/nccl/issues/1999",
        "sgl-project/sglang#6830",
        "sglang 0.5.23 srt/server_args.py:668-696 (prepare_server_args)",
        "sglang 0.5.14 server_args.py ServerArgs._validate_mamba_no_buffer",
        "kit/logs/attempts.py",
    ],
)
def test_urls_release_files_and_repository_paths_are_accepted(text):
    assert citation_problems(text) == []


def _tracked(*roots: str) -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *roots],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    return [REPO / line for line in out.stdout.splitlines() if line]


def test_no_file_of_the_project_points_at_notes_kept_beside_it():
    # The needles are built, so this file does not match itself.
    needles = ("sglang" + "-facts", "shared" + "/")
    roots = (
        "kit",
        "docs",
        "tests",
        "images",
        "scripts",
        "benchmarks",
        "README.md",
        "compose.yaml",
        "Dockerfile",
        ".github",
    )
    hits = []
    for path in _tracked(*roots):
        if "fixtures" in path.parts or not path.is_file():
            continue  # real logs quote whatever paths their machines had
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        hits += [f"{path.relative_to(REPO)}: {n}" for n in needles if n in text]
    assert not hits, hits
