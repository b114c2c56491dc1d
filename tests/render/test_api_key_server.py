"""A real server with an API key: `kit up` sends it (first token), SGLang refuses requests without it,
and the key's value appears nowhere in what the kit prints or writes."""

from __future__ import annotations

import secrets

import httpx
import pytest
from catalog_helpers import run_cli

from kit.launch import resolve
from kit.runtime.engine import client
from kit.runtime.server import kit_containers, published_port, remove

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_kit_up_with_an_api_key_sends_it_and_never_prints_it(built_image, monkeypatch, tmp_path):
    spec = resolve("tiny")
    built_image(spec.image_ref, spec.image)
    key = "kit-test-" + secrets.token_hex(16)
    monkeypatch.setenv("KIT_TEST_API_KEY", key)
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path))
    before = {c.id for c in kit_containers()}
    code, out, err = run_cli(
        ["up", "tiny", "--set", "container.api_key_env=KIT_TEST_API_KEY", "--json", "--keep"]
    )
    [container] = [c for c in kit_containers() if c.id not in before]
    try:
        assert code == 0, err[-2000:]
        assert '"verdict":"ready"' in out and '"first_token_s"' in out  # the key was sent
        assert key not in out and key not in err
        assert key not in " ".join(container.attrs["Config"]["Cmd"])  # by name only
        url = f"http://127.0.0.1:{published_port(container, spec.port)}"
        body = {"text": "Hi", "sampling_params": {"max_new_tokens": 2}}
        assert httpx.post(url + "/generate", json=body, timeout=60).status_code == 401
        auth = {"Authorization": f"Bearer {key}"}
        assert httpx.post(url + "/generate", json=body, headers=auth, timeout=60).status_code == 200
    finally:
        remove(container)
    assert all(key not in p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file())
    assert not client().containers.list(all=True, filters={"id": container.id})
