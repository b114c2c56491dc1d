"""Secrets never survive the redactor: names kept, values gone, in fields and in free text."""

from __future__ import annotations

import json

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kit.diagnose.redact import MASK, Redactor, is_secret_flag, is_secret_name, mask_argv, split_env


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("HF_TOKEN", True),
        ("KIT_API_KEY", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("DB_PASSWORD", True),
        ("hf_token", True),
        ("NCCL_P2P_DISABLE", False),
        ("SGLANG_USE_CPU_ENGINE", False),
        ("HF_HOME", False),
    ],
)
def test_a_variable_is_secret_when_its_name_contains_token_key_secret_or_password(name, secret):
    assert is_secret_name(name) is secret


@pytest.mark.parametrize(
    ("flag", "secret"),
    [
        ("--api-key", True),
        ("--admin-api-key", True),
        ("--api-key=x", True),
        ("--hf-token", True),
        ("--max-total-tokens", False),
        ("--skip-tokenizer-init", False),
        ("--kv-cache-dtype", False),
        ("api-key", False),  # a value, not a flag
    ],
)
def test_a_flag_is_secret_when_one_part_of_its_name_is_a_secret_word(flag, secret):
    assert is_secret_flag(flag) is secret


def test_argv_keeps_the_flags_and_masks_their_values():
    argv = ["python", "-m", "sglang.launch_server", "--api-key", "sk-1", "--admin-api-key=sk-2", "--tp", "4"]
    masked, flags = mask_argv(argv)
    assert masked == [
        "python",
        "-m",
        "sglang.launch_server",
        "--api-key",
        MASK,
        f"--admin-api-key={MASK}",
        "--tp",
        "4",
    ]
    assert flags == ("--api-key", "--admin-api-key")


def test_env_keeps_secret_names_and_drops_their_values():
    masked, names = split_env({"HF_TOKEN": "hf_x", "NCCL_P2P_DISABLE": "1", "KIT_API_KEY": "k"})
    assert masked == {"HF_TOKEN": MASK, "NCCL_P2P_DISABLE": "1", "KIT_API_KEY": MASK}
    assert names == ("HF_TOKEN", "KIT_API_KEY")


HF = "hf_" + "Ab1" * 12  # a Hugging Face token's shape
KEY = "sk-kit-test-0123456789abcdef"


@pytest.mark.parametrize(
    "line",
    [
        f"[2026-12-02 17:57:01] server_args=ServerArgs(model_path='/m', api_key='{KEY}', tp_size=2)",
        f"launch_server: error: unrecognized arguments: --hf-token {HF}",
        f"+ python -m sglang.launch_server --api-key={KEY} --port 30000",
        f"env: HF_TOKEN={HF} KIT_API_KEY={KEY}",
        f'{{"api_key": "{KEY}", "hf_token": "{HF}"}}',
        f"Downloading with token {HF} from https://user:{KEY}@huggingface.co/x",
    ],
)
def test_secrets_in_log_lines_are_masked_even_when_the_values_are_not_known(line):
    masked = Redactor().text(line)
    assert KEY not in masked and HF not in masked
    assert MASK in masked


@pytest.mark.parametrize(
    "line",
    [
        "server_args=ServerArgs(tokenizer_path='/opt/kit/models/tiny', max_total_tokens=65536, api_key=None)",
        "Decode batch. #running-req: 1, #token: 20, token usage: 0.00, gen throughput (token/s): 12.5",
        "KV Cache is allocated. #tokens: 65536, K size: 0.01 GB, V size: 0.01 GB",
        '{"api_key_env": "KIT_API_KEY", "pass_env": ["HF_TOKEN"]}',
        "first token 0.52 s; tokenizer_mode='auto'",
    ],
)
def test_lines_without_secrets_are_left_alone(line):
    assert Redactor().text(line) == line


def test_known_values_are_masked_anywhere_and_short_ones_only_in_fields():
    redactor = Redactor.for_launch(
        {"HF_TOKEN": "plainvalue123", "SGLANG_DISABLE_KEY_X": "1"}, ["--api-key", "abcdef12"]
    )
    text = "token plainvalue123 seen; key abcdef12; count 1 and 11"
    assert redactor.text(text) == f"token {MASK} seen; key {MASK}; count 1 and 11"


_secret = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEF0123456789-_", min_size=8, max_size=48)
_noise = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=80)


_FRAME = json.dumps(
    {
        "env": {"HF_TOKEN": MASK},
        "argv": ["--api-key", MASK],
        "evidence": ["server_args=ServerArgs(api_key=')"],
    },
)


@settings(max_examples=200, deadline=None)
@given(token=_secret, key=_secret, before=_noise, after=_noise)
def test_no_known_secret_survives_in_text_or_in_data(token, key, before, after):
    # A secret spelt like a piece of the test's own frame ("evidence", "redacted") is not a leak.
    assume(token not in _FRAME and key not in _FRAME)
    redactor = Redactor.for_launch({"HF_TOKEN": token}, ["python", "--api-key", key])
    lines = [
        f"{before}{token}{after}",
        f"{before} server_args=ServerArgs(api_key='{key}') {after}",
        f"{before}--api-key {key}{after}",
        f"{before}HF_TOKEN={token}{after}",
    ]
    for line in lines:
        masked = redactor.text(line)
        assert token not in masked and key not in masked
    data = redactor.data({"env": {"HF_TOKEN": token}, "argv": ["--api-key", key], "evidence": lines})
    dumped = json.dumps(data)
    assert token not in dumped and key not in dumped


def test_masking_keeps_its_place_after_letters_that_change_length_when_lowered():
    line = "İstanbul ẞ KELVIN-K: " + f"server_args=ServerArgs(api_key='{KEY}')\nnext line {HF}\n"
    masked = Redactor().text(line)
    assert masked == "İstanbul ẞ KELVIN-K: " + f"server_args=ServerArgs(api_key='{MASK}')\nnext line {MASK}\n"
