"""kvreplay fit: hand-computed cases on each side of every boundary.

Base case (all figures exact):
  kv_bytes_per_position = 131072 B = 1/8192 GiB  (32 layers x 8 KV heads x 128 x f16 x 2)
  positions 131072 -> KV 16 GiB; arena 1 + 0.5 * 32768/16384 = 2 GiB; vision 1 GiB
  need = 19 GiB, margin 1 GiB -> fits iff budget >= 20 GiB
  host 64 - weights 20 - reserve R -> budget 44 - R
"""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from kvreplay.cli import main
from kvreplay.errors import ConfigError
from kvreplay.offline.fit import FitInputs, fit_pool, kv_bytes_per_position, parse_printed_need

ONE_BYTE_GIB = "0.000000000931322574615478515625"  # 2**-30 exactly, in decimal
assert Fraction(ONE_BYTE_GIB) == Fraction(1, 1 << 30)


def base(**kw):
    values = dict(
        host_ram_gib=Fraction(64),
        weights_gib=Fraction(20),
        reserve_gib=Fraction(4),
        positions=131072,
        kv_bytes_per_position=Fraction(131072),
        max_tok=32768,
        arena_base_gib=Fraction(1),
        arena_per_16k_gib=Fraction(1, 2),
        vision_gib=Fraction(1),
        margin_gib=Fraction(1),
        ctx=8192,
    )
    values.update(kw)
    return FitInputs(**values)


def test_kv_bytes_derived_from_shape():
    assert kv_bytes_per_position(layers=32, kv_heads=8, head_dim=128, dtype="f16") == 131072
    assert kv_bytes_per_position(layers=32, kv_heads=8, head_dim=128, dtype="bf16") == 131072
    assert kv_bytes_per_position(layers=32, kv_heads=8, head_dim=128, dtype="q8_0") == 69632
    assert kv_bytes_per_position(layers=2, kv_heads=1, head_dim=64, dtype="f32") == 1024
    with pytest.raises(ConfigError):
        kv_bytes_per_position(layers=32, kv_heads=8, head_dim=128, dtype="f12")


def test_roomy_fits():
    r = fit_pool(base())
    assert (r.verdict, r.positions) == ("fits", 131072)
    assert r.budget_gib == 40 and r.need_gib == 19 and r.kv_gib == 16 and r.fixed_gib == 3
    assert r.headroom_gib == 20
    assert r.max_reserve_gib == 24  # 64 - 20 - 19 - 1


def test_exactly_on_the_boundary_fits():
    r = fit_pool(base(reserve_gib=Fraction(24)))  # budget 20 = need 19 + margin 1
    assert (r.verdict, r.positions, r.headroom_gib) == ("fits", 131072, 0)


def test_one_byte_short_is_clamped_by_one_position():
    r = fit_pool(base(reserve_gib=24 + Fraction(ONE_BYTE_GIB)))
    # (16 GiB - 1 B) / 131072 B = 131071.99.. -> 131071
    assert (r.verdict, r.positions) == ("clamped", 131071)


def test_one_position_over_is_clamped_back():
    r = fit_pool(base(reserve_gib=Fraction(24), positions=131073))
    assert (r.verdict, r.positions) == ("clamped", 131072)


def test_clamp_to_largest_fitting():
    # budget 20, pool asked 262144 (32 GiB): room for (20 - 1 - 3) * 8192 = 131072
    r = fit_pool(base(reserve_gib=Fraction(24), positions=262144, ctx=100000))
    assert (r.verdict, r.positions) == ("clamped", 131072)
    assert r.need_gib == 35
    assert not r.warnings[1:]  # only the whole-GiB host warning


def test_position_step_rounds_clamp_down():
    r = fit_pool(base(reserve_gib=Fraction(24), positions=262144, position_step=3000))
    assert r.positions == 129000  # 131072 // 3000 * 3000


def test_clamp_never_below_ctx_is_floor_and_warns():
    r = fit_pool(base(reserve_gib=Fraction(24), positions=262144, ctx=140000))
    assert (r.verdict, r.positions) == ("floor", 140000)
    assert any("stops at its floor" in w for w in r.warnings)


