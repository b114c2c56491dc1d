"""Nothing leaks: an HF token and an API key put into the launch (environment and argv) and into the
log are in no byte of the bundle, compressed or not, nor in the runs folder beside it.

The start-up runs through kit up's own code (follow_source: watcher, verdict, stacks, record) over a
replayed source, so every writer the kit has is on the path; tests/bundles/test_bundles_docker.py
does the same against a real container.
"""

from __future__ import annotations

import gzip
import secrets
from pathlib import Path

from bundle_helpers import FIXTURES

from kit.diagnose.bundle import read_bundle
from kit.launch import resolve
from kit.logs.limits import limits_from_spec
from kit.scenarios.replay import ReplaySource, Scenario
from kit.startup.up import follow_source


def assert_nowhere(secret: str, bundle: Path, folder: Path) -> None:
    needle = secret.encode()
    compressed = bundle.read_bytes()
    assert needle not in compressed
    assert needle not in gzip.decompress(compressed)
    for member, data in read_bundle(bundle).members.items():
        assert needle not in data, member
    for path in folder.rglob("*"):
        if path.is_file():
            assert needle not in path.read_bytes(), path


def hung_scenario(log_lines: list[str]) -> Scenario:
    return Scenario.model_validate(
        {
            "name": "secrets",
            "title": "a hang whose launch and log carry secrets",
            "about": "test",
            "sources": ["test"],
            "target": "tiny",
            "duration_s": 200,
            "ranks": 2,
            "expect": {"verdict": "hung", "phase": "init"},
            "stacks": {
                "sglang::scheduler_TP0": (FIXTURES / "stacks" / "hang-init-11.txt").read_text(),
                "sglang::scheduler_TP1": (FIXTURES / "stacks" / "hang-init-12.txt").read_text(),
            },
            "at": [
                {"t": 0, "log": "\n".join(log_lines) + "\n", "source": "this test: secrets in the log"},
                {
                    "t": 5,
                    "log": "[{time} TP0] Init parallel begin.\n[{time} TP1] Init parallel begin.\n",
                    "source": "sglang 0.5.23 parallel_state.py: the rank's init line",
                },
            ],
        }
    )


def test_an_hf_token_and_an_api_key_are_in_no_byte_of_the_bundle(kit_cache, monkeypatch):
    token = "hf_" + secrets.token_hex(17)
    api_key = "sk-" + secrets.token_hex(16)
    password = "correct horse battery " + secrets.token_hex(4)  # no pattern knows this one
    monkeypatch.setenv("HF_TOKEN", token)
    spec = resolve(
        "tiny",
        overrides=[
            f"env.HF_TOKEN={token}",
            f"env.KIT_DB_PASSWORD={password}",
            f'extra_args=["--api-key", "{api_key}"]',
        ],
    )
    log = [
        f"[{{time}}] server_args=ServerArgs(model_path='/m', api_key='{api_key}', tp_size=2)",
        f"[{{time}}] Downloading with HF token {token}",
        f"[{{time}}] + exec python -m sglang.launch_server --api-key {api_key} --port 30000",
        f"[{{time}}] connecting with password {password}",
    ]
    result = follow_source(
        ReplaySource(hung_scenario(log)), spec, limits_from_spec(spec), session="secrets", first_token=False
    )
    assert result.verdict == "hung" and result.bundle
    bundle, folder = Path(result.bundle), Path(result.diagnostics)
    for secret in (token, api_key, password):
        assert_nowhere(secret, bundle, folder)
    # The names survive, so a replay knows what to take from its own environment.
    launch = read_bundle(bundle).fingerprint["launch"]
    assert launch["secrets"] == ["HF_TOKEN", "KIT_DB_PASSWORD"]
    assert launch["secret_flags"] == ["--api-key"]
    assert "api_key='<redacted>'" in read_bundle(bundle).log_text
