from __future__ import annotations

import sys
from pathlib import Path

import pytest

# fake_hub beside these tests; catalog_helpers (scratch catalogs, the CLI in-process) beside the catalog's.
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "catalog"))

from catalog_helpers import copy_catalog
from fake_hub import COMMIT, REPO, FakeHub, Repo, model_files

FAKE_MODEL = f"""
[model]
name = "fake-model"
hf_id = "{REPO}"
path = "{REPO}"
revision = "{COMMIT}"
hf_files = ["*.json", "*.safetensors"]
architecture = "Qwen2ForCausalLM"
model_type = "qwen2"
size_on_disk_gib = 0.002
layers = 2
hidden_size = 64
attention_heads = 4
kv_heads = 2
head_dim = 16
max_context_length = 4096

[profiles.fake]
tp = 2
cuda_graph = false

[profiles.fake.container]
hf_cache = "HF_HOME_HERE"
pass_env = []

[profiles.fake.timing.deadlines]
init = 60
load = 60
memory = 60
capture = 60
warmup = 60
first_token = 30

[profiles.fake.timing.stall_windows]
init = 20
load = 20
memory = 20
capture = 20
warmup = 20

[targets.fake]
profile = "fake"
image = "sglang-0.5.23-cpu"
"""


@pytest.fixture
def hub():
    with FakeHub({REPO: Repo(model_files(), commit=COMMIT, branches={"main": COMMIT})}) as fake:
        yield fake


@pytest.fixture
def env(tmp_path, monkeypatch, hub):
    """A scratch catalog whose target `fake` fetches from the fake hub into tmp_path/hf."""
    catalog = copy_catalog(tmp_path)
    hf_home = tmp_path / "hf"
    (catalog / "models" / "fake-model.toml").write_text(FAKE_MODEL.replace("HF_HOME_HERE", str(hf_home)))
    monkeypatch.setenv("KIT_CATALOG_DIR", str(catalog))
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path / "kit-cache"))
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return hf_home
