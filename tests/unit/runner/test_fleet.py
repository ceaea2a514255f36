"""The fleet target's attribution, deltas, identity and input checks, on hand-made per-replica snapshots (issue 33)."""

from __future__ import annotations

import asyncio

import pytest

from kvreplay.errors import ConfigError
from kvreplay.metrics.fleet import FleetStats
from kvreplay.runner.backend import Snapshot, counter_delta
from kvreplay.runner.fleet import (
    FleetBackend,
    Replica,
    attribute_by_counters,
    attribute_by_header,
    check_fleet,
    parse_replica,
    part_deltas,
    replica_fields,
    replicas_from_mapping,
)
from kvreplay.runner.identity import check_pins, identity_changes, parse_pin

A, B = "http://127.0.0.1:8001", "http://127.0.0.1:8002"


class _Scripted:
    """A replica adapter answering a fixed list of snapshots, one per read."""

    def __init__(self, name: str, snaps: list[dict[str, float]], ident: dict | None = None,
                 started: float | None = None) -> None:
        self.name = name
        self.snaps = list(snaps)
        self.ident = ident or {"models": ["m"]}
        self.started = started

    async def snapshot(self) -> Snapshot:
        common = self.snaps.pop(0)
        return Snapshot(taken_ns=1, raw={"series": common.get("lookups", 0)}, common=common, started=self.started)

    async def identity(self) -> dict:
        return self.ident

    def drained(self, a: Snapshot, b: Snapshot) -> bool:
        return a.common.get("running", 0) == 0 and b.common.get("running", 0) == 0

    async def reset_cache(self) -> bool:
        return True


def _deltas(a_reads: list[dict], b_reads: list[dict]) -> dict:
    fleet = FleetBackend([(A, _Scripted("halogen", a_reads)), (B, _Scripted("halogen", b_reads))])

    async def two() -> tuple[Snapshot, Snapshot]:
        return await fleet.snapshot(), await fleet.snapshot()

    s1, s2 = asyncio.run(two())
    return part_deltas(counter_delta(s1, s2).parts) or {}


def test_a_cold_request_is_attributed_by_lookups_and_prompt_tokens():
    # A: one lookup, a miss, 50 prompt tokens, no hit (a cold request); B: nothing moved
    d = _deltas([{"lookups": 10, "hits": 4, "misses": 6, "prompt_tokens": 100, "running": 0},
                 {"lookups": 11, "hits": 4, "misses": 7, "prompt_tokens": 150, "running": 0}],
                [{"lookups": 3, "hits": 1, "misses": 2, "prompt_tokens": 40, "running": 0}] * 2)
    assert d == {A: {"lookups": 1, "hits": 0, "misses": 1, "prompt_tokens": 50, "running": 0},
                 B: {"lookups": 0, "hits": 0, "misses": 0, "prompt_tokens": 0, "running": 0}}
    assert attribute_by_counters(d) == (A, None)
    assert replica_fields(None, d, [A, B], per_request=True) == {
        "replica_deltas": d, "replica": A, "replica_reason": None, "replica_source": "counters"}


def test_two_replicas_moving_is_ambiguous_with_both_deltas_kept():
    d = _deltas([{"lookups": 10, "prompt_tokens": 100}, {"lookups": 11, "prompt_tokens": 130}],
                [{"lookups": 3, "prompt_tokens": 40}, {"lookups": 4, "prompt_tokens": 60}])
    assert attribute_by_counters(d) == (None, "ambiguous")
    f = replica_fields(None, d, [A, B], per_request=True)
    assert f["replica"] is None and f["replica_reason"] == "ambiguous"
    assert f["replica_deltas"] == {A: {"lookups": 1, "prompt_tokens": 30}, B: {"lookups": 1, "prompt_tokens": 20}}
    # a header naming one of the replicas that moved settles it
    assert replica_fields("127.0.0.1:8002", d, [A, B], per_request=True)["replica"] == B


