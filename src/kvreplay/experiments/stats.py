"""Small statistics used by the experiments: a straight-line fit and a paired bootstrap.

Both are written out from their textbook definitions so that every number in a
verdict can be re-derived by hand from the points kept beside it.

- ``fit_line``: ordinary least squares for ``y = a + b x`` from the normal
  equations (Legendre 1805, Gauss 1809; NIST/SEMATECH e-Handbook of Statistical
  Methods, section 4.1.4.1): ``b = Sxy / Sxx``, ``a = mean(y) - b mean(x)``,
  ``R^2 = 1 - SS_res / SS_tot``.
- ``bootstrap_median_ci``: the percentile bootstrap interval of a median
  (Efron 1979, "Bootstrap methods: another look at the jackknife", Ann. Statist.
  7(1); Efron & Tibshirani 1993, *An Introduction to the Bootstrap*, ch. 13):
  resample the paired ratios with replacement ``n_boot`` times, take the median
  of each resample, and report the ``alpha/2`` and ``1 - alpha/2`` quantiles.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["LineFit", "bootstrap_median_ci", "fit_line", "line_ci95", "median"]


@dataclass(frozen=True, slots=True)
class LineFit:
    """Result of ``fit_line``.

    Attributes:
        intercept: ``a`` (units of y).
        slope: ``b`` (units of y per unit of x).
        r2: Coefficient of determination (1 = exact; NaN when y is constant).
        residuals: ``y_i - (a + b x_i)`` in input order (units of y).
        n: Points used.
    """

    intercept: float
    slope: float
    r2: float
    residuals: tuple[float, ...]
    n: int


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> LineFit:
    """Ordinary least-squares line ``y = a + b x`` (normal equations).

    Args:
        xs: Abscissae (e.g. uncached prompt tokens).
        ys: Ordinates (e.g. prefill seconds), same length.

    Returns:
        The fit with R^2 and residuals.

    Raises:
        ValueError: fewer than two points, lengths differ, or all ``xs`` equal.
    """
    if len(xs) != len(ys):
        raise ValueError("xs and ys differ in length")
    n = len(xs)
    if n < 2:
        raise ValueError("a line needs at least two points")
    mx = math.fsum(xs) / n
    my = math.fsum(ys) / n
    sxx = math.fsum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("all x values are equal; the slope is undefined")
    sxy = math.fsum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=False))
    b = sxy / sxx
    a = my - b * mx
    res = tuple(y - (a + b * x) for x, y in zip(xs, ys, strict=False))
    ss_res = math.fsum(r * r for r in res)
    ss_tot = math.fsum((y - my) ** 2 for y in ys)
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan")
    return LineFit(a, b, r2, res, n)


def median(values: Sequence[float]) -> float:
    """The sample median (mean of the two middle values for an even count).

    Raises:
        ValueError: no values.
    """
    if not values:
        raise ValueError("median of nothing")
    s = sorted(values)
    m = len(s) // 2
    return s[m] if len(s) % 2 else (s[m - 1] + s[m]) / 2


def bootstrap_median_ci(
    values: Sequence[float], *, n_boot: int = 10_000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float]:
    """Percentile-bootstrap confidence interval of the median (Efron 1979).

    Args:
        values: Paired ratios (dimensionless), at least one.
        n_boot: Resamples.
        alpha: 1 - confidence level (0.05 gives a 95% interval).
        seed: Seed of ``numpy.random.default_rng`` (the interval is reproducible).

    Returns:
        ``(low, high)``: the ``alpha/2`` and ``1 - alpha/2`` quantiles of the
        resampled medians (numpy's default linear interpolation).

    Raises:
        ValueError: no values, or ``alpha`` outside (0, 1).
    """
    if not values:
        raise ValueError("bootstrap of nothing")
    if not 0 < alpha < 1:
        raise ValueError("alpha must be in (0, 1)")
    arr = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(arr), size=(n_boot, len(arr)))
    meds = np.median(arr[idx], axis=1)
    lo, hi = np.quantile(meds, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


# Student's t, two-sided 95 % (0.975 quantile), by degrees of freedom (NIST/SEMATECH
# e-Handbook, table 1.3.6.7.2); above 30 the normal 1.96 is within 2 %.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
         2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
         2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def line_ci95(fit: LineFit, xs: Sequence[float]) -> tuple[float, float] | None:
    """95 % confidence half-widths of a line's intercept and slope, from its residuals.

    The textbook standard errors of least squares (NIST/SEMATECH e-Handbook 4.2.2,
    "Confidence intervals"): ``s^2 = SS_res / (n - 2)``, ``se_b = s / sqrt(Sxx)``,
    ``se_a = s sqrt(1/n + mean(x)^2 / Sxx)``, each times Student's t at ``n - 2``
    degrees of freedom.

    Args:
        fit: The fit (``fit_line``) of the points.
        xs: The abscissae it was fitted on (same order as ``fit.residuals``).

    Returns:
        ``(half_width_a, half_width_b)`` in the units of ``a`` and ``b``; None with
        fewer than 3 points (two points fit a line exactly: no spread to measure).
    """
    n = fit.n
    if n < 3:
        return None
    mx = math.fsum(xs) / n
    sxx = math.fsum((x - mx) ** 2 for x in xs)
    s2 = math.fsum(r * r for r in fit.residuals) / (n - 2)
    t = _T975[n - 3] if n - 2 <= len(_T975) else 1.96
    return t * math.sqrt(s2 * (1 / n + mx * mx / sxx)), t * math.sqrt(s2 / sxx)
