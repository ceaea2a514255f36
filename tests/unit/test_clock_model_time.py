"""clock.model_time_scale (which recorded scale converts) and observer.model_ms_text (the terminal's words)."""

import math

import pytest

from kvreplay.clock import model_time_scale
from kvreplay.runner.observer import model_ms_text


@pytest.mark.parametrize(("value", "expected"), [(0.02, 0.02), (2, 2.0), (1.5, 1.5)])
def test_a_converting_scale_is_returned_as_float(value, expected):
    got = model_time_scale(value)
    assert got == expected and type(got) is float


@pytest.mark.parametrize("value", [1, 1.0, 0, 0.0, -0.5, True, False, None, "0.5", math.nan, [0.5]])
def test_no_conversion_for_one_zero_negative_bool_and_non_numbers(value):
    assert model_time_scale(value) is None


def test_model_ms_text_divides_by_the_scale_and_states_it():
    # 5.9 ms measured at scale 0.02 ran 295 model ms; 3 ms at scale 4 -> 0.75 -> "0.8" (one decimal)
    assert model_ms_text(5.9, 0.02) == "295.0 ms (model ms, sim time scale 0.02)"
    assert model_ms_text(3, 4.0) == "0.8 ms (model ms, sim time scale 4)"
