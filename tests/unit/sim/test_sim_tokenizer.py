"""Tokenizer approximation: pieces and template boundaries counted by hand."""

from __future__ import annotations

import pytest

from kvreplay.sim.tokenizer import (
    IM_END,
    IM_START,
    SPECIAL_IDS_END,
    count_tokens,
    pieces,
    render_body,
    render_messages,
    tokenize_text,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Hello, world!", ["Hello", ",", " world", "!"]),
        ("internationalization", ["intern", "ationa", "lizati", "on"]),
        (" 12345", [" 123", "45"]),
        ("a  b", ["a", "  ", "b"]),
        ("x = y->z;", ["x", " =", " y", "->", "z", ";"]),
        ("snake_case", ["snake", "_", "case"]),
        ("line\n\nnext", ["line", "\n\n", "next"]),
        ("", []),
    ],
)
def test_pieces_by_hand(text, expected):
    assert pieces(text) == expected
    assert "".join(pieces(text)) == text


def test_ids_stable_and_above_specials():
    a = tokenize_text("cache block")
    assert a == tokenize_text("cache block")
    assert len(a) == 2 and all(t >= SPECIAL_IDS_END for t in a)
    assert tokenize_text(" block")[0] == a[1]
    assert tokenize_text("block")[0] != a[1]  # the leading space is part of the piece


def test_chat_boundaries_by_hand():
    # system: <|im_start|> "system" "\n" "Be" " brief" "." <|im_end|> "\n"      = 8
    # user:   <|im_start|> "user" "\n" "Hi" <|im_end|> "\n"                     = 6  -> 14
    # gen:    <|im_start|> "assist" "ant" "\n"                                  = 4  -> 18
    p = render_messages([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    assert (p.system_end, p.messages_end, p.prompt_end) == (8, 14, 18)
    assert p.tokens[0] == IM_START and p.tokens[6] == IM_END
    assert p.tokens[:8] == render_messages([{"role": "system", "content": "Be brief."}]).tokens[:8]


def test_no_system_block_and_content_parts():
    p = render_body(
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "image_url"}]}]})
    # <|im_start|> "user" "\n" <|media|> "Hi" <|im_end|> "\n" = 7, then 4
    assert (p.system_end, p.messages_end, p.prompt_end) == (0, 7, 11)


def test_completions_prompt_forms():
    assert render_body({"prompt": "Hello, world!"}).prompt_end == 4
    p = render_body({"prompt": [5, 6, 7]})
    assert p.tokens == (5, 6, 7) and p.system_end == 0 and p.messages_end == 3
    with pytest.raises(ValueError, match="neither"):
        render_body({"input": "x"})
    with pytest.raises(ValueError, match="prompt"):
        render_body({"prompt": {"a": 1}})


def test_count_near_bpe_for_english():
    text = "The quick brown fox jumps over the lazy dog. " * 10
    # 9 words + "." per sentence (every word <= 6 letters), plus the trailing " "
    assert count_tokens(text) == 10 * 10 + 1
