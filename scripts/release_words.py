"""Every release's words, checked against the release's own code.

    .venv/bin/python scripts/release_words.py --wheels DIR [--find RELEASE FILE NEEDLE]

tests/fixtures/release-words.toml lists, per SGLang release, the lines its code prints at each
start-up milestone, failure and serving step the kit reads: the file that prints it (at that
release) and the string as the code writes it (an f-string as a template: `{expr}` where a value
goes). tests/logs/test_log_release_words.py renders each template with sample values and holds the
parser to reading it as the milestone, note or error the entry says (no wheel needed: CI runs it).

This script is the other half: with the releases' wheels unpacked under DIR (DIR/sglang-X/sglang/...,
from `pip download --no-deps sglang==X` and unzip), it checks every template is, character for
character, a string literal of that file at that release (the file's syntax tree, implicit
concatenation joined), and prints the ones that are not. --find prints the templates of FILE at
RELEASE that contain NEEDLE, to add an entry. Exit 1 when a template is not found.
"""

from __future__ import annotations

import argparse
import ast
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "fixtures" / "release-words.toml"


def template_of(node: ast.AST) -> str | None:
    """A string literal as a template: f-string values as `{expr!c:spec}`, as the source spells them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if not isinstance(node, ast.JoinedStr):
        return None
    parts = []
    for value in node.values:
        if isinstance(value, ast.Constant):
            parts.append(str(value.value))
            continue
        assert isinstance(value, ast.FormattedValue)
        text = ast.unparse(value.value)
        if value.conversion != -1:
            text += "!" + chr(value.conversion)
        if value.format_spec is not None:
            text += ":" + (template_of(value.format_spec) or "")
        parts.append("{" + text + "}")
    return "".join(parts)


def templates(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {t for node in ast.walk(tree) if (t := template_of(node)) is not None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--wheels", type=Path, required=True, help="folder of unpacked wheels: sglang-X/sglang"
    )
    parser.add_argument("--find", nargs=3, metavar=("RELEASE", "FILE", "NEEDLE"))
    args = parser.parse_args(argv)
    if args.find:
        release, file, needle = args.find
        for text in sorted(templates(args.wheels / f"sglang-{release}" / "sglang" / file)):
            if needle in text:
                print(repr(text))
        return 0
    entries = tomllib.loads(DATA.read_text(encoding="utf-8"))["line"]
    missing = 0
    for entry in entries:
        path = args.wheels / f"sglang-{entry['release']}" / "sglang" / entry["file"]
        if not path.is_file():
            print(f"NO FILE  {entry['release']} {entry['file']}")
            missing += 1
        elif entry["template"] not in templates(path):
            print(f"MISSING  {entry['release']} {entry['file']}: {entry['template']!r}")
            missing += 1
    print(f"{len(entries) - missing} of {len(entries)} templates found in their release's file")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
