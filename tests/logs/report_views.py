"""Views of an analysis report shared by the log rule tests."""

from __future__ import annotations


def cause_ids(report) -> list[str]:
    """The likely causes' ids, in the report's order."""
    return [c.id for c in report.likely_causes]
