"""Make the rehearsal model: a tiny Qwen2-architecture checkpoint, generated locally with a fixed seed.

Runs at image build time inside the rehearsal image (it needs torch, transformers and tokenizers,
which the kit itself does not). Nothing is downloaded from a model hub: the byte-level BPE tokenizer
is trained here on a small built-in corpus, and the weights are random with a fixed seed, so two
builds give the same checkpoint. The model talks nonsense; it exists to exercise the real server.

    python -m kit.rehearsal.tiny_model OUT_DIR
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SEED = 20261202
VOCAB_SIZE = 1000
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# ChatML, the format Qwen models use; the rehearsal exercises the same chat path as the real model.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
ARCHITECTURE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
}
# A fixed corpus for the byte-level BPE vocabulary.
CORPUS = (
    """
The kit starts a model server in a container, watches every rank through distributed init,
weight loading, memory pools and graph capture, and names the phase where a start-up stops.
Tensor parallel ranks meet at a rendezvous, build a process group, and run a first all-reduce.
A hang at init looks like a quiet process: no CPU time, no reads, and about one gigabyte of memory.
Weights stream from safetensors shards; a slow disk is slow but alive, and it keeps reading.
Hello world! How are you today? I am fine, thank you. What is the capital of France? Paris.
One two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen.
The quick brown fox jumps over the lazy dog while the server answers chat completions in streams.
Speculative decoding drafts tokens with a small head and verifies them with the target model.
"""
    * 4
)
# The prose above alone yields ~600 tokens; fixed syllable triples give BPE enough distinct words to
# fill the ~1000-token vocabulary the rehearsal promises (deterministic: no randomness in training).
_SYLLABLES = [
    "ka",
    "ri",
    "to",
    "na",
    "mi",
    "su",
    "le",
    "po",
    "da",
    "ve",
    "go",
    "ni",
    "ru",
    "sa",
    "te",
    "mo",
    "li",
    "bu",
    "fe",
    "ja",
]
SYNTHETIC = " ".join(a + b + c for a in _SYLLABLES for b in _SYLLABLES for c in _SYLLABLES[:6])


def build_tokenizer(vocab_size: int = VOCAB_SIZE, special_tokens: tuple[str, ...] = tuple(SPECIAL_TOKENS)):
    """A byte-level BPE tokenizer trained on the built-in corpus; the special tokens take ids 0..n-1."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([*CORPUS.splitlines(), *SYNTHETIC.split(" ")], trainer=trainer)
    return tokenizer


def make_tiny_model(out: Path, seed: int = SEED) -> Path:
    import torch
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    raw = build_tokenizer()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(out)

    config = Qwen2Config(
        vocab_size=raw.get_vocab_size(),
        tie_word_embeddings=True,
        torch_dtype="bfloat16",
        bos_token_id=None,
        eos_token_id=raw.token_to_id("<|im_end|>"),
        pad_token_id=raw.token_to_id("<|endoftext|>"),
        **ARCHITECTURE,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    (out / "generation_config.json").write_text(
        json.dumps({"eos_token_id": config.eos_token_id, "do_sample": False}, indent=2) + "\n"
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()
    print(make_tiny_model(args.out, args.seed))


if __name__ == "__main__":
    main()
