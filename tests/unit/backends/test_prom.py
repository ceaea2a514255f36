import math

import pytest

from kvreplay.backends._prom import parse_exposition, raw_from_samples, series_key
from kvreplay.errors import BackendError

QUIRKS = """# HELP llamacpp:n_tokens_max Largest observed n_tokens.
# TYPE llamacpp:n_tokens_max counter
llamacpp:n_tokens_max 4096
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_bucket{le="1.0"} 3
vllm:iteration_tokens_total_bucket{le="+Inf"} 5
vllm:iteration_tokens_total_count 5
vllm:iteration_tokens_total_sum 40
# TYPE g gauge
g{b="x",a="q\\"uote"} NaN 1700000000000
h +Inf
untyped_total 7
# EOF
"""


def test_counter_without_total_keeps_its_printed_name():
    names = [s.name for s in parse_exposition(QUIRKS)]
    assert "llamacpp:n_tokens_max" in names
    assert "llamacpp:n_tokens_max_total" not in names


def test_histogram_whose_name_ends_in_total_keeps_its_samples():
    raw = raw_from_samples(parse_exposition(QUIRKS))
    assert raw['vllm:iteration_tokens_total_bucket{le="+Inf"}'] == 5
    assert raw["vllm:iteration_tokens_total_sum"] == 40
    assert "vllm:iteration_tokens_total" not in raw


def test_labels_order_escapes_and_special_values():
    raw = raw_from_samples(parse_exposition(QUIRKS))
    key = 'g{b="x",a="q\\"uote"}'
    assert key in raw and math.isnan(raw[key])
    assert raw["h"] == math.inf
    assert raw["untyped_total"] == 7  # an untyped name ending in _total is not renamed


def test_series_key_bare_and_escaped():
    assert series_key("x", {}) == "x"
    assert series_key("x", {"a": 'b"\\\n'}) == 'x{a="b\\"\\\\\\n"}'


@pytest.mark.parametrize("bad", ["vllm:x{a=1} 3\n", 'x{a="b" 1\n', 'x{a="b"} notanumber\n'])
def test_malformed_exposition_raises_backend_error(bad):
    with pytest.raises(BackendError, match="malformed"):
        parse_exposition(bad)
