"""A launch's own arguments, read off the line its launcher prints once per start, and the ranks
they promise.

SGLang prints `server_args=ServerArgs(model_path=..., tp_size=16, ..., nnodes=2, node_rank=0, ...)`
once per `launch_server`; vLLM prints `tensor_parallel_size=...` in its engine config. From those
numbers the kit knows which scheduler ranks should exist, so a rank (or a whole node) that never
printed a line is still named missing. Pure; nothing here reads a file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

# `(?<![\w.])`: `tp_size=` must not be the tail of `moe_dense_tp_size=` or `attn_tp_size=`. The
# look-behind sits after the name's first letter (`t(?<![\w.]t)p_size`, the same test): a pattern
# that opens with a look-behind is tried at every position of a launch line thousands of
# characters long (50 us a search), one that opens with a letter jumps to that letter (1 us).
# `name=3` (SGLang's ServerArgs, vLLM's Namespace) or `'name': 3` (vLLM's "non-default args" dict).
_VALUE = r"""['"]?(?:=|:\s*)(\d+)"""


def _name(*names: str) -> str:
    """An alternation of names that share their first letter, not preceded by a word char or dot."""
    first = names[0][0]
    assert all(name[0] == first for name in names)
    return rf"{first}(?<![\w.]{first})(?:" + "|".join(re.escape(name[1:]) for name in names) + ")"


_INT_ARGS = {
    "tp": re.compile(_name("tp_size", "tensor_parallel_size") + _VALUE),
    "pp": re.compile(_name("pp_size", "pipeline_parallel_size") + _VALUE),
    "dp": re.compile(_name("dp_size", "data_parallel_size") + _VALUE),
    "ep": re.compile(_name("ep_size") + _VALUE),
    "nnodes": re.compile(_name("nnodes") + _VALUE),
    "node_rank": re.compile(_name("node_rank") + _VALUE),
}
_DP_ATTENTION = re.compile(_name("enable_dp_attention") + r"""['"]?(?:=|:\s*)(True|False)""")
_ORDER = (*_INT_ARGS, "dp_attention", "model")  # the order launch_fields adds them in
_MODEL = re.compile(r"""(?<![\w.])['"]?(?:model_path|model)['"]?(?:=|:\s*)'([^']*)'""")


def launch_fields_at(line: str, at: int) -> dict[str, Any]:
    """`launch_fields(line)` where `line[at:]` starts with the launch line's own words
    (`server_args=`): a restarting server prints the same arguments after a new timestamp each
    time, so the part from `at` on is read once per distinct text. The same result: no argument
    starts with those words' first letter, so no match crosses `at` or changes there."""
    if at <= 0:
        return launch_fields(line)
    head, tail = launch_fields(line[:at]), _tail_fields(line[at:])
    if not head:
        return dict(tail)
    return {name: head.get(name, tail.get(name)) for name in _ORDER if name in head or name in tail}


@lru_cache(maxsize=64)
def _tail_fields(tail: str) -> dict[str, Any]:
    return launch_fields(tail)


def launch_fields(line: str) -> dict[str, Any]:
    """The parallelism arguments a launch line states (only those it states)."""
    fields: dict[str, Any] = {}
    for name, regex in _INT_ARGS.items():
        found = regex.search(line)
        if found is not None:
            fields[name] = int(found.group(1))
    found = _DP_ATTENTION.search(line)
    if found is not None:
        fields["dp_attention"] = found.group(1) == "True"
    found = _MODEL.search(line)
    if found is not None:
        fields["model"] = found.group(1)
    return fields


@dataclass(frozen=True, slots=True)
class ExpectedRank:
    """A scheduler rank the launch promises: its key (as `Rank.key` spells it) and its node."""

    key: str
    node: int


@dataclass(frozen=True, slots=True)
class LaunchArgs:
    """The parallel layout of one launch. `node_rank` is the node whose log this is."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    nnodes: int = 1
    node_rank: int = 0
    dp_attention: bool = False
    model: str | None = None

    @classmethod
    def from_fields(cls, fields: dict[str, Any]) -> LaunchArgs | None:
        """None when the line stated no parallel size at all (e.g. `ServerArgs(...)` pasted elided)."""
        if "tp" not in fields and "dp" not in fields and "pp" not in fields:
            return None

        def positive(name: str, default: int) -> int:
            value = fields.get(name, default)
            return value if isinstance(value, int) and value >= 1 else default

        nnodes = positive("nnodes", 1)
        node_rank = fields.get("node_rank", 0)
        return cls(
            tp=positive("tp", 1),
            pp=positive("pp", 1),
            dp=positive("dp", 1),
            nnodes=nnodes,
            node_rank=node_rank if isinstance(node_rank, int) and 0 <= node_rank < nnodes else 0,
            dp_attention=bool(fields.get("dp_attention", False)),
            model=fields.get("model"),
        )

    @property
    def world(self) -> int:
        return len(self.expected())

    def expected(self) -> tuple[ExpectedRank, ...]:
        """Every scheduler rank of the launch, on every node, labelled as SGLang prefixes them.

        SGLang names a part only when its size is above 1: `TP3`, `DP1 TP0`, `PP1 TP2`, `DP1`.
        With DP attention the DP index is the TP rank's group (`DP1 TP5` with tp=8, dp=2).
        Ranks are spread evenly over the nodes in that order (how `--nnodes` splits `--tp`).
        A launch of one process (tp=pp=dp=1) has no ranked scheduler: nothing is expected.
        """
        keys: list[str] = []
        if self.dp_attention and self.dp > 1 and self.tp >= self.dp and self.tp % self.dp == 0:
            per_dp = self.tp // self.dp
            for pp in range(self.pp):
                for tp in range(self.tp):
                    keys.append(_key(tp // per_dp, pp if self.pp > 1 else None, tp))
        else:
            for dp in range(self.dp):
                for pp in range(self.pp):
                    for tp in range(self.tp):
                        keys.append(
                            _key(
                                dp if self.dp > 1 else None,
                                pp if self.pp > 1 else None,
                                tp if self.tp > 1 else None,
                            )
                        )
        if keys == [""]:
            return ()
        per_node = max(1, -(-len(keys) // self.nnodes))  # ceil: the last node may hold fewer
        return tuple(ExpectedRank(key, min(i // per_node, self.nnodes - 1)) for i, key in enumerate(keys))


def _key(dp: int | None, pp: int | None, tp: int | None) -> str:
    return " ".join(f"{n}{v}" for n, v in (("DP", dp), ("PP", pp), ("TP", tp)) if v is not None)
