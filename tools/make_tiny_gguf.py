"""Convert the generated tiny Llama (tools/make_tiny_model.py) to a GGUF file for the llama.cpp app.

Nothing can be downloaded here, so the llama.cpp app is tested on the same tiny model the vLLM app
serves, written as GGUF with the ``gguf`` package (llama.cpp's own writer). The steps are the ones
llama.cpp's ``convert_hf_to_gguf.py`` takes for a Llama with a byte-level BPE ("gpt2") tokenizer:
hyper-parameters as ``llama.*`` keys, tokens/types/merges and special ids from tokenizer.json, the
chat template, and the weights under GGUF tensor names with q/k rows permuted from Hugging Face's
rotate-half layout to the interleaved one llama.cpp's RoPE expects. Weights stay float32 (exact).

Run with the *runtime* environment's Python (gguf, numpy, safetensors):
    .cache/venvs/runtime/bin/python tools/make_tiny_gguf.py HF_DIR OUT_DIR
writes OUT_DIR/tiny-llama-f32.gguf (skipped when it exists).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

GGUF_NAME = "tiny-llama-f32.gguf"
LAYER_TENSORS = {  # Hugging Face suffix -> GGUF suffix, per block
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
GLOBAL_TENSORS = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}


def permute(weights: Any, n_head: int) -> Any:
    """Rotate-half (HF) -> interleaved (GGUF) row order of a q/k projection with ``n_head`` heads."""
    rows = weights.shape[0]
    return (
        weights.reshape(n_head, 2, rows // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def gguf_tensor_name(hf_name: str) -> str:
    if hf_name in GLOBAL_TENSORS:
        return GLOBAL_TENSORS[hf_name]
    parts = hf_name.split(".")  # model.layers.<i>.<suffix>
    if parts[:2] != ["model", "layers"] or ".".join(parts[3:]) not in LAYER_TENSORS:
        raise ValueError(f"no GGUF name for tensor {hf_name!r}: not a plain Llama checkpoint")
    return f"blk.{parts[2]}.{LAYER_TENSORS['.'.join(parts[3:])]}"


def vocab(hf_dir: Path, vocab_size: int) -> tuple[list[str], list[int], list[str]]:
    """(tokens by id, GGUF token types, merges) from tokenizer.json."""
    import gguf

    data = json.loads((hf_dir / "tokenizer.json").read_text())
    model = data["model"]
    if model.get("type") != "BPE":
        raise ValueError(f"tokenizer model {model.get('type')!r}: only byte-level BPE is converted here")
    by_id = {i: t for t, i in model["vocab"].items()}
    special = {t["id"]: t["content"] for t in data.get("added_tokens", []) if t.get("special")}
    by_id.update(special)
    tokens = [by_id.get(i, f"[PAD{i}]") for i in range(vocab_size)]
    types = [
        gguf.TokenType.CONTROL
        if i in special
        else gguf.TokenType.NORMAL
        if i in by_id
        else gguf.TokenType.UNUSED
        for i in range(vocab_size)
    ]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    return tokens, types, merges


def convert(hf_dir: Path, out: Path) -> Path:
    import gguf
    from safetensors.numpy import load_file

    cfg = json.loads((hf_dir / "config.json").read_text())
    if cfg.get("model_type") != "llama":
        raise ValueError(
            f"{hf_dir} holds a {cfg.get('model_type')!r} model; this converter handles llama only"
        )
    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // n_head
    rope_theta = (cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta", 10000.0))
    eos = cfg["eos_token_id"]
    eos_ids = eos if isinstance(eos, list) else [eos]

    out.mkdir(parents=True, exist_ok=True)
    path = out / GGUF_NAME
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(hf_dir.name)
    writer.add_context_length(cfg["max_position_embeddings"])
    writer.add_embedding_length(cfg["hidden_size"])
    writer.add_block_count(cfg["num_hidden_layers"])
    writer.add_feed_forward_length(cfg["intermediate_size"])
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_kv)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(float(rope_theta))
    writer.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    writer.add_vocab_size(cfg["vocab_size"])
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)

    tokens, types, merges = vocab(hf_dir, cfg["vocab_size"])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(cfg["bos_token_id"])
    writer.add_eos_token_id(eos_ids[0])
    if len(eos_ids) > 1:  # the chat template's end-of-turn token also ends generation
        writer.add_eot_token_id(eos_ids[1])
    writer.add_pad_token_id(cfg["pad_token_id"])
    writer.add_add_bos_token(False)  # as the HF tokenizer: the chat template writes <|bos|> itself
    template = hf_dir / "chat_template.jinja"
    if template.is_file():
        writer.add_chat_template(template.read_text())

    for name, array in sorted(load_file(str(hf_dir / "model.safetensors")).items()):
        if name.endswith("self_attn.q_proj.weight"):
            array = permute(array, n_head)
        elif name.endswith("self_attn.k_proj.weight"):
            array = permute(array, n_kv)
        writer.add_tensor(gguf_tensor_name(name), array.astype("float32"))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("hf_dir", type=Path, help="the tiny Llama in Hugging Face format")
    ap.add_argument("out", type=Path, help="folder for the GGUF file")
    args = ap.parse_args(argv)
    target = args.out / GGUF_NAME
    if target.exists():
        print(f"tiny GGUF already present at {target}")
        return 0
    path = convert(args.hf_dir, args.out)
    print(json.dumps({"gguf": str(path), "bytes": path.stat().st_size}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
