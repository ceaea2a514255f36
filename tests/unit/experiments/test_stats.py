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