def test_clamp_never_raises_the_pool():
    # budget 14: room for (14 - 1 - 3) * 8192 = 81920; ctx 140000 above the asked 120000
    # nothing changes: the verdict is "floor", not "clamped" (issue 18)
    r = fit_pool(base(reserve_gib=Fraction(30), positions=120000, ctx=140000))
    assert r.verdict == "floor" and r.positions == 120000


def test_fixed_part_equal_to_budget_still_boots():
    # budget 3 = arena 2 + vision 1: boots (clamped to the ctx floor, margin eaten)
    r = fit_pool(base(reserve_gib=Fraction(41)))
    assert (r.verdict, r.positions) == ("floor", 8192)


def test_fixed_part_one_byte_over_budget_will_not_boot():
    r = fit_pool(base(reserve_gib=41 + Fraction(ONE_BYTE_GIB)))
    assert (r.verdict, r.positions) == ("no_boot", 0)


def test_vision_tips_it_into_no_boot():
    assert fit_pool(base(reserve_gib=Fraction(42), vision_gib=Fraction(0))).verdict == "floor"
    assert fit_pool(base(reserve_gib=Fraction(42))).verdict == "no_boot"


def test_memtotal_is_exact_and_not_flagged():
    r = fit_pool(base(host_ram_gib=Fraction(65536000, 1 << 20), host_ram_from_memtotal=True))
    assert r.budget_gib == Fraction(77, 2)  # 62.5 - 20 - 4
    assert not r.warnings


def test_rounded_looking_host_is_flagged_and_two_decimals_are_not():
    assert any("whole number" in w and "--memtotal-kb" in w for w in fit_pool(base()).warnings)
    # 121.2 (one decimal) looks rounded too: issue 18's 121.2159 GiB host shown as 121.2
    w = fit_pool(base(host_ram_gib=Fraction("121.2"), reserve_gib=Fraction(50))).warnings
    assert any("one decimal" in x and "--memtotal-kb" in x for x in w)
    assert not fit_pool(base(host_ram_gib=Fraction("62.25"))).warnings


def test_noisy_margin_warning_boundary():
    h = Fraction("62.25")
    assert any(
        "0.5 GiB" in w
        for w in fit_pool(base(host_ram_gib=h, margin_gib=Fraction(49, 100))).warnings
    )
    assert not fit_pool(base(host_ram_gib=h, margin_gib=Fraction(1, 2))).warnings


# --printed-need: server said 18 GiB at 131072 positions (model says 19). Implied fixed
# part 18 - 16 = 2 GiB; slope stays 1/8192 GiB per position.


def test_printed_need_overrides_model_at_its_size():
    pn = parse_printed_need("18@131072")
    assert pn.need_gib == 18 and pn.positions == 131072
    # budget 19: model 19 + 1 > 19 clamps, printed 18 + 1 = 19 fits exactly
    assert fit_pool(base(reserve_gib=Fraction(25))).verdict == "clamped"
    r = fit_pool(base(reserve_gib=Fraction(25), printed_need=pn))
    assert (r.verdict, r.positions, r.need_gib, r.need_source) == ("fits", 131072, 18, "printed")
    r = fit_pool(base(reserve_gib=25 + Fraction(ONE_BYTE_GIB), printed_need=pn))
    assert (r.verdict, r.positions) == ("clamped", 131071)


def test_printed_need_extrapolates_by_kv_slope():
    pn = parse_printed_need("18@131072")
    # 139264 positions = printed + 8192 -> need 19; budget 19, margin 1 -> room for 131072
    r = fit_pool(base(reserve_gib=Fraction(25), positions=139264, printed_need=pn))
    assert r.need_gib == 19 and (r.verdict, r.positions) == ("clamped", 131072)
    # a smaller pool than the printed one: 65536 positions -> 18 - 8 = 10
    r = fit_pool(base(positions=65536, printed_need=pn))
    assert r.need_gib == 10 and r.fixed_gib == 2


def test_printed_need_no_boot_boundary():
    pn = parse_printed_need("18@131072")
    assert (
        fit_pool(base(reserve_gib=Fraction(42), printed_need=pn)).verdict == "floor"
    )  # budget 2
    r = fit_pool(base(reserve_gib=42 + Fraction(ONE_BYTE_GIB), printed_need=pn))
    assert r.verdict == "no_boot"


