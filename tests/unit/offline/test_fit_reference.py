"""Issue 18's reference rows, one test each, with the figure kvreplay uses and why.

Setup shared by every row (the field skill's halogen host):
  host     MemTotal 127104060 kB = 127104060 / 2**20 GiB = 121.215877532958984375 GiB
           (the table's "121.2" is a rounded display; the exact figure is what the
           +0.016 knife edge at reserve 17 depends on)
  weights  67.7 GiB; KV 28 KiB = 28672 B per position (7/262144 GiB)
  printed  "524288 positions need ~35.0 GiB (plus 1.5 of margin)", printed at
           max_tok 32768 (vision on: the printed figure includes it)
  arena    slope 8.40 GiB per 16384 tokens of max_tok (moves the printed figure)
  margin   1.5 GiB; noise 0.25 GiB

budget(R) = 121.215877532958984375 - 67.7 - R; at R = 24: 29.515877532958984375.
Printed need at pool p, max_tok m: 35.0 - 14 + 7 * p / 262144 + 8.4 * (m - 32768) / 16384.

Why the printed figure and not the table's "need" column: the table's needs (29.8,
28.6, 37.0, 46.5) are rounded formula figures that contradict the outcomes (row 2
"fits clean" although formula need 28.17 + 1.5 margin > 29.516 budget) and each
other (the reserve table says the same setup as row 3 needs 36.5 = 35.0 + 1.5;
row 3 says 37.0). The printed 35.0 + 1.5 reproduces every outcome and every
reserve-table delta, so kvreplay prefers it, as the rule says.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from kvreplay.cli import main
from kvreplay.offline.fit import FitInputs, fit_pool, parse_printed_need

MEMTOTAL_KB = "127104060"
HOST = Fraction(127104060, 1 << 20)
LOGS = Path(__file__).parent / "bootlogs"

COMMON = [
    "fit",
    "--memtotal-kb",
    MEMTOTAL_KB,
    "--weights-gib",
    "67.7",
    "--kv-bytes-per-position",
    "28672",
    "--printed-need",
    "524288 positions need ~35.0 GiB (plus 1.5 of margin)",
    "--printed-at-max-tok",
    "32768",
    "--ctx",
    "262144",
    "--json",
]


def fit_cli(capsys, pool, max_tok, reserve, *extra):
    args = [*COMMON, "--positions", str(pool), "--max-tok", str(max_tok)]
    args += ["--reserve-gib", str(reserve), *extra]
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def test_row1_262144_32768_r24_boots_knife_edge(capsys):
    # table: need 29.8, budget 29.5, "boots (0.3 over), no sizing lines".
    # kvreplay: printed need at 262144 = 35.0 - 14 + 7 = 28.0; 28.0 + 1.5 = 29.5 against
    # 29.5159: fits by 0.0159 GiB -> "fits" with knife_edge (no sizing lines, as seen).
    rep = fit_cli(capsys, 262144, 32768, 24)
    assert (rep["verdict"], rep["positions"], rep["knife_edge"]) == ("fits", 262144, True)
    assert rep["need_gib"] == 28.0
    assert rep["headroom_gib"] == pytest.approx(0.015877532958984375, abs=1e-12)
    # The table's 29.8 is the formula (7 + 20.6 + 1.97 = 29.57, "0.3 over" 29.5): under
    # the model alone the pool would have to drop to 203943 < ctx 262144 -> "floor",
    # which also boots without sizing lines. Both readings agree: it boots unchanged.
    m = fit_pool(
        FitInputs(
            host_ram_gib=HOST,
            host_ram_from_memtotal=True,
            weights_gib=Fraction("67.7"),
            reserve_gib=Fraction(24),
            positions=262144,
            kv_bytes_per_position=Fraction(28672),
            max_tok=32768,
            arena_base_gib=Fraction("3.80"),
            arena_per_16k_gib=Fraction("8.40"),
            vision_gib=Fraction("1.97"),
            margin_gib=Fraction("1.5"),
            ctx=262144,
        )
    )
    assert (m.verdict, m.positions, m.need_gib) == ("floor", 262144, Fraction("29.57"))


def test_row1_log_boots_without_sizing_lines(capsys):
    assert main(["fit", "--from-log", str(LOGS / "r24_p262144_fits.log"), "--json"]) == 0
    lg = json.loads(capsys.readouterr().out)["logs"][0]
    assert (lg["outcome"], lg["clamped"], lg["pool_positions"], lg["pool_gib"]) == ("booted", False, 262144, 7.0)
    assert lg["printed_need_gib"] is None and lg["hints"] == []


def test_row2_524288_16384_r24_fits_clean(capsys):
    # table: need 28.6 (formula 14 + 12.2 + 1.97 = 28.17; with the 1.5 margin 29.67 >
    # 29.516, the formula would clamp). kvreplay moves the printed figure to max_tok
    # 16384: 35.0 - 8.4 = 26.6; 26.6 + 1.5 = 28.1 <= 29.516 -> fits by 1.416, clean.
    rep = fit_cli(capsys, 524288, 16384, 24)
    assert (rep["verdict"], rep["positions"], rep["knife_edge"]) == ("fits", 524288, False)
    assert rep["need_gib"] == pytest.approx(26.6, abs=1e-12)
    assert rep["arena_shift_gib"] == pytest.approx(-8.4, abs=1e-12)
    assert rep["headroom_gib"] == pytest.approx(1.415877532958984, abs=1e-12)
    assert any("arena -8.400 GiB" in w for w in rep["warnings"])


def test_row3_524288_32768_r24_clamped(capsys):
    # table: need 37.0 (the reserve table says 36.5 for the same setup: 35.0 + 1.5
    # margin). kvreplay uses the printed 35.0 + 1.5 = 36.5 > 29.516: clamped to
    # floor((29.515877.. - 1.5 - 21.0) GiB / 28672 B) = 262738 positions ("deploy green").
    rep = fit_cli(capsys, 524288, 32768, 24)
    assert (rep["verdict"], rep["positions"], rep["knife_edge"]) == ("clamped", 262738, False)
    assert rep["need_gib"] == 35.0 and rep["arena_shift_gib"] == 0.0


def test_row4_524288_65536_r24_will_not_boot(capsys):
    # table: need 46.5, "OOM, will not boot". The bug: the printed 35.0 kept at
    # max_tok 65536 said "clamped to 262738". kvreplay moves it by 8.4 x 2 = 16.8 GiB:
    # fixed part 21.0 + 16.8 = 37.8 > budget 29.516 -> no_boot (the table's 46.5 and the
    # formula's 53.37 both agree it cannot boot; kvreplay reports 51.8).
    rep = fit_cli(capsys, 524288, 65536, 24)
    assert (rep["verdict"], rep["positions"]) == ("no_boot", 0)
    assert rep["need_gib"] == pytest.approx(51.8, abs=1e-12)
    assert rep["fixed_gib"] == pytest.approx(37.8, abs=1e-12)


def test_done_when_command_says_no_boot(capsys):
    rep = fit_cli(capsys, 524288, 65536, 24)
    args = [*COMMON]
    args[args.index("--printed-need") + 1] = "35.0@524288"
    assert main([*args, "--positions", "524288", "--max-tok", "65536", "--reserve-gib", "24"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "no_boot" == rep["verdict"]


def test_without_printed_at_it_is_taken_at_max_tok_with_a_warning(capsys):
    args = [a for a in COMMON if a not in ("--printed-at-max-tok", "32768")]
    assert main([*args, "--positions", "524288", "--max-tok", "65536", "--reserve-gib", "24"]) == 0
    rep = json.loads(capsys.readouterr().out)
    # the old wrong answer, now flagged: the warning names the flag
    assert (rep["verdict"], rep["positions"]) == ("clamped", 262738)
    assert any("--printed-at-max-tok" in w for w in rep["warnings"])


@pytest.mark.parametrize(
    ("reserve", "verdict", "positions", "knife", "budget", "delta"),
    [
        # rows 5 and 6 of the table, and the reserve table; budget and budget - 36.5
        (24, "clamped", 262738, False, 29.515877532958984, -6.984122467041016),
        (18, "clamped", 487433, False, 35.51587753295898, -0.9841224670410156),  # "looks healthy"
        (17, "fits", 524288, True, 36.51587753295898, 0.015877532958984374),  # knife edge
        (16, "fits", 524288, False, 37.51587753295898, 1.0158775329589844),  # row 6
        (15, "fits", 524288, False, 38.51587753295898, 2.015877532958984),  # row 5, deployed
    ],
)
def test_reserve_table_and_rows_5_6(capsys, reserve, verdict, positions, knife, budget, delta):
    # every figure of the reserve table reproduces with the printed 35.0 + 1.5 = 36.5
    rep = fit_cli(capsys, 524288, 32768, reserve)
    assert (rep["verdict"], rep["positions"], rep["knife_edge"]) == (verdict, positions, knife)
    assert rep["budget_gib"] == pytest.approx(budget, abs=1e-12)
    assert rep["headroom_gib"] == pytest.approx(delta, abs=1e-12)


def test_knife_edge_text_and_noise_flag(capsys):
    args = [a for a in COMMON if a != "--json"]
    base = [*args, "--positions", "524288", "--max-tok", "32768", "--reserve-gib", "17"]
    assert main(base) == 0
    out = capsys.readouterr().out
    assert "verdict  fits (knife edge: headroom +0.016 GiB is within 0.25 GiB of noise)" in out
    assert main([*base, "--noise-gib", "0.01"]) == 0
    out = capsys.readouterr().out
    assert "verdict  fits (asked" in out and "knife edge" not in out


def test_printed_need_in_the_engines_words():
    pn = parse_printed_need("524288 positions need ~35.0 GiB (plus 1.5 of margin)")
    assert (pn.need_gib, pn.positions, pn.margin_gib) == (35, 524288, Fraction(3, 2))
    pn = parse_printed_need("~35.0 GiB@524288")
    assert (pn.need_gib, pn.positions, pn.margin_gib) == (35, 524288, None)
    pn = parse_printed_need("halogen: reserving: 262144 positions need ~28 GiB")
    assert (pn.need_gib, pn.positions) == (28, 262144)


def test_rounded_host_warns_toward_memtotal(capsys):
    args = [a for a in COMMON]
    i = args.index("--memtotal-kb")
    args[i : i + 2] = ["--host-ram-gib", "121.2"]
    assert main([*args, "--positions", "524288", "--max-tok", "32768", "--reserve-gib", "24"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert any("one decimal" in w and "--memtotal-kb" in w for w in rep["warnings"])


def test_margin_defaults_to_1_5(capsys):
    rep = fit_cli(capsys, 524288, 32768, 15)
    assert rep["margin_gib"] == 1.5


# ---- boot logs (fixtures written for these tests from the phrases) ---------


def test_log_clamped_row3(capsys):
    assert main(["fit", "--from-log", str(LOGS / "r24_mt32768_clamped.log"), "--json"]) == 0
    lg = json.loads(capsys.readouterr().out)["logs"][0]
    assert lg["outcome"] == "clamped" and lg["booted"] is True and lg["oom"] is None
    assert (lg["requested_positions"], lg["pool_positions"], lg["pool_gib"]) == (524288, 262738, 7.02)
    assert (lg["left_gib"], lg["carveout_gib"], lg["device_gib"]) == (0.02, 2.0, 29.52)
    assert (lg["printed_need_gib"], lg["printed_at_max_tok"], lg["printed_margin_gib"]) == (
        35.0,
        32768,
        1.5,
    )
    assert lg["unrecognised"] == [{"line": 1, "text": "[boot 00:00:01] halogen 0.9 starting"}]
    assert len(lg["hints"]) == 1


def test_log_note_is_not_a_clamp(capsys):
    assert main(["fit", "--from-log", str(LOGS / "r15_fits.log"), "--json"]) == 0
    lg = json.loads(capsys.readouterr().out)["logs"][0]
    assert "Lowering HALOGEN_KV_POOL_POSITIONS gives some back" in lg["hints"][0]
    assert (lg["outcome"], lg["clamped"], lg["pool_positions"]) == ("booted", False, 524288)


def test_log_oom_row4(capsys):
    assert main(["fit", "--from-log", str(LOGS / "r24_mt65536_oom.log"), "--json"]) == 0
    lg = json.loads(capsys.readouterr().out)["logs"][0]
    assert lg["outcome"] == "no_boot"
    assert lg["oom"] == {"requested_gib": 0.25, "allocated_gib": 39.97, "allocations": 566}
    assert lg["pool_positions"] is None and lg["booted"] is False
    assert [u["line"] for u in lg["unrecognised"]] == [1, 7]


def test_two_logs_rows_5_6_the_knob_did_nothing(capsys):
    a, b = str(LOGS / "r15_fits.log"), str(LOGS / "r16_fits.log")
    assert main(["fit", "--from-log", a, "--from-log", b, "--json"]) == 0
    fp = json.loads(capsys.readouterr().out)["footprint"]
    assert (fp["a_gib"], fp["b_gib"], fp["difference_gib"], fp["same"]) == (81.7, 81.7, 0.0, True)
    assert fp["sentence"].endswith("the knob did nothing")
    assert main(["fit", "--from-log", a, "--from-log", str(LOGS / "r24_mt32768_clamped.log")]) == 0
    out = capsys.readouterr().out
    assert "footprint 81.70 GiB -> 74.72 GiB (-6.98 GiB; pool 524288 -> 262738 positions)" in out


def test_log_supplies_printed_need_and_max_tok(capsys):
    # the OOM log printed its need at max_tok 65536: no warning, no shift, no_boot
    args = ["fit", "--from-log", str(LOGS / "r24_mt65536_oom.log"), "--memtotal-kb", MEMTOTAL_KB]
    args += ["--kv-bytes-per-position", "28672", "--max-tok", "65536", "--json"]
    assert main(args) == 0
    rep = json.loads(capsys.readouterr().out)
    assert (rep["verdict"], rep["need_gib"], rep["arena_shift_gib"]) == ("no_boot", 51.8, 0.0)
    assert rep["printed_at_max_tok"] == 65536 and rep["budget_gib"] == pytest.approx(29.515877532958984)
    assert not any("--printed-at-max-tok" in w for w in rep["warnings"])


def test_probe_verdict_prompt_cache_bytes_refused(tmp_path, capsys):
    v = tmp_path / "verdict.json"
    v.write_text(
        json.dumps(
            {
                "bytes_per_token": 2674.0,
                "bytes_per_token_method": "slope of last_entry_bytes over 3 legs (R^2 1.000000)",
            }
        )
    )
    args = [a for a in COMMON if a not in ("--kv-bytes-per-position", "28672")]
    args += ["--positions", "524288", "--max-tok", "32768", "--reserve-gib", "15"]
    assert main([*args, "--probe-verdict", str(v)]) == 2
    assert "not the KV pool's bytes per position" in capsys.readouterr().err
    assert main([*args, "--probe-verdict", str(v), "--probe-bytes-are-kv"]) == 0
    assert json.loads(capsys.readouterr().out)["kv_bytes_per_position"] == 2674.0


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["fit", "--weights-gib", "1", "--positions", "10", "--kv-bytes-per-position", "1"], "host-ram-gib"),
        (["fit", "--host-ram-gib", "64", "--positions", "10", "--kv-bytes-per-position", "1"], "weights-gib"),
        (["fit", "--host-ram-gib", "64", "--weights-gib", "1", "--kv-bytes-per-position", "1"], "positions"),
    ],
)
def test_missing_inputs_exit_2_naming_the_flag(capsys, argv, field):
    assert main(argv) == 2
    assert field in capsys.readouterr().err


def test_unreadable_log_exit_2(tmp_path, capsys):
    assert main(["fit", "--from-log", str(tmp_path / "nope.log")]) == 2
    assert "cannot read boot log" in capsys.readouterr().err


def test_floor_text(capsys):
    # formula only, 262144 pool at a 262144 context (row 1 under the model): floor
    args = ["fit", "--memtotal-kb", MEMTOTAL_KB, "--weights-gib", "67.7", "--reserve-gib", "24"]
    args += ["--positions", "262144", "--kv-bytes-per-position", "28672", "--max-tok", "32768"]
    args += ["--vision", "--ctx", "262144"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "verdict  floor: the pool stays at the context, 262144 positions" in out


def test_model_without_vision_says_so(capsys):
    args = ["fit", "--memtotal-kb", MEMTOTAL_KB, "--weights-gib", "67.7", "--positions", "262144"]
    args += ["--kv-bytes-per-position", "28672", "--json"]
    assert main(args) == 0
    rep = json.loads(capsys.readouterr().out)
    assert any(w.startswith("no vision tower counted: pass --vision (1.97 GiB") for w in rep["warnings"])
    # defaults: margin 1.5, arena 3.80 + 8.40 x 0 / 16384 = 3.80 -> need 7 + 3.8
    assert (rep["margin_gib"], rep["need_gib"]) == (1.5, pytest.approx(10.8, abs=1e-12))


def test_log_max_tok_is_the_default_and_said_first(capsys):
    # new-user item 1: r15_fits.log reserves at max_tok 32768; unset --max-tok was 0,
    # which moved the printed 35.0 by -16.8 GiB to 18.2 and hid it in the last warning
    log = str(LOGS / "r15_fits.log")
    args = ["fit", "--from-log", log, "--memtotal-kb", MEMTOTAL_KB, "--kv-bytes-per-position", "28672"]
    assert main([*args, "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    note = f"--max-tok not given: using the log's max_tok 32768 ({log}); pass --max-tok N for another"
    assert rep["warnings"][0] == note
    assert (rep["max_tok"], rep["printed_at_max_tok"], rep["arena_shift_gib"]) == (32768, 32768, 0.0)
    # budget 121.215877532958984375 - 67.7 - 15; need 35.0 (KV 14 + fixed 21); margin 1.5
    assert (rep["verdict"], rep["need_gib"], rep["kv_gib"], rep["fixed_gib"]) == ("fits", 35.0, 14.0, 21.0)
    assert rep["headroom_gib"] == float(HOST - Fraction("67.7") - 15 - 35 - Fraction("1.5"))
    assert not any("moved from" in w for w in rep["warnings"])
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"note: {note}"
    assert lines[2] == "need         35.000 GiB  (KV 14.000 + fixed 21.000, printed)"
    assert lines[4] == "headroom      2.016 GiB"
    assert sum(note in ln for ln in lines) == 1
    # an explicit --max-tok still wins (and moves the printed need, saying so)
    assert main([*args, "--max-tok", "16384", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert (rep["max_tok"], rep["need_gib"], rep["arena_shift_gib"]) == (16384, 26.6, -8.4)
    assert not any(w.startswith("--max-tok not given") for w in rep["warnings"])


def test_printed_at_max_tok_is_the_default_without_a_log(capsys):
    args = [*COMMON, "--positions", "524288", "--reserve-gib", "15"]
    assert main(args) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["warnings"][0] == (
        "--max-tok not given: using --printed-at-max-tok 32768; pass --max-tok N for another"
    )
    assert (rep["max_tok"], rep["need_gib"], rep["arena_shift_gib"], rep["verdict"]) == (
        32768, 35.0, 0.0, "fits"
    )


def test_printed_need_without_any_max_tok_is_refused(capsys):
    args = [a for a in COMMON if a not in ("--printed-at-max-tok", "32768")]
    assert main([*args, "--positions", "524288", "--reserve-gib", "15"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip() == (
        "kvreplay: error: field 'max-tok': give --max-tok N (the max_tok the server runs at):"
        " a printed need holds for the max_tok it was printed at, and neither"
        " --printed-at-max-tok nor a boot log names one"
    )