def test_no_listed_replica_moving_is_unattributed_and_gauges_do_not_count():
    # only a load gauge moved on B (another client's request in flight): not a request-level counter
    d = _deltas([{"lookups": 10, "running": 0}] * 2, [{"lookups": 3, "running": 0}, {"lookups": 3, "running": 1}])
    assert attribute_by_counters(d) == (None, "unattributed")
    assert replica_fields(None, d, [A, B], per_request=True)["replica_reason"] == "unattributed"
    # a header cannot override counters that saw nothing (never a silent misattribution)
    f = replica_fields(A, d, [A, B], per_request=True)
    assert (f["replica"], f["replica_reason"]) == (None, "unattributed")


def test_hits_alone_without_a_lookup_count_attribute_too():
    assert attribute_by_counters({A: {"hit_tokens": 0, "query_tokens": 0}, B: {"hit_tokens": 16}}) == (B, None)
    assert attribute_by_counters({A: None, B: {"evictions": 3, "stores": 1}}) == (None, "unattributed")


def test_header_and_counters_disagreeing_is_a_conflict():
    d = {A: {"lookups": 1}, B: {"lookups": 0}}
    f = replica_fields(B + "/", d, [A, B], per_request=True)
    assert (f["replica"], f["replica_reason"], f["replica_source"]) == (None, "conflict", None)


def test_a_send_that_never_reached_the_router_is_not_reached_not_unattributed():
    d = {A: {"lookups": 0}, B: {"lookups": 0}}
    assert replica_fields(None, d, [A, B], per_request=True, reached=False) == {
        "replica": None, "replica_reason": "not_reached", "replica_source": None}


def test_header_attribution_above_c1():
    assert replica_fields(B, None, [A, B], per_request=False) == {
        "replica": B, "replica_reason": None, "replica_source": "header"}
    assert replica_fields("http://10.0.0.9:8000", None, [A, B], per_request=False) == {
        "replica": None, "replica_reason": "unlisted", "replica_source": None, "replica_header": "http://10.0.0.9:8000"}
    assert replica_fields(None, None, [A, B], per_request=False) == {
        "replica": None, "replica_reason": "phase_only", "replica_source": None}
    assert attribute_by_header("127.0.0.1:8001", [A, B]) == (A, None)
    assert attribute_by_header(A + "/", [A, B]) == (A, None)
    assert attribute_by_header("", [A, B]) == (None, None)


def test_fleet_delta_sums_replicas_and_a_restarted_replica_is_a_reset():
    fleet = FleetBackend([(A, _Scripted("halogen", [{"lookups": 10}, {"lookups": 12}])),
                          (B, _Scripted("halogen", [{"lookups": 5}, {"lookups": 2}]))])

    async def two() -> tuple[Snapshot, Snapshot]:
        return await fleet.snapshot(), await fleet.snapshot()

    s1, s2 = asyncio.run(two())
    assert s1.common == {"lookups": 15} and s1.raw == {A: {"series": 10}, B: {"series": 5}}
    d = counter_delta(s1, s2)
    # A: +2; B went down from 5 to 2 (a restart): its delta is its value since, 2
    assert d.values == {"lookups": 4}
    assert d.reset is True and d.reset_names == (f"lookups@{B}",)
    assert d.parts is not None and d.parts[B].values == {"lookups": 2}


def test_fleet_identity_pins_every_replica_and_sees_one_replica_drift():
    fleet = FleetBackend([(A, _Scripted("halogen", [], {"models": ["m"]})),
                          (B, _Scripted("halogen", [], {"models": ["other"]}))])
    ident = asyncio.run(fleet.identity())
    assert ident == {"kvreplay_fleet": [A, B], "replicas": {A: {"models": ["m"]}, B: {"models": ["other"]}}}
    bad = check_pins(ident, [parse_pin("models=m")])
    assert [(c.key, c.old, c.new) for c in bad] == [(f"replicas.{B}.models", "m", ["other"])]
    later = {"kvreplay_fleet": [A, B], "replicas": {A: {"models": ["m"]}, B: {"models": ["m"]}}}
    assert [c.key for c in identity_changes(ident, later)] == [f"replicas.{B}.models"]


def test_fleet_drained_only_when_every_replica_is():
    fleet = FleetBackend([(A, _Scripted("halogen", [{"running": 0}] * 2)),
                          (B, _Scripted("halogen", [{"running": 0}, {"running": 1}]))])

    async def two() -> tuple[Snapshot, Snapshot]:
        return await fleet.snapshot(), await fleet.snapshot()

    s1, s2 = asyncio.run(two())
    assert fleet.drained(s1, s2) is False
    assert fleet.drained(s1, s1) is True
    assert fleet.name == "fleet:halogen,halogen"