@pytest.mark.parametrize("bad", ["18", "18@", "x@1", "18@1.5", "-1@100", "18@0"])
def test_printed_need_rejects(bad):
    with pytest.raises(ConfigError):
        parse_printed_need(bad)


ARGS = [
    "fit",
    "--weights-gib",
    "20",
    "--reserve-gib",
    "4",
    "--positions",
    "131072",
    "--layers",
    "32",
    "--kv-heads",
    "8",
    "--head-dim",
    "128",
    "--max-tok",
    "32768",
    "--arena-base-gib",
    "1",
    "--arena-per-16k-gib",
    "0.5",
    "--vision-gib",
    "1",
    "--margin-gib",
    "1",
    "--ctx",
    "8192",
]


def run_json(capsys, *extra):
    assert main([*ARGS, *extra, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_json_keys_and_values(capsys):
    rep = run_json(capsys, "--memtotal-kb", "67108864")  # exactly 64 GiB
    assert {"budget_gib", "need_gib", "margin_gib", "verdict", "positions"} <= rep.keys()
    assert (rep["budget_gib"], rep["need_gib"], rep["margin_gib"]) == (40.0, 19.0, 1.0)
    assert (rep["verdict"], rep["positions"]) == ("fits", 131072)
    assert rep["warnings"] == []
    assert rep["max_reserve_gib"] == 24.0
    pools = {r["positions"]: r for r in rep["pools"]}
    assert pools[65536]["handed_back_gib"] == 8.0 and pools[32768]["need_gib"] == 7.0
    assert [a["handed_back_gib"] for a in rep["arenas"]] == [0.0, 0.5, 0.75]
    res = {r["reserve_gib"]: r for r in rep["reserves"]}
    assert res[8.0]["verdict"] == "fits"


def test_cli_reserve_table(capsys):
    rep = run_json(capsys, "--host-ram-gib", "64", "--reserves", "24,24.5,41,41.5")
    assert [(r["verdict"], r["positions"]) for r in rep["reserves"]] == [
        ("fits", 131072),
        ("clamped", 126976),
        ("floor", 8192),
        ("no_boot", 0),
    ]  # 24.5: (19.5 - 1 - 3) * 8192 = 126976
    assert any("whole number" in w for w in rep["warnings"])


def test_cli_printed_need(capsys):
    rep = run_json(
        capsys, "--host-ram-gib", "64", "--reserve-gib", "25", "--printed-need", "18@131072"
    )
    assert (rep["verdict"], rep["need_gib"], rep["need_source"]) == ("fits", 18.0, "printed")


def test_cli_text_and_clamp(capsys):
    assert main([*ARGS, "--host-ram-gib", "64", "--reserve-gib", "24.5"]) == 0
    out = capsys.readouterr().out
    assert "clamped to 126976 positions" in out


def test_cli_needs_kv_bytes(capsys):
    assert main(["fit", "--host-ram-gib", "64", "--weights-gib", "1", "--positions", "10"]) == 2
    assert "kv-bytes-per-position" in capsys.readouterr().err


def test_cli_probe_verdict_bytes(tmp_path, capsys):
    v = tmp_path / "verdict.json"
    v.write_text(json.dumps({"bytes_per_token": 65536.0}))
    base = [a for a in ARGS if a not in ("--layers", "32", "--kv-heads", "8", "--head-dim", "128")]
    assert main([*base, "--host-ram-gib", "62.25", "--probe-verdict", str(v), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    # 131072 positions x 64 KiB = 8 GiB KV + 3 fixed = 11
    assert rep["kv_bytes_per_position"] == 65536.0 and rep["need_gib"] == 11.0
    v.write_text(json.dumps({"bytes_per_token": None}))
    assert main([*base, "--host-ram-gib", "62.25", "--probe-verdict", str(v)]) == 2
    assert "measured no bytes" in capsys.readouterr().err


# --- issue 29: boundaries that no test held (found by breaking the code) -------------------


def test_headroom_exactly_the_noise_is_a_knife_edge_on_both_sides():
    # budget 44 - R, need 19 + margin 1: headroom 24 - R; noise 0.25 (the default)
    up = fit_pool(base(reserve_gib=Fraction("23.75")))
    assert (up.verdict, up.headroom_gib, up.noise_gib, up.knife_edge) == ("fits", Fraction(1, 4), Fraction(1, 4), True)
    down = fit_pool(base(reserve_gib=Fraction("24.25")))
    assert (down.verdict, down.headroom_gib, down.knife_edge) == ("clamped", Fraction(-1, 4), True)
    # one byte further out on each side is no knife edge
    assert not fit_pool(base(reserve_gib=Fraction("23.75") - Fraction(ONE_BYTE_GIB))).knife_edge
    assert not fit_pool(base(reserve_gib=Fraction("24.25") + Fraction(ONE_BYTE_GIB))).knife_edge


def test_largest_fitting_pool_equal_to_the_context_is_clamped_not_floor():
    # budget 20: room for (20 - 1 - 3) * 8192 = 131072 positions; ctx exactly 131072
    r = fit_pool(base(reserve_gib=Fraction(24), positions=262144, ctx=131072))
    assert (r.verdict, r.positions) == ("clamped", 131072)
    assert not any("stops at its floor" in w for w in r.warnings)
    # one position more of context and it is the floor
    r = fit_pool(base(reserve_gib=Fraction(24), positions=262144, ctx=131073))
    assert (r.verdict, r.positions) == ("floor", 131073)


def test_cli_max_reserve_line_carries_the_knife_edge(capsys):
    # max reserve 64.5 - 20 - 19 - 1 = 24.5; at reserve 24.25 the headroom is +0.25 GiB, the noise
    assert main([*ARGS, "--host-ram-gib", "64.5", "--reserve-gib", "24.25"]) == 0
    out = capsys.readouterr().out
    assert (
        "largest reserve at which the asked pool fits: 24.500 GiB (knife edge: +0.250 GiB from the"
        " reserve given, within the 0.25 GiB noise)"
    ) in out
    assert main([*ARGS, "--host-ram-gib", "64.5", "--reserve-gib", "20"]) == 0
    assert "largest reserve at which the asked pool fits: 24.500 GiB\n" in capsys.readouterr().out


def test_cli_weights_above_host_warn_of_mib(capsys):
    rep = run_json(capsys, "--host-ram-gib", "64.5", "--weights-gib", "20480")
    assert rep["verdict"] == "no_boot"
    assert "weights 20480 GiB exceed host RAM 64.5 GiB: --weights-gib in MiB?" in rep["warnings"]


# --- issue 42 item 7: a floor of nothing, and the knife edge wherever a reserve is shown -------------


def test_a_floor_of_zero_positions_reads_as_will_not_boot(capsys):
    # budget 64 - 20 - 40.5 = 3.5 GiB holds the fixed 3 but not the 1 GiB margin besides:
    # (3.5 - 1 - 3) x 8192 < 0 positions, and with no context the floor is 0 positions
    args = [a for a in ARGS if a not in ("--ctx", "8192", "--reserve-gib", "4")]
    assert main([*args, "--host-ram-gib", "64", "--reserve-gib", "40.5", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert (rep["verdict"], rep["positions"]) == ("floor", 0)
    assert main([*args, "--host-ram-gib", "64", "--reserve-gib", "40.5"]) == 0
    out = capsys.readouterr().out
    assert "verdict  will not boot with the margin kept: not one position fits the budget (asked 131072" in out
    assert "the pool stays at the context, 0 positions" not in out


def test_reserves_within_the_noise_of_the_ceiling_are_knife_edges_in_the_table(capsys):
    # ceiling 64 - 20 - 19 - 1 = 24 GiB; noise 0.25: 23.75 (+0.25), 24 (0), 24.25 (-0.25) are on the edge
    rep = run_json(capsys, "--host-ram-gib", "64", "--reserves", "23.5,23.75,24,24.25,24.5")
    assert rep["max_reserve_gib"] == 24.0
    assert [(r["reserve_gib"], r["knife_edge"]) for r in rep["reserves"]] == [
        (23.5, False), (23.75, True), (24.0, True), (24.25, True), (24.5, False)]
    assert main([*ARGS, "--host-ram-gib", "64", "--reserves", "23.5,24"]) == 0
    rows = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(("      23.500", "      24.000"))]
    assert rows == ["      23.500      20.500     fits     131072",
                    "      24.000      20.000     fits     131072  knife edge (within 0.25 GiB of the ceiling)"]
