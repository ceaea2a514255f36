"""The probe's own lines: the intercept check, model seconds against the simulator."""

from kvreplay.experiments.probe.legs import intercept_warning, plain_line
from kvreplay.experiments.probe.report import sig3


def test_negative_and_implausible_intercepts_are_flagged():
    neg = {"a_s": -0.02, "n": 3, "points": [[512, 0.05], [1024, 0.1], [2048, 0.2]]}
    assert intercept_warning(neg) == (
        "negative intercept a = -0.0200 s: a prefill cannot take less than no time; the 3 cold "
        "sizes do not pin a fixed cost (read a as about 0; the rate still holds if R^2 is high)"
    )
    high = {"a_s": 0.3, "n": 2, "points": [[512, 0.25], [1024, 0.4]]}
    assert intercept_warning(high) == (
        "implausible intercept a = 0.3000 s: at or above the fastest cold leg (0.2500 s), "
        "it leaves no time for that leg's tokens"
    )
    assert intercept_warning({"a_s": 0.079, "n": 2, "points": [[512, 0.1], [1024, 0.12]]}) is None
    assert intercept_warning(None) is None


def test_plain_line_gives_model_seconds_against_the_simulator():
    v = {"min_flush_k": 4, "flush_prefix_tokens": 1024, "implied_entries": [8, 8],
         "eviction_cost_s": 1.0}
    assert plain_line(v) == (
        "8 entries: about 4 foreign requests evict a 1k prefix; each eviction costs 1.00 s of prefill."
    )
    v["sim_time_scale"] = 0.0513
    assert plain_line(v) == (
        "8 entries: about 4 foreign requests evict a 1k prefix; each eviction costs 1.00 s of "
        "prefill (= 19.5 model s at simulator time scale 0.0513)."
    )
    v["sim_time_scale"] = 0  # no simulated delay: nothing to convert
    assert plain_line(v).endswith("costs 1.00 s of prefill.")


def test_plain_line_rounds_the_eviction_cost_to_three_significant_figures():
    # NEWUSER 13(c): 0.152 s printed as "0.2 s" was 30% off; 0.1524 / 0.02 = 7.62; 190 without a dot.
    v = {"min_flush_k": 4, "flush_prefix_tokens": 1024, "implied_entries": [8, 8],
         "eviction_cost_s": 0.1524, "sim_time_scale": 0.02}
    assert plain_line(v) == (
        "8 entries: about 4 foreign requests evict a 1k prefix; each eviction costs 0.152 s of "
        "prefill (= 7.62 model s at simulator time scale 0.02)."
    )
    assert [sig3(x) for x in (0.1524, 1.0, 19.0, 190.0, 999.6, 1234.5, 0.000123)] == [
        "0.152", "1.00", "19.0", "190", "1000", "1234", "0.000123"]


def test_eviction_cost_keeps_three_significant_figures():
    # new-user finding: 0.152 s printed as "0.2 s" beside "(= 7.62 model s at ... 0.02)"
    v = {"min_flush_k": 4, "flush_prefix_tokens": 1024, "implied_entries": [8, 8],
         "eviction_cost_s": 0.15234, "sim_time_scale": 0.02}
    assert "each eviction costs 0.152 s of prefill (= 7.62 model s at simulator time scale 0.02)." in plain_line(v)
