"""Gamma arrivals (``gamma:CV:SEED``): the inter-arrival coefficient of variation is the one asked for."""

import math
import statistics

import pytest

from kvreplay.errors import ConfigError
from kvreplay.plan import PhaseSpec, build_plan, gamma_offsets, parse_phase
from kvreplay.workload import load_workload

N = 20_000


@pytest.mark.parametrize("cv", [0.5, 1.0, 2.0])
def test_gamma_gaps_have_the_requested_mean_and_cv_within_sampling_error(cv):
    rate = 10.0
    offsets = gamma_offsets(rate, cv, 7, N + 1)
    assert offsets[0] == 0
    gaps = [(b - a) / 1e9 for a, b in zip(offsets, offsets[1:], strict=False)]
    mean = statistics.fmean(gaps)
    sample_cv = statistics.pstdev(gaps) / mean
    # Standard errors of a gamma sample of shape k = 1/cv^2 (kurtosis 3 + 6 cv^2): the mean's
    # cv / (rate sqrt(n)); the CV's, by the delta method with the covariance term dropped
    # (an upper bound), cv * sqrt((kurtosis - 1) / (4 n) + cv^2 / n).
    se_mean = cv / rate / math.sqrt(N)
    se_cv = cv * math.sqrt((2 + 6 * cv * cv) / (4 * N) + cv * cv / N)
    assert abs(mean - 1 / rate) <= 3 * se_mean
    assert abs(sample_cv - cv) <= 3 * se_cv


def test_gamma_is_seeded_and_frozen_into_the_plan(small_workload):
    wl = load_workload(small_workload)
    spec = PhaseSpec.from_mapping({"name": "g", "arrival": "gamma:2:5", "rate": 4.0, "concurrency": 2, "repeats": 3},
                                  where={})
    plan = build_plan(wl, [spec])
    n = len(plan.phases[0].sequence)
    assert tuple(plan.phases[0].intended_ns) == tuple(gamma_offsets(4.0, 2.0, 5, n))
    assert tuple(gamma_offsets(4.0, 2.0, 5, n)) != tuple(gamma_offsets(4.0, 2.0, 6, n))


@pytest.mark.parametrize("arrival", ["gamma:0:1", "gamma:2", "gamma:101:1", "gamma:x:1"])
def test_bad_gamma_arrivals_are_refused(arrival):
    with pytest.raises(ConfigError) as e:
        PhaseSpec.from_mapping({"name": "g", "arrival": arrival, "rate": 1.0}, where={"field": "phase"})
    assert e.value.field == "phase.arrival"


def test_the_shorthand_keeps_its_grammar():
    assert parse_phase("load:forward:c4:r20:poisson7").arrival == "poisson:7"
