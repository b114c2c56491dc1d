"""What `kit bundle show` and `kit bundle diff` return: plain data over a read bundle.

`kit bundle show` renders from fingerprint.json and result.json, the data `kit repro` executes,
not from summary.md: a reader reviews what would run. When summary.md says something else (a
hand-edited or tampered bundle), `summary_differs` says which lines; `launch` is the fingerprint's
launch (the full argv, environment with secrets by name, container settings) and `trust` what
`kit repro` would refuse in it without --trust-bundle (kit/diagnose/trust.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kit
from kit.diagnose import fingerprint as fp
from kit.diagnose import trust
from kit.diagnose.bundle import Bundle, current_summary, headline, read_bundle, summary_md
from kit.diagnose.redact import Redactor
from kit.errors import KitError


@dataclass(frozen=True)
class BundleView:
    bundle: str
    name: str
    made_by: str | None
    created: str | None
    kit_version: str | None
    headline: str
    verdict: str | None
    phase: str | None
    stuck_ranks: list[str]
    waiting_ranks: list[str]
    missing_ranks: list[str]
    timeline: list[dict]
    likely_causes: list[dict]
    summary: str
    """Rendered from fingerprint.json and result.json (what kit repro runs), not read from summary.md."""
    picture: str | None
    members: list[str] = field(default_factory=list)
    launch: dict[str, Any] = field(default_factory=dict)
    """The fingerprint's launch: argv, env (secrets masked, their names in `secrets`), container."""
    summary_differs: list[str] = field(default_factory=list)
    """Lines of summary.md that the fingerprint and result do not say (empty: they agree)."""
    trust: list[str] = field(default_factory=list)
    """What kit repro refuses in the launch without --trust-bundle (empty: nothing)."""
    trust_note: str | None = None
    """Why the trust check could not run (the image or target is not in this kit), if so."""


def picture_path(bundle: Bundle) -> Path | None:
    """The bundle's SVG as a file a browser can open: in the kit's cache, named after the bundle."""
    from kit.diagnose.record import bundles_dir

    svg = bundle.svg
    if svg is None:
        return None
    path = bundles_dir() / "pictures" / f"{bundle.name}.svg"
    if not (path.is_file() and path.read_text(encoding="utf-8") == svg):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(svg, encoding="utf-8")
    return path


def bundle_view(path: str | Path) -> BundleView:
    bundle = read_bundle(path)
    result = bundle.result
    finger = bundle.fingerprint
    picture = picture_path(bundle)
    launch = finger.get("launch") if isinstance(finger.get("launch"), dict) else {}
    refused, note = trust_check(finger)
    differs = summary_differs(bundle)
    if differs:
        refused.append(
            trust.Refusal("summary.md", "says what fingerprint.json does not (a hand-edited bundle?)")
        )
    return BundleView(
        bundle=str(bundle.path),
        name=bundle.name,
        made_by=bundle.meta.get("made_by"),
        created=bundle.meta.get("created"),
        kit_version=bundle.meta.get("kit_version"),
        headline=headline(result),
        verdict=result.get("verdict"),
        phase=result.get("phase"),
        stuck_ranks=list(result.get("stuck_ranks") or []),
        waiting_ranks=list(result.get("waiting_ranks") or []),
        missing_ranks=list(result.get("missing_ranks") or []),
        timeline=list(result.get("timeline") or []),
        likely_causes=list(result.get("likely_causes") or []),
        summary=rendered_summary(bundle),
        picture=str(picture) if picture else None,
        members=sorted(bundle.members),
        launch={
            key: launch.get(key)
            for key in (
                "target",
                "argv",
                "argv_from",
                "env",
                "secrets",
                "secret_flags",
                "container",
                "overrides",
            )
        },
        summary_differs=differs,
        trust=[r.line() for r in refused],
        trust_note=note,
    )


def rendered_summary(bundle: Bundle) -> str:
    """summary.md as this kit writes it from the bundle's own fingerprint and result."""
    return Redactor().text(summary_md(bundle.meta, bundle.fingerprint, bundle.result))


