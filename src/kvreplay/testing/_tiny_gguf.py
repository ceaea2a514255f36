"""Write a tiny random-weight llama-architecture GGUF model for llama.cpp's llama-server.

The vocabulary is SentencePiece-style (GGUF tokenizer model ``llama``): ``<unk>``,
``<s>``, ``</s>``, the ChatML control tokens, 256 byte-fallback tokens, single
characters, then every prefix of the common and generated words (longer pieces
score higher, so whole words win). Weights are N(0, 0.02) from a seeded NumPy
generator, F32. Nothing is downloaded; the same arguments give the same bytes.

Needs ``gguf`` and ``numpy``; it is run as a script by the interpreter that has
them (``kvreplay.testing.make_tiny_gguf`` does that)::

    python _tiny_gguf.py OUT.gguf [--seed 0] [--ctx 4096] [--embd 256] [--layers 4]

Default shapes: 4 layers, hidden 256, 4 heads, FFN 1024, context 4096, about
7,900 tokens of vocabulary and 33 MB; it takes under a second.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING or __package__:
    from ._vocab import CHATML, COMMON_WORDS, add_shape_arguments, shape_of, syllable_words
else:  # run as a file by an interpreter without kvreplay
    from _vocab import CHATML, COMMON_WORDS, add_shape_arguments, shape_of, syllable_words

__all__ = ["build_vocab", "main", "write_gguf"]

SP = "\u2581"  # SentencePiece word-boundary marker
_CHARS = (
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,:;!?'\"()[]{}-_/=+*<>#@&%$|"
)


def build_vocab(n_gen_words: int, seed: int) -> tuple[list[str], list[float], list[int]]:
    """Build the token list, scores and token types.

    Args:
        n_gen_words: Generated syllable words added after the common words.
        seed: Seed for the generated words.

    Returns:
        ``(tokens, scores, types)``, parallel lists; ids 0..4 are
        ``<unk> <s> </s> <|im_start|> <|im_end|>``, then bytes ``<0x00>..<0xFF>``.
    """
    import gguf

    toks: list[str] = []
    scores: list[float] = []
    types: list[int] = []

    def add(tok: str, score: float, kind: int) -> None:
        toks.append(tok)
        scores.append(float(score))
        types.append(int(kind))

    tt = gguf.TokenType
    add("<unk>", 0.0, tt.UNKNOWN)
    add("<s>", 0.0, tt.CONTROL)
    add("</s>", 0.0, tt.CONTROL)
    add("<|im_start|>", 0.0, tt.CONTROL)
    add("<|im_end|>", 0.0, tt.CONTROL)
    for b in range(256):
        add(f"<0x{b:02X}>", 0.0, tt.BYTE)
    seen = set(toks)
    pieces = [SP, *_CHARS]
    for w in list(COMMON_WORDS) + syllable_words(n_gen_words, seed):
        full = SP + w
        pieces.extend(full[:i] for i in range(2, len(full) + 1))
    for p in pieces:
        if p in seen:
            continue
        seen.add(p)
        # Longer pieces score higher, so the SPM merge prefers whole words.
        add(p, -1000.0 + 10.0 * len(p) - 0.0001 * len(toks), tt.NORMAL)
    return toks, scores, types


def write_gguf(
    out: str,
    *,
    seed: int = 0,
    embd: int = 256,
    layers: int = 4,
    heads: int = 4,
    kv_heads: int = 4,
    ff: int = 1024,
    ctx: int = 4096,
    words: int = 3000,
) -> dict:
    """Write the model.

    Args:
        out: Path of the ``.gguf`` file to write (overwritten).
        seed: Seed for the weights and the generated words.
        embd: Hidden size.
        layers: Transformer blocks.
        heads: Attention heads.
        kv_heads: Key/value heads.
        ff: Feed-forward size.
        ctx: Trained context length written into the metadata (tokens).
        words: Generated syllable words in the vocabulary.

    Returns:
        A summary: ``{"path", "n_vocab", "ctx", "layers", "embd"}``.
    """
    import gguf
    import numpy as np

    toks, scores, types = build_vocab(words, seed)
    n_vocab = len(toks)
    head_dim = embd // heads
    rng = np.random.default_rng(seed)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)

    def ones(n: int) -> np.ndarray:
        return np.ones((n,), dtype=np.float32)

    gw = gguf.GGUFWriter(out, "llama")
    gw.add_name("kvreplay-tiny-random-llama")
    gw.add_context_length(ctx)
    gw.add_embedding_length(embd)
    gw.add_block_count(layers)
    gw.add_feed_forward_length(ff)
    gw.add_head_count(heads)
    gw.add_head_count_kv(kv_heads)
    gw.add_rope_dimension_count(head_dim)
    gw.add_rope_freq_base(10000.0)
    gw.add_layer_norm_rms_eps(1e-5)
    gw.add_vocab_size(n_vocab)
    gw.add_file_type(gguf.LlamaFileType.ALL_F32)
    gw.add_tokenizer_model("llama")
    gw.add_tokenizer_pre("default")
    gw.add_token_list(toks)
    gw.add_token_scores(scores)
    gw.add_token_types(types)
    gw.add_bos_token_id(1)
    gw.add_eos_token_id(2)
    gw.add_unk_token_id(0)
    gw.add_eot_token_id(4)
    gw.add_add_bos_token(True)
    gw.add_add_eos_token(False)
    gw.add_add_space_prefix(True)
    gw.add_chat_template(CHATML)
    # NumPy shapes are (out, in); GGUF stores them reversed.
    gw.add_tensor("token_embd.weight", w(n_vocab, embd))
    for i in range(layers):
        p = f"blk.{i}."
        gw.add_tensor(p + "attn_norm.weight", ones(embd))
        gw.add_tensor(p + "attn_q.weight", w(heads * head_dim, embd))
        gw.add_tensor(p + "attn_k.weight", w(kv_heads * head_dim, embd))
        gw.add_tensor(p + "attn_v.weight", w(kv_heads * head_dim, embd))
        gw.add_tensor(p + "attn_output.weight", w(embd, heads * head_dim))
        gw.add_tensor(p + "ffn_norm.weight", ones(embd))
        gw.add_tensor(p + "ffn_gate.weight", w(ff, embd))
        gw.add_tensor(p + "ffn_up.weight", w(ff, embd))
        gw.add_tensor(p + "ffn_down.weight", w(embd, ff))
    gw.add_tensor("output_norm.weight", ones(embd))
    gw.add_tensor("output.weight", w(n_vocab, embd))
    gw.write_header_to_file()
    gw.write_kv_data_to_file()
    gw.write_tensors_to_file()
    gw.close()
    return {"path": out, "n_vocab": n_vocab, "ctx": ctx, "layers": layers, "embd": embd}


def main(argv: list[str] | None = None) -> int:
    """Command line: write the model and print its summary as one JSON line."""
    ap = argparse.ArgumentParser(description="Write a tiny random-weight llama GGUF.")
    add_shape_arguments(ap)
    ap.add_argument("--words", type=int, default=3000)
    a = ap.parse_args(argv)
    info = write_gguf(a.out, **shape_of(a), words=a.words)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
