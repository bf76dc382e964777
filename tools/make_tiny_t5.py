"""Generate a tiny T5 (seq2seq) model in Hugging Face format, entirely offline, for the translator app.

The ECS seed serves t5-small for English -> French; nothing can be downloaded here, so the tests use
this one instead: the T5 architecture with random weights (seeded: the same files every time) and a
SentencePiece-style Unigram tokenizer trained here on generated English/French text. transformers
loads it like any hub checkpoint (``AutoModelForSeq2SeqLM``, ``AutoTokenizer``).

Random weights produce noise, and a random model can just as well pick ``</s>`` first and return an
empty string. The rows of the output projection that belong to the special tokens are zeroed, so
their logits are 0 while the maximum over the other tokens is almost surely positive: generation
runs to ``max_new_tokens`` and every request gets some (nonsense) "translation" back.

Run with the *runtime* environment's Python (torch, transformers, tokenizers):
    .cache/venvs/runtime/bin/python tools/make_tiny_t5.py OUT_DIR
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

SPECIAL_TOKENS = ["<pad>", "</s>", "<unk>"]  # T5's ids 0, 1, 2
ENGLISH = (
    "hello world the cat house is red blue green small big we you they translate this sentence into french "
    "please thank good morning evening night ray serve cluster node model answer question today tomorrow"
).split()
FRENCH = (
    "bonjour monde le la chat maison est rouge bleu vert petit grand nous vous ils traduire cette phrase en "
    "francais merci bon matin soir nuit grappe noeud modele reponse question aujourd hui demain"
).split()
TASK_PREFIX = "translate English to French: "


def corpus(n_lines: int, seed: int) -> list[str]:
    """Generated text in both languages, with the task prefix, so every piece the app sends is in vocab."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n_lines):
        words = ENGLISH if rng.random() < 0.5 else FRENCH
        text = " ".join(rng.choice(words) for _ in range(rng.randint(3, 16))).capitalize()
        lines.append((TASK_PREFIX if words is ENGLISH else "") + text + rng.choice([".", "!", "?"]))
    return lines


def train_tokenizer(vocab_size: int, seed: int):
    """A Unigram tokenizer with T5's normalisation/pre-tokenisation and a ``$A </s>`` post-processor."""
    from tokenizers import SentencePieceUnigramTokenizer, processors

    tok = SentencePieceUnigramTokenizer()
    tok.train_from_iterator(
        corpus(5_000, seed),
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        unk_token="<unk>",
        show_progress=False,
    )
    backend = tok._tokenizer
    eos = backend.token_to_id("</s>")
    backend.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", eos)]
    )
    return backend


def build(out: Path, *, vocab_size: int = 512, seed: int = 0) -> Path:
    import torch
    from transformers import T5Config, T5ForConditionalGeneration, T5TokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    hf_tok = T5TokenizerFast(
        tokenizer_object=train_tokenizer(vocab_size, seed),
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        extra_ids=0,
        model_max_length=512,
    )
    if [hf_tok.pad_token_id, hf_tok.eos_token_id, hf_tok.unk_token_id] != [0, 1, 2]:
        raise RuntimeError(
            f"special token ids moved: {hf_tok.pad_token_id, hf_tok.eos_token_id, hf_tok.unk_token_id}"
        )
    hf_tok.save_pretrained(out)

    torch.manual_seed(seed)
    config = T5Config(
        vocab_size=len(hf_tok),
        d_model=64,
        d_kv=16,
        d_ff=128,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        relative_attention_num_buckets=8,
        dropout_rate=0.0,
        feed_forward_proj="relu",
        tie_word_embeddings=False,
        pad_token_id=hf_tok.pad_token_id,
        eos_token_id=hf_tok.eos_token_id,
        decoder_start_token_id=hf_tok.pad_token_id,
        # Same key t5-small carries: the prefix a translation request starts with.
        task_specific_params={"translation_en_to_fr": {"prefix": TASK_PREFIX, "max_length": 64}},
    )
    model = T5ForConditionalGeneration(config)
    with torch.no_grad():  # specials never win the argmax (see the module docstring)
        model.lm_head.weight[: len(SPECIAL_TOKENS)] = 0.0
    model.save_pretrained(out, safe_serialization=True)
    (out / "README.md").write_text(
        "# tiny-t5 (generated)\n\nT5 architecture, random weights, locally trained Unigram tokenizer.\n"
        "Made by raylift's tools/make_tiny_t5.py for offline tests of the translator app; it produces noise.\n"
    )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--vocab-size", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if (args.out / "config.json").exists() and (args.out / "model.safetensors").exists():
        print(f"tiny T5 already present at {args.out}")
        return 0
    build(args.out, vocab_size=args.vocab_size, seed=args.seed)
    files = {p.name: p.stat().st_size for p in sorted(args.out.iterdir())}
    print(json.dumps({"model_dir": str(args.out), "files": files}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
