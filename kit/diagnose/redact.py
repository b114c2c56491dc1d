"""Secrets out of everything a bundle holds. Pure: data in, masked data out.

What counts as a secret:
- a variable whose name contains TOKEN, KEY, SECRET or PASSWORD (any case): HF_TOKEN, KIT_API_KEY;
- the value of a command-line flag whose name has such a word as one of its parts: `--api-key X`,
  `--admin-api-key=X`, `--hf-token X` (not `--max-total-tokens`: "tokens" is a count, not a token);
- in free text (log lines, stacks, JSON): every value known to be secret (the launch's secret
  variables and flags, and this machine's secret variables), plus what looks like one without being
  known: `api_key='...'` in SGLang's server_args line, `HF_TOKEN=...`, `--api-key ...`, and the
  shape of a Hugging Face token (`hf_` and 30+ letters and digits).

A masked value becomes MASK; the name stays, so a replay knows which variable to take from its own
environment. Values shorter than MIN_TEXT_SECRET are masked in structured fields only: masking "1"
or "true" in every log line would destroy the log without protecting anything.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MASK = "<redacted>"
MIN_TEXT_SECRET = 6
_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD")
_PARTS = {"token", "key", "secret", "password", "passwd", "apikey"}


def is_secret_name(name: str) -> bool:
    """A variable name that holds a secret: it contains TOKEN, KEY, SECRET or PASSWORD."""
    upper = name.upper()
    return any(word in upper for word in _WORDS)


def is_secret_flag(flag: str) -> bool:
    """'--api-key', '--admin-api-key', '--hf-token': a part of the flag's name is a secret word."""
    name = flag.lstrip("-").split("=", 1)[0]
    return flag.startswith("-") and any(part in _PARTS for part in re.split(r"[-_]", name.lower()))


def _is_secret_field(name: str) -> bool:
    """A field in repr-style text (`api_key='x'`, `hf_token=x`): by parts, or by name for VARIABLES.

    `api_key_env` and `..._name` hold the NAME of a variable (what a replay needs), not a secret.
    """
    lower = name.lower()
    if lower.endswith(("_env", "_name", "_names")):
        return False
    if name.isupper():
        return is_secret_name(name)
    return any(part in _PARTS for part in re.split(r"[-_]", lower))


def split_env(env: Mapping[str, str]) -> tuple[dict[str, str], tuple[str, ...]]:
    """(the environment with secret values masked, the names of the secret variables)."""
    masked = {k: (MASK if is_secret_name(k) else v) for k, v in env.items()}
    return masked, tuple(sorted(k for k in env if is_secret_name(k)))


def mask_argv(argv: Sequence[str]) -> tuple[list[str], tuple[str, ...]]:
    """(argv with the values of secret flags masked, the flags that were masked)."""
    out: list[str] = []
    flags: list[str] = []
    mask_next = False
    for arg in argv:
        if mask_next:
            out.append(MASK)
            mask_next = False
            continue
        if is_secret_flag(arg):
            name, sep, _ = arg.partition("=")
            flags.append(name)
            if sep:
                out.append(f"{name}={MASK}")
            else:
                out.append(arg)
                mask_next = True
            continue
        out.append(arg)
    return out, tuple(flags)


def argv_secrets(argv: Sequence[str]) -> list[str]:
    """The values secret flags carry in argv (to mask wherever else they appear)."""
    values = []
    for i, arg in enumerate(argv):
        if is_secret_flag(arg):
            _, sep, value = arg.partition("=")
            if sep:
                values.append(value)
            elif i + 1 < len(argv):
                values.append(argv[i + 1])
    return values


# `--api-key VALUE`, `--api-key=VALUE`; `api_key='VALUE'`, `hf_token=VALUE`, `HF_TOKEN=VALUE`,
# `"api_key": "VALUE"`. Only names holding a secret word match, so an ordinary `name: value` never
# swallows the secret assignment after it; the finer rule (parts of the name) is _is_secret_field's.
_SECRET_WORD = r"(?:[Tt][Oo][Kk][Ee][Nn]|[Kk][Ee][Yy]|[Ss][Ee][Cc][Rr][Ee][Tt]|[Pp][Aa][Ss][Ss][Ww])"
_FLAG_VALUE = re.compile(
    rf"(?<![\w-])(--?[A-Za-z][\w-]*?{_SECRET_WORD}[\w-]*)(=|[ \t]+)(?!-)(\"[^\"]*\"|'[^']*'|[^\s'\",)]+)"
)
_FIELD_VALUE = re.compile(
    rf"(?<![\w.-])([A-Za-z_]\w*?{_SECRET_WORD}\w*)(\"?\s*[=:]\s*)"
    r"(\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|[^\s'\",()}\]\[{=]+)"
)
_NUMBER = re.compile(r"[\d.,%]+")
_HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{30,}\b")
_URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^/\s:@]+:)([^/\s@]+)@")
_WORDS_IN_TEXT = ("token", "key", "secret", "passw", "hf_", "://")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


