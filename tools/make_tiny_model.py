"""Generate a tiny Llama-architecture model in Hugging Face format, entirely offline.

No model can be downloaded here, so the demo and the tests use this one: random weights (seeded, so
the same files come out every time), a byte-level BPE tokenizer trained on generated text, and a chat
template. vLLM and transformers both load it like any hub checkpoint.

Run with the *runtime* environment's Python (it needs torch, transformers and tokenizers):
    .cache/venvs/runtime/bin/python tools/make_tiny_model.py OUT_DIR
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIAL_TOKENS = ["<|bos|>", "<|eos|>", "<|pad|>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>"]
WORDS = (
    "ray serve vllm model token cluster node worker head deploy stage scale bench latency throughput "
    "airflow dag task operator hook trigger sensor endpoint request stream chunk answer question the a "
    "of to and in is it for on with as by at from this that be are was were will can should gpu cpu "
    "memory cache batch replica autoscale rollback gate cost price hour million tokens second hello world"
).split()


def corpus(n_lines: int, seed: int) -> list[str]:
    """Generated English-like text: enough for a BPE tokenizer with merges over real words."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n_lines):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 24))]
        lines.append(" ".join(words).capitalize() + rng.choice([".", "?", "!", ","]))
    return lines


def train_tokenizer(vocab_size: int, seed: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(20_000, seed), trainer=trainer)
    return tok


def build(out: Path, *, vocab_size: int = 2048, seed: int = 0, hidden_size: int = 128, layers: int = 2) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(vocab_size, seed)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|bos|>",
        eos_token="<|eos|>",
        pad_token="<|pad|>",
        additional_special_tokens=["<|end|>", "<|system|>", "<|user|>", "<|assistant|>"],
        model_max_length=2048,
    )
    hf_tok.chat_template = CHAT_TEMPLATE
    hf_tok.save_pretrained(out)

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(hf_tok),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=hidden_size // 64,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=2048,
        bos_token_id=hf_tok.bos_token_id,
        eos_token_id=[hf_tok.eos_token_id, hf_tok.convert_tokens_to_ids("<|end|>")],
        pad_token_id=hf_tok.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.save_pretrained(out, safe_serialization=True)
    (out / "README.md").write_text(
        "# tiny-llama (generated)\n\nRandom weights, locally trained byte-level BPE tokenizer, chat template.\n"
        "Made by raylift's tools/make_tiny_model.py for offline demos and tests; it produces noise.\n"
    )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--vocab-size", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=0)
    # a heavier model (more compute per token) for a version that is slower on any machine
    ap.add_argument("--hidden-size", type=int, default=128, help="a multiple of 64 (the head size)")
    ap.add_argument("--layers", type=int, default=2)
    args = ap.parse_args(argv)
    if args.hidden_size < 64 or args.hidden_size % 64:
        ap.error(f"--hidden-size {args.hidden_size}: use a multiple of 64 (the head size), e.g. 128 or 512")
    if (args.out / "config.json").exists() and (args.out / "model.safetensors").exists():
        print(f"tiny model already present at {args.out}")
        return 0
    build(args.out, vocab_size=args.vocab_size, seed=args.seed, hidden_size=args.hidden_size, layers=args.layers)
    files = {p.name: p.stat().st_size for p in sorted(args.out.iterdir())}
    print(json.dumps({"model_dir": str(args.out), "files": files}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
