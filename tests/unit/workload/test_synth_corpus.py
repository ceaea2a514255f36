"""The synth corpus, lengths and histograms (``kvreplay.workload.synth_corpus``)."""

from __future__ import annotations

import random

import pytest

from kvreplay.errors import ConfigError
from kvreplay.workload.synth_corpus import Length, corpus, parse_length, read_histogram


def test_parse_length():
    assert parse_length("700", "--isl") == Length(700, 0.0)
    assert parse_length("700:50", "--isl") == Length(700, 50.0)
    for bad in ("0", "x", "7:-1", "7:inf", "7.5"):
        with pytest.raises(ConfigError, match="--isl"):
            parse_length(bad, "--isl")


def test_length_draw_clamps_to_low():
    assert Length(5).draw(random.Random(0), 9) == 9 and Length(12).draw(random.Random(0), 9) == 12
    rng = random.Random(3)
    expect = [max(2, round(random.Random(3).gauss(10, 4)))]
    assert [Length(10, 4).draw(rng, 2)] == expect


def test_histogram_file(tmp_path):
    f = tmp_path / "isl.txt"
    f.write_text("# tokens weight\n100 1\n200,3  # comma too\n\n")
    h = read_histogram(f)
    assert (h.source, h.values, h.weights) == ("isl.txt", (100, 200), (1.0, 3.0))
    draws = [h.draw(random.Random(i), 1) for i in range(4)]
    assert draws == [random.Random(i).choices((100, 200), weights=(1.0, 3.0))[0] for i in range(4)]
    f.write_text("100 1\n200\n")
    with pytest.raises(ConfigError, match=r"isl.txt:2: expected 'TOKENS WEIGHT'"):
        read_histogram(f)
    f.write_text("0 1\n")
    with pytest.raises(ConfigError, match=r"isl.txt:1: tokens must be >= 1"):
        read_histogram(f)


def test_corpus_is_the_bundled_text_as_a_ring():
    c = corpus()
    assert c.text.startswith("You are a coding assistant.") or c.text[:1].isalpha()
    assert c.text[c.starts[1] - 1].isspace() and not c.text[c.starts[1]].isspace()
    wrapped = c.from_word(len(c.starts) - 1, len(c.text))
    assert len(wrapped) == len(c.text) and "\n\n" + c.text[:20] in wrapped  # past the end: the start again
    assert c.from_word(len(c.starts), 50) == c.text[:50]  # word indices wrap too