def _argv_block(text: str) -> list[str]:
    """The launch's argv block of a summary: the lines of the first ``` block after '- launch:'."""
    lines = text.splitlines()
    at = next((i for i, line in enumerate(lines) if line.startswith("- launch:")), None)
    if at is None:
        return []
    rest = lines[at + 1 :]
    if len(rest) < 2 or rest[0] != "" or rest[1] != "```":
        return []
    block = rest[2:]
    return block[: block.index("```")] if "```" in block else block


def summary_differs(bundle: Bundle) -> list[str]:
    """summary.md's lines that the fingerprint and result do not say. A bundle of this kit's
    version is compared whole; an older one by its launch's argv (its summary's layout may differ)."""
    import difflib

    expected = rendered_summary(bundle)
    found = current_summary(bundle.summary)  # an old bundle's STALLED is today's HUNG, not an edit
    if bundle.meta.get("kit_version") != kit.__version__:
        expected_argv, found_argv = _argv_block(expected), _argv_block(found)
        if expected_argv == found_argv:
            return []
        return [f"argv: {trust.shown(line, 300)}" for line in found_argv] or ["argv: (none in summary.md)"]
    if expected == found:
        return []
    diff = difflib.unified_diff(expected.splitlines(), found.splitlines(), lineterm="", n=0)
    return [trust.shown(line, 300) for line in diff if line.startswith("+") and not line.startswith("+++")]


def trust_check(fingerprint: Mapping[str, Any]) -> tuple[list[trust.Refusal], str | None]:
    """What kit repro refuses in the fingerprint's launch (argv, environment, container) without
    --trust-bundle; (refusals, why it could not be checked)."""
    from kit.dialects import load_dialect
    from kit.images.manifest import load_manifest
    from kit.launch import resolve_full

    launch = fingerprint.get("launch")
    if not isinstance(launch, dict):
        return [], "the bundle has no launch"
    image = fingerprint.get("image") if isinstance(fingerprint.get("image"), dict) else {}
    target = launch.get("target")
    try:
        if not isinstance(target, str):
            return [], "the bundle names no target"
        name = fp.known(image.get("name"))
        resolved = resolve_full(target, image=name if isinstance(name, str) else None)
        dialect = load_dialect(load_manifest(resolved.spec.image).dialect)
    except KitError as exc:
        return [], f"not checked: {trust.shown(exc.one_line(), 200)}"
    refused: list[trust.Refusal] = []
    argv = fp.known(launch.get("argv"))
    if isinstance(argv, list):
        inner, _ = trust.unwrap_api_key([str(a) for a in argv])
        refused += trust.check_argv(inner, trust.known_flags(dialect, resolved.profile.extra_args))
    env = fp.known(launch.get("env"))
    if isinstance(env, dict):
        from kit.runtime import compile_cache

        refused += trust.check_env({str(k): str(v) for k, v in env.items()}, kit_values=compile_cache.ENV)
    container = fp.known(launch.get("container"))
    if isinstance(container, dict):
        refused += trust.check_container(container)
    return refused, None


@dataclass(frozen=True)
class BundleDiff:
    a: str
    b: str
    a_verdict: str
    b_verdict: str
    differences: list[dict[str, Any]]
    equal: int
    unknown_both: int
    groups: dict[str, int]


def bundle_diff(a_path: str | Path, b_path: str | Path) -> BundleDiff:
    a, b = read_bundle(a_path), read_bundle(b_path)
    found = fp.diff(a.fingerprint, b.fingerprint)
    return BundleDiff(
        a=str(a.path),
        b=str(b.path),
        a_verdict=headline(a.result),
        b_verdict=headline(b.result),
        differences=[
            {
                "key": d.key,
                "group": d.group,
                "matters": d.matters,
                "a": d.a,
                "b": d.b,
                "line": d.describe("A", "B"),
            }
            for d in found.differences
        ],
        equal=found.equal,
        unknown_both=found.unknown_both,
        groups=found.groups,
    )
