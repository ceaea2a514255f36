"""Parsing a sweep's loads, arrivals, SLOs and limits (kvreplay.sweeps.loads)."""

import pytest

from kvreplay.errors import ConfigError
from kvreplay.sweeps import arrival_spec, parse_loads, parse_slo, parse_until


def test_loads():
    lo = parse_loads("1,2, 4,8", None)
    assert (lo.kind, lo.values, lo.auto) == ("concurrency", (1, 2, 4, 8), False)
    lo = parse_loads(None, "0.5,2")
    assert (lo.kind, lo.values) == ("rate", (0.5, 2.0))
    assert parse_loads("auto", None).auto and parse_loads(None, "auto").kind == "rate"


@pytest.mark.parametrize(("conc", "rate", "field"), [
    (None, None, "--concurrency"), ("1", "2", "--concurrency"), ("1.5", None, "--concurrency"),
    ("0", None, "--concurrency"), ("1,,2", None, "--concurrency"), ("2,2", None, "--concurrency"),
    (None, "0", "--rate"), (None, "nan", "--rate"),
])
def test_bad_loads_name_the_flag(conc, rate, field):
    with pytest.raises(ConfigError) as e:
        parse_loads(conc, rate)
    assert e.value.field == field


def test_arrivals():
    assert arrival_spec("constant") == "constant"
    assert arrival_spec("poisson") == "poisson:0"
    assert arrival_spec("poisson:7") == "poisson:7"
    assert arrival_spec("gamma:2") == "gamma:2:0"
    assert arrival_spec("gamma:0.5:9") == "gamma:0.5:9"
    for bad in ("gamma", "gamma:0", "uniform", "gamma:-1"):
        with pytest.raises(ConfigError):
            arrival_spec(bad)


def test_slo_and_until():
    s = parse_slo("ttft_ms<=500")
    assert (s.metric, s.limit_ms, s.strict, s.met(500.0), s.met(500.1)) == ("ttft_ms", 500.0, False, True, False)
    assert str(parse_slo("e2e_ms<=9000")) == "e2e_ms<=9000"
    assert str(parse_until("e2e_ms:p50>=10")) == "e2e_ms:p50>=10"
    assert parse_slo("tpot_ms < 50").to_json() == {"metric": "tpot_ms", "op": "<", "limit_ms": 50.0}
    for bad in ("ttft<=5", "ttft_ms>=5", "ttft_ms<=-1", "ttft_ms<=x"):
        with pytest.raises(ConfigError) as e:
            parse_slo(bad)
        assert e.value.field == "--slo"
    u = parse_until("ttft_ms:p99>2000")
    assert (u.metric, u.stat, u.op, u.value) == ("ttft_ms", "p99", ">", 2000.0)
    assert u.broken(2000.5) and not u.broken(2000.0) and not u.broken(None)
    a = parse_until("slo_attainment<0.9")
    assert a.broken(0.89) and not a.broken(0.9) and str(a) == "slo_attainment<0.9"
    for bad in ("ttft_ms>2", "ttft_ms:p95>2", "foo:p99>1", "slo_attainment:p50<1"):
        with pytest.raises(ConfigError):
            parse_until(bad)
