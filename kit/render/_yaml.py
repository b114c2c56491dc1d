"""YAML for people: key order kept, no anchors or aliases, long lines unbroken."""

from __future__ import annotations

from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:  # a repeated dict is written out again, not as *id001
        return True


def dump(document: Any) -> str:
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1000)
