import math

import pytest

from kvreplay.experiments.stats import bootstrap_median_ci, fit_line, median


def test_exact_line():
    fit = fit_line([0, 1, 2], [1, 3, 5])
    assert fit.intercept == pytest.approx(1.0) and fit.slope == pytest.approx(2.0)
    assert fit.r2 == pytest.approx(1.0)
    assert all(abs(r) < 1e-12 for r in fit.residuals)


def test_noisy_line_by_hand():
    # mean x 1.5, mean y 2.5, Sxx 5, Sxy 6 -> b 1.2, a 0.7;
    # residuals 0.3, 0.1, -1.1, 0.7; SSres 1.8, SStot 9 -> R^2 0.8
    fit = fit_line([0, 1, 2, 3], [1, 2, 2, 5])
    assert fit.slope == pytest.approx(1.2)
    assert fit.intercept == pytest.approx(0.7)
    assert fit.residuals == pytest.approx((0.3, 0.1, -1.1, 0.7))
    assert fit.r2 == pytest.approx(0.8)
    assert fit.n == 4


def test_prefill_shape_recovers_a_and_rate():
    a, rate = 1.52, 1370.0
    xs = [8192, 16384, 32768, 65536]
    fit = fit_line(xs, [a + x / rate for x in xs])
    assert fit.intercept == pytest.approx(a)
    assert 1 / fit.slope == pytest.approx(rate)


def test_fit_rejects_degenerate_input():
    with pytest.raises(ValueError):
        fit_line([1], [1])
    with pytest.raises(ValueError):
        fit_line([2, 2], [1, 3])
    with pytest.raises(ValueError):
        fit_line([1, 2], [1])
    assert math.isnan(fit_line([1, 2], [3, 3]).r2)


def test_median():
    assert median([3, 1, 2]) == 2
    assert median([4, 1, 2, 3]) == 2.5
    with pytest.raises(ValueError):
        median([])


def test_bootstrap_constant_values_give_a_point_interval():
    assert bootstrap_median_ci([1.1] * 5) == (pytest.approx(1.1), pytest.approx(1.1))


def test_bootstrap_of_three_values_spans_min_to_max():
    # A resample of 3 has median = min with probability 7/27 (> 2.5%), and = max likewise,
    # so the 95% percentile interval is exactly [min, max].
    lo, hi = bootstrap_median_ci([0.9, 1.0, 1.2], seed=3)
    assert (lo, hi) == (pytest.approx(0.9), pytest.approx(1.2))


def test_bootstrap_is_seeded_and_narrows_with_more_pairs():
    vals = [1.0 + 0.01 * ((i * 7) % 11 - 5) for i in range(40)]
    assert bootstrap_median_ci(vals, seed=1) == bootstrap_median_ci(vals, seed=1)
    lo, hi = bootstrap_median_ci(vals, seed=1)
    assert min(vals) < lo <= median(vals) <= hi < max(vals)


def test_bootstrap_errors():
    with pytest.raises(ValueError):
        bootstrap_median_ci([])
    with pytest.raises(ValueError):
        bootstrap_median_ci([1.0], alpha=1.5)


def test_line_ci95_by_hand():
    from kvreplay.experiments.stats import fit_line, line_ci95

    # (0,0) (1,1) (2,3): b = Sxy/Sxx = 3/2, a = 4/3 - 3/2 = -1/6; residuals 1/6, -1/3, 1/6,
    # SS_res = 1/6, s^2 = 1/6 (1 degree of freedom, t = 12.706); se_b = sqrt(1/6 / 2),
    # se_a = sqrt(1/6 x (1/3 + 1/2))
    xs = [0.0, 1.0, 2.0]
    f = fit_line(xs, [0.0, 1.0, 3.0])
    ha, hb = line_ci95(f, xs)
    assert ha == pytest.approx(12.706 * (5 / 36) ** 0.5, rel=1e-12)
    assert hb == pytest.approx(12.706 * (1 / 12) ** 0.5, rel=1e-12)
    assert line_ci95(fit_line([0.0, 1.0], [0.0, 1.0]), [0.0, 1.0]) is None  # two points: no spread
    # an exact line has a zero-width interval
    assert line_ci95(fit_line(xs, [1.0, 3.0, 5.0]), xs) == (0.0, 0.0)


def test_accuracy_warning_two_sizes_and_wide_interval():
    from kvreplay.experiments.probe.report import accuracy_warning

    two = accuracy_warning({"n": 2, "ci95": None}, (16384, 65536))
    assert two.startswith("2 sizes fit a line exactly") and two.endswith("--sizes 16k,25k,40k,64k")
    wide = accuracy_warning({"n": 4, "ci95": {"a_rel": 0.188, "rate_rel": 0.01}}, (8192, 16384, 32768, 65536))
    assert wide.startswith("95% interval wider than 5%: a +-18.8% over 4 sizes")
    assert "rate" not in wide.split(";")[0]
    assert accuracy_warning({"n": 4, "ci95": {"a_rel": 0.05, "rate_rel": 0.05}}, (8192, 65536)) is None
    assert accuracy_warning(None, (8192,)) is None
