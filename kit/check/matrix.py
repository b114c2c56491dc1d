"""The conformance matrix as data: kit/check/matrix.toml, its cells, and the CI subset. Pure.

A group is a product of its axes, applied as `--set` overrides to each of its targets; groups are
concatenated, not multiplied. Probes show what a release does with an old flag or variable.
"""

from __future__ import annotations

import itertools
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from kit.catalog._errors import translate as _schema_error
from kit.errors import InputError

MATRIX = Path(__file__).resolve().parent / "matrix.toml"
Scalar = str | int | float | bool


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Group(_Strict):
    name: str
    about: str = ""
    targets: tuple[str, ...]
    axes: dict[str, list[Scalar]]


class Probe(_Strict):
    name: str
    target: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = {}
    names: str
    """The flag or variable whose fate the probe shows."""


class Subset(_Strict):
    releases: tuple[str, ...]
    cells: tuple[str, ...]
    """Cell keys (Cell.key without the companion part), e.g. 'qwen-mtp probe spec-v2-env'."""


class Matrix(_Strict):
    releases: tuple[str, ...]
    ci: Subset
    groups: tuple[Group, ...]
    probes: tuple[Probe, ...] = ()

    @field_validator("releases")
    @classmethod
    def _distinct(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(value)) != len(value):
            raise ValueError("a release is listed twice")
        return value


def load_matrix(path: Path = MATRIX) -> Matrix:
    from kit.catalog import read_toml

    try:
        return Matrix.model_validate(read_toml(path))
    except ValidationError as exc:
        raise _schema_error(path, exc, Matrix) from exc


def read_matrix_toml(text: str) -> Matrix:
    """A matrix from TOML text (tests plant their own)."""
    return Matrix.model_validate(tomllib.loads(text))


def _toml(value: Scalar) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True)
class Cell:
    group: str
    target: str
    overrides: tuple[str, ...] = ()
    probe: Probe | None = None
    without: str | None = None
    """A companion left out: the launch must then be refused, or the companion is not needed."""

    @property
    def key(self) -> str:
        """The row: the same cell on every release."""
        parts = [self.target, *self.overrides]
        if self.probe:
            parts.append(f"probe {self.probe.name}")
        if self.without:
            parts.append(f"without companion {self.without}")
        return " ".join(parts)


def cells_of(
    matrix: Matrix, groups: Iterable[str] | None = None, keys: Iterable[str] | None = None
) -> list[Cell]:
    """Every group's cells (the product of its axes, per target), then the probes; KEYS picks cells."""
    if keys is not None:
        chosen = set(keys)
        found = [c for c in cells_of(matrix, groups) if c.key in chosen]
        missing = chosen - {c.key for c in found}
        if missing:
            raise InputError(
                "cells", f"not in the matrix: {sorted(missing)[0]}", "copy a row of docs/conformance.md"
            )
        return found
    wanted = set(groups) if groups is not None else None
    cells: list[Cell] = []
    for group in matrix.groups:
        if wanted is not None and group.name not in wanted:
            continue
        axes = list(group.axes)
        for target in group.targets:
            for values in itertools.product(*(group.axes[k] for k in axes)):
                overrides = tuple(f"{k}={_toml(v)}" for k, v in zip(axes, values, strict=True))
                cells.append(Cell(group.name, target, overrides))
    if wanted is None or "old-names" in wanted:
        cells += [Cell("old-names", probe.target, probe=probe) for probe in matrix.probes]
    return cells


def planned_count(
    matrix: Matrix, releases: Sequence[str], groups: Sequence[str] | None, keys: Sequence[str] | None = None
) -> int:
    """How many cells a run will have (base cells x releases; companion variants come on top)."""
    return len(cells_of(matrix, groups, keys)) * len(releases)
