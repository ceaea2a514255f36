import orjson
import pytest

from kvreplay.experiments.probe.legs import ProbeConfig, parse_sizes, plain_line
from kvreplay.experiments.probe.prompts import FILLER_WORDS, chat_body, filler, tail_text
from kvreplay.sim.tokenizer import count_tokens


def test_filler_is_deterministic_and_seeded():
    assert filler("a", 50) == filler("a", 50)
    assert filler("a", 50) != filler("b", 50)
    assert len(filler("a", 50).split()) == 50
    assert filler("a", 0) == ""


def test_filler_words_are_one_token_each_on_the_simulator_tokenizer():
    # the simulator's tokenizer: " word" of at most 6 letters is one token
    assert all(len(w) <= 6 and w.isalpha() for w in FILLER_WORDS)
    assert count_tokens(" " + filler("x", 300)) == 300


def test_chat_body_shape():
    body = orjson.loads(chat_body("m", "sys", tail_text("t")))
    assert body["messages"][0] == {"role": "system", "content": "sys"}
    assert body["max_tokens"] == 1 and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


def test_parse_sizes():
    assert parse_sizes("8k,16k,32k,64k") == (8192, 16384, 32768, 65536)
    assert parse_sizes("1000, 2k") == (1000, 2048)
    for bad in ("", "x", "8", "1.5k"):
        with pytest.raises(ValueError):
            parse_sizes(bad)


def test_probe_config_validation():
    with pytest.raises(ValueError):
        ProbeConfig(fit_on="wall")
    with pytest.raises(ValueError):
        ProbeConfig(flush_repeats=0)


def test_plain_line():
    v = {
        "min_flush_k": 4,
        "flush_prefix_tokens": 24576,
        "implied_entries": [8, 8],
        "eviction_cost_s": 19.0,
    }
    assert (
        plain_line(v)
        == "8 entries: about 4 foreign requests evict a 24k prefix; each eviction costs 19.0 s of prefill."
    )
    v = {"min_flush_k": None, "eviction_note": "raise --flush-max"}
    assert plain_line(v) == "No flushing count found: raise --flush-max."
