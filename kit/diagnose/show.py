"""What `kit bundle show` and `kit bundle diff` return: plain data over a read bundle."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.diagnose import fingerprint as fp
from kit.diagnose.bundle import Bundle, headline, read_bundle


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
    picture: str | None
    members: list[str] = field(default_factory=list)


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
    picture = picture_path(bundle)
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
        summary=bundle.summary,
        picture=str(picture) if picture else None,
        members=sorted(bundle.members),
    )


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
