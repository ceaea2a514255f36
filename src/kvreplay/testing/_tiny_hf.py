"""Write a tiny random-weight ``LlamaForCausalLM`` Hugging Face model directory for vLLM.

The tokenizer is byte-level BPE trained here with ``tokenizers`` on a generated
corpus (``_vocab.corpus_lines``), with the ChatML template; the weights come from
``torch.manual_seed``. Nothing is downloaded (no hub access); the same arguments
give the same files.

Needs ``torch``, ``transformers`` and ``tokenizers``, which live in the vLLM
environment, not in kvreplay's; it is run as a script by that interpreter
(``kvreplay.testing.make_tiny_hf`` does that)::

    python _tiny_hf.py OUTDIR [--seed 0] [--ctx 4096] [--vocab 8000]

Default shapes: 4 layers, hidden 256, 4 heads, FFN 1024, context 4096, bf16,
about 8.3M parameters (17 MB); it takes a few seconds, mostly importing torch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING or __package__:
    from ._vocab import CHATML, SPECIAL_TOKENS, add_shape_arguments, corpus_lines, shape_of
else:  # run as a file by an interpreter without kvreplay
    from _vocab import CHATML, SPECIAL_TOKENS, add_shape_arguments, corpus_lines, shape_of

__all__ = ["main", "write_hf"]


def write_hf(
    out: str,
    *,
    seed: int = 0,
    embd: int = 256,
    layers: int = 4,
    heads: int = 4,
    kv_heads: int = 4,
    ff: int = 1024,
    ctx: int = 4096,
    vocab: int = 8000,
) -> dict:
    """Write the model directory.

    Args:
        out: Directory to write (created; files in it are overwritten).
        seed: Seed for the corpus and the weights.
        embd: Hidden size.
        layers: Transformer blocks.
        heads: Attention heads.
        kv_heads: Key/value heads.
        ff: Feed-forward size.
        ctx: ``max_position_embeddings`` and the tokenizer's ``model_max_length`` (tokens).
        vocab: Target BPE vocabulary size.

    Returns:
        A summary: ``{"path", "n_vocab", "params", "ctx"}``.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    os.makedirs(out, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus_lines(20000, seed), trainer=trainer)

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="<|im_end|>",
        pad_token="</s>",
        additional_special_tokens=["<|im_start|>"],
    )
    hf_tok.chat_template = CHATML
    hf_tok.model_max_length = ctx
    hf_tok.save_pretrained(out)

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(hf_tok),
        hidden_size=embd,
        intermediate_size=ff,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=ctx,
        bos_token_id=hf_tok.bos_token_id,
        eos_token_id=hf_tok.eos_token_id,
        pad_token_id=hf_tok.pad_token_id,
        tie_word_embeddings=False,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        dtype="bfloat16",
    )
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    n_params = sum(p.numel() for p in model.parameters())
    return {"path": out, "n_vocab": len(hf_tok), "params": n_params, "ctx": ctx}


def main(argv: list[str] | None = None) -> int:
    """Command line: write the model and print its summary as one JSON line."""
    ap = argparse.ArgumentParser(description="Write a tiny random-weight HF llama model.")
    add_shape_arguments(ap)
    ap.add_argument("--vocab", type=int, default=8000)
    a = ap.parse_args(argv)
    info = write_hf(a.out, **shape_of(a), vocab=a.vocab)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