def test_parse_replica_and_bad_fleets():
    assert parse_replica(f"{A},backend=llamacpp") == Replica(url=A, backend="llamacpp")
    assert parse_replica(f"{A},backend=prometheus,profile=p.toml") == Replica(url=A, backend="prometheus",
                                                                             profile="p.toml")
    for bad in ("127.0.0.1:8001", f"{A},backend", f"{A},colour=red", f"{A},backend=a,backend=b"):
        with pytest.raises(ConfigError):
            parse_replica(bad)
    with pytest.raises(ConfigError, match="is the router itself"):
        check_fleet(A + "/", [Replica(url=A), Replica(url=B)])
    with pytest.raises(ConfigError, match="listed twice"):
        check_fleet("http://127.0.0.1:9000", [Replica(url=A), Replica(url=B), Replica(url=A + "/")])
    check_fleet("http://127.0.0.1:9000", [Replica(url=A), Replica(url=B)])


def test_fleet_table_of_a_plan():
    router, reps = replicas_from_mapping({"router": "http://127.0.0.1:9000",
                                          "replicas": [A, {"url": B, "backend": "llamacpp"}]})
    assert router == "http://127.0.0.1:9000"
    assert reps == (Replica(url=A), Replica(url=B, backend="llamacpp"))
    with pytest.raises(ConfigError, match="unknown keys"):
        replicas_from_mapping({"routers": "x"})
    with pytest.raises(ConfigError, match="a replica is a URL"):
        replicas_from_mapping({"replicas": [3]})


def _rec(replica: str | None, prompt: int, cached: int, *, reason: str | None = None, source: str = "counters",
         status: str = "ok") -> dict:
    return {"sent": True, "status": status, "replica": replica, "replica_reason": reason,
            "replica_source": source if replica else None, "ttft_ns": 2_000_000,
            "usage": {"prompt_tokens": prompt, "cached_tokens": cached, "completion_tokens": 4}}


def test_fleet_totals_equal_the_sums_and_balance_is_max_over_mean():
    st = FleetStats([A, B])
    for r in (_rec(A, 100, 0), _rec(A, 100, 80), _rec(A, 100, 90), _rec(B, 100, 0),
              _rec(None, 50, 0, reason="unattributed"), {"sent": False, "status": "aborted", "replica": None}):
        st.add(r)
    out = st.to_json()
    assert [(e["url"], e["requests"], e["tokens"]) for e in out["replicas"]] == [
        (A, 3, {"prompt": 300, "cached": 170, "completion": 12}),
        (B, 1, {"prompt": 100, "cached": 0, "completion": 4})]
    assert out["replicas"][0]["hit_rate"] == round(170 / 300, 6)
    assert out["replicas"][0]["ttft_ms"]["n"] == 3
    f = out["fleet"]
    assert f["requests"] == 4 == sum(e["requests"] for e in out["replicas"])
    assert f["tokens"] == {"prompt": 400, "cached": 170, "completion": 16}
    assert f["hit_rate"] == round(170 / 400, 6)
    # requests 3 and 1: mean 2, max 3 -> 1.5; prompt tokens 300 and 100 -> 1.5
    assert f["balance"] == {"requests_max_over_mean": 1.5, "prompt_tokens_max_over_mean": 1.5}
    assert f["unattributed"] == {"requests": 1, "reasons": {"unattributed": 1},
                                 "tokens": {"prompt": 50, "cached": 0, "completion": 4}}
    assert f["attribution"] == "per_request"
    assert f["note"] == "1 sent records name no replica: unattributed 1"


def test_worker_payloads_merge_to_the_same_totals():
    one, two, merged = FleetStats([A, B]), FleetStats([A, B]), FleetStats()
    one.add(_rec(A, 100, 10, source="header"))
    two.add(_rec(B, 60, 0, source="header"))
    two.add(_rec(A, 40, 5, source="header"))
    one.counter_deltas = {A: {"lookups": 2}, B: {"lookups": 1}}
    for p in (one.to_payload(), two.to_payload()):
        merged.merge_payload(p)
    out = merged.to_json()
    assert [(e["url"], e["requests"], e["tokens"]["prompt"], e["counter_delta"]) for e in out["replicas"]] == [
        (A, 2, 140, {"lookups": 2}), (B, 1, 60, {"lookups": 1})]
    assert out["fleet"]["attribution"] == "header"
    assert out["replicas"][0]["ttft_ms"]["n"] == 2


