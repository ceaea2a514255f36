"""``kvreplay ab``'s terminal lines: the CI in percent, as compare.md (new-user item 8)."""

from __future__ import annotations

import argparse

from kvreplay.commands import ab as ab_cmd
from kvreplay.experiments.ab.compare import ci_pct_text


def test_ci_pct_text_exact():
    assert ci_pct_text([-0.342, 17.471]) == "[-0.34%, +17.47%]"
    assert ci_pct_text([0.0, 2.005]) == "[+0.00%, +2.00%]"  # 2.005 is 2.00499... in binary
    assert ci_pct_text(None) == "n/a"
    assert ci_pct_text([]) == "n/a"


def test_ab_terminal_check_line(monkeypatch, capsys, tmp_path):
    result = {
        "verdict": "no decision",
        "reps": {"planned": 3, "measured": 3},
        "checks": [
            {"phase": "c1", "metric": "ttft_p50", "role": "primary", "threshold_pct": -5.0,
             "decision": "no decision", "change_pct": 0.8349, "ci_change_pct": [-0.342, 17.471]},
            {"phase": "c4", "metric": "itl_p50", "role": "protected", "threshold_pct": 3.0,
             "decision": "no decision", "change_pct": None, "ci_change_pct": None},
            {"phase": "c4", "metric": "ratio:hit_tokens/query_tokens", "role": "primary", "threshold_pct": 5.0,
             "decision": "no decision", "n": 0,
             "reason": "query_tokens: no such counter for backend halogen (have: hits)"},
        ],
        "ab": {"stopped": False},
        "_out": str(tmp_path),
    }

    async def fake(_args):
        return result

    monkeypatch.setattr(ab_cmd, "ab_async", fake)
    monkeypatch.setattr("kvreplay.report.abreport.write_ab_report", lambda out: f"{out}/report.html")
    assert ab_cmd.run(argparse.Namespace(quiet=False)) == 0
    assert capsys.readouterr().out.splitlines() == [
        "verdict: no decision",
        "  c1.ttft_p50 (primary -5%): no decision, change +0.83% CI [-0.34%, +17.47%]",
        "  c4.itl_p50 (protected +3%): no decision",
        "  c4.ratio:hit_tokens/query_tokens (primary +5%): no decision"
        " (query_tokens: no such counter for backend halogen (have: hits))",
        f"experiment directory: {tmp_path}",
        f"report: {tmp_path}/report.html",
    ]