@dataclass(frozen=True)
class Redactor:
    """Masks known secret values and secret-looking assignments in text and in JSON-like data."""

    values: tuple[str, ...] = ()

    @classmethod
    def for_launch(
        cls,
        env: Mapping[str, str] = {},
        argv: Sequence[str] = (),
        *,
        extra: Iterable[str] = (),
        machine_env: Mapping[str, str] = {},
    ) -> Redactor:
        """Secrets of a launch (its secret variables and flags) and of this machine's environment."""
        found = [v for k, v in env.items() if is_secret_name(k)]
        found += argv_secrets(argv)
        found += [v for k, v in machine_env.items() if is_secret_name(k)]
        found += list(extra)
        # Longest first, so a secret that contains another is masked whole.
        unique = sorted({v for v in found if v and len(v) >= MIN_TEXT_SECRET}, key=len, reverse=True)
        return cls(tuple(unique))

    def literal(self, text: str) -> str:
        """Known secret values masked, nothing else (for JSON text, whose structure must survive)."""
        for value in self.values:
            if value in text:
                text = text.replace(value, MASK)
        return text

    def text(self, text: str) -> str:
        """Known values and secret-looking assignments masked (log lines, stacks, Markdown, SVG)."""
        text = self.literal(text)
        # Only lines holding a secret word can hold a secret assignment: a 100k-line log has few, so
        # the patterns run on those lines alone, found with str.find (a case-insensitive regex over
        # megabytes costs seconds). ASCII-only lowering keeps every offset where it was.
        lower = text.translate(_ASCII_LOWER)
        lines: set[tuple[int, int]] = set()
        for word in _WORDS_IN_TEXT:
            at = lower.find(word)
            while at >= 0:
                start = lower.rfind("\n", 0, at) + 1
                end = lower.find("\n", at)
                end = len(lower) if end < 0 else end
                lines.add((start, end))
                at = lower.find(word, end)
        if not lines:
            return text
        parts: list[str] = []
        done = 0
        for start, end in sorted(lines):
            parts += [text[done:start], self._line(text[start:end])]
            done = end
        parts.append(text[done:])
        return "".join(parts)

    def _line(self, line: str) -> str:
        line = _FLAG_VALUE.sub(self._flag, line)
        line = _FIELD_VALUE.sub(self._field, line)
        line = _URL_PASSWORD.sub(lambda m: f"{m[1]}{MASK}@", line)
        return _HF_TOKEN.sub(MASK, line)

    @staticmethod
    def _flag(match: re.Match) -> str:
        if not is_secret_flag(match[1]) or match[3] == MASK:
            return match[0]
        return f"{match[1]}{match[2]}{MASK}"

    @staticmethod
    def _field(match: re.Match) -> str:
        name, value = match[1], match[3]
        quoted = value[:1] in ("'", '"')
        if not _is_secret_field(name) or value in ("None", "null", "''", '""') or MASK in value:
            return match[0]
        # '#token: 20' in a decode-batch line is a count: a bare one-word field needs a quoted value.
        if not quoted and (_NUMBER.fullmatch(value) or ("_" not in name and not name.isupper())):
            return match[0]
        quote = value[0] if value[:1] in "'\"" else ""
        return f"{match[1]}{match[2]}{quote}{MASK}{quote}"

    def data(self, value: Any) -> Any:
        """Every string in a JSON-like structure masked; values under secret keys replaced."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {
                k: (
                    MASK
                    if isinstance(v, str) and isinstance(k, str) and _is_secret_field(k)
                    else self.data(v)
                )
                for k, v in value.items()
            }
        if isinstance(value, (list, tuple)):
            return [self.data(v) for v in value]
        return value