def test_aliases_of_one_server_are_refused(monkeypatch):
    """``localhost`` resolves to 127.0.0.1 and ::1: beside 127.0.0.1 or [::1] at the same port it is the same
    server, listed twice or the router itself (issue 44 item 2; before, the names were compared as text)."""
    import socket

    from kvreplay.runner.fleet import endpoint

    def resolve(host, port, *a, **k):
        assert host == "localhost", host
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port)),
                (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::1", port, 0, 0))]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    assert endpoint("http://localhost:8001/") == (frozenset({"127.0.0.1", "::1"}), 8001)
    assert endpoint("http://[::0:1]") == (frozenset({"::1"}), 80)
    assert endpoint("https://u:pw-1234@127.0.0.1") == (frozenset({"127.0.0.1"}), 443)
    with pytest.raises(ConfigError, match=r"replica http://127.0.0.1:8001 is listed twice "
                                          r"\(as http://localhost:8001: the same address and port\)"):
        check_fleet("http://127.0.0.1:9000", [Replica(url="http://localhost:8001"), Replica(url=A)])
    with pytest.raises(ConfigError, match="listed twice"):
        check_fleet("http://127.0.0.1:9000", [Replica(url="http://[::1]:8001"), Replica(url="http://localhost:8001")])
    with pytest.raises(ConfigError, match="is the router itself"):
        check_fleet("http://localhost:9000", [Replica(url="http://127.0.0.1:9000"), Replica(url=B)])
    check_fleet("http://localhost:9000", [Replica(url="http://localhost:8001"), Replica(url=B)])


def test_a_replica_header_name_with_cr_lf_is_refused():
    """Issue 44 low: ``--replica-header`` must be an HTTP field name (RFC 9110 token)."""
    from kvreplay.runner.fleet import check_header_name

    assert check_header_name("x-kvreplay-replica") == "x-kvreplay-replica"
    with pytest.raises(ConfigError, match="character code 13 at offset 1"):
        check_header_name("x\r\nInjected: 1")
    with pytest.raises(ConfigError, match="character code 58 at offset 1"):
        check_header_name("x: y")
    with pytest.raises(ConfigError, match="empty"):
        check_header_name("")


def test_fleet_ok_total_is_the_replicas_ok_answers_merged_or_not():
    # A: 2 ok + 1 error; B: 1 ok + 1 timeout; 1 ok answer names no replica. The fleet's ok is the
    # sum over the replicas (module docstring): 2 + 1 = 3 of 5 requests (the unattributed one is
    # in "unattributed", not in the fleet's totals); failed answers add no tokens.
    recs = [_rec(A, 100, 10), _rec(A, 100, 20), _rec(A, 100, 0, status="error"),
            _rec(B, 100, 30), _rec(B, 100, 0, status="timeout"), _rec(None, 50, 0, reason="unattributed")]
    st = FleetStats([A, B])
    for r in recs:
        st.add(r)
    out = st.to_json()
    assert [(e["url"], e["requests"], e["ok"]) for e in out["replicas"]] == [(A, 3, 2), (B, 2, 1)]
    assert (out["fleet"]["requests"], out["fleet"]["ok"]) == (5, 3)
    assert out["fleet"]["tokens"] == {"prompt": 300, "cached": 60, "completion": 12}
    # the same records over two workers merge to the same ok total
    one, two, merged = FleetStats([A, B]), FleetStats([A, B]), FleetStats()
    for i, r in enumerate(recs):
        (one if i % 2 else two).add(r)
    for p in (one.to_payload(), two.to_payload()):
        merged.merge_payload(p)
    m = merged.to_json()
    assert [(e["url"], e["ok"]) for e in m["replicas"]] == [(A, 2), (B, 1)]
    assert (m["fleet"]["requests"], m["fleet"]["ok"]) == (5, 3)
