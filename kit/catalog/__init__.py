"""The catalog: models, their profiles (intent) and targets, in data files under kit/catalog/.

A new model is one file in models/ (plus its config.json beside it). See docs/catalog.md.
"""

from kit.catalog._load import Catalog, CatalogModel, deep_merge, load_catalog, read_toml
from kit.catalog._overrides import apply_overrides, check_override, parse_override, profile_with_overrides
from kit.catalog._schema import (
    Container,
    Deadlines,
    Hardware,
    ModelFacts,
    ModelFile,
    Profile,
    Smoke,
    Speculative,
    StallWindows,
    Target,
    Timing,
)

__all__ = [
    "Catalog",
    "CatalogModel",
    "Container",
    "Deadlines",
    "Hardware",
    "ModelFacts",
    "ModelFile",
    "Profile",
    "Smoke",
    "Speculative",
    "StallWindows",
    "Target",
    "Timing",
    "apply_overrides",
    "check_override",
    "deep_merge",
    "load_catalog",
    "parse_override",
    "profile_with_overrides",
    "read_toml",
]
