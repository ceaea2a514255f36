"""Issue 26 missing test: a tier that reads 0 never counts as restored, a control's included.

A control that lacks the tier the replays are compared on (the host tier) is read
on its own live tiers; when they all read 0 it restored nothing, on the run
report and in the experiment findings alike. Figures by hand.
"""

from __future__ import annotations

from rundirs_evidence import write_run

from kvreplay.evidence.engine import delta_evidence, figure_on, restored_on
from kvreplay.experiments.findings import load_views, restore_findings
from kvreplay.report.document import build
from kvreplay.rundir import load_run

HOST0 = {"lookups": 4, "query_tokens": 400, "hit_tokens": 0,
         "host_lookups": 4, "host_query_tokens": 400, "host_fetched_tokens": 0}
HOST_RESTORED = {**HOST0, "host_fetched_tokens": 2048}
DEVICE0 = {"lookups": 2, "query_tokens": 200, "hit_tokens": 0}  # no host series at all


def test_engine_reads_a_control_without_the_main_tier_on_its_own_tiers():
    ev = delta_evidence("control", DEVICE0)
    assert [t.tier for t in ev.tiers] == ["device"]
    assert restored_on(ev, "host") is False
    assert restored_on(delta_evidence("c", {**DEVICE0, "hit_tokens": 64}), "host") is True
    assert restored_on(delta_evidence("c", {}), "host") is None


def test_report_control_lacking_the_main_tier_with_zero_elsewhere_does_not_confirm_churn(tmp_path):
    d = write_run(tmp_path / "run", [("prime", "forward", [0, 1, 2, 3], HOST0),
                                     ("fwd", "forward", [0, 1, 2, 3], HOST0),
                                     ("rev", "reverse", [3, 2, 1, 0], HOST_RESTORED),
                                     ("control", "forward", [2, 3], DEVICE0)],
                  plan_extra={"control": {"select": "last:2"}})
    (f,) = [x for x in build(load_run(d)).findings if x.rule == "churn"]
    assert "on the host tier" in f.finding
    assert ("Control control already ran: hit_tokens 0 (lookups 2, query_tokens 200). "
            "It restored nothing either: churn is not confirmed.") in f.finding
    assert "churn confirmed" not in f.finding
    assert f.phases == ("fwd", "rev", "control")


def test_findings_control_lacking_the_main_tier_with_zero_elsewhere_is_no_restore(tmp_path):
    write_run(tmp_path / "A", [("prime", "forward", [0, 1, 2, 3], HOST0), ("fwd", "forward", [0, 1, 2, 3], HOST0)])
    write_run(tmp_path / "B", [("prime", "forward", [0, 1, 2, 3], HOST0), ("rev", "reverse", [3, 2, 1, 0], HOST0)])
    # the control runs in A's incarnation: bodies 2 and 3 were sent there, so it is a replay
    write_run(tmp_path / "C", [("control", "forward", [2, 3], DEVICE0)])
    steps = [{"name": n, "kind": "run", "status": "measured", "run_dir": n, "comparable": n != "C",
              "incarnation": inc} for n, inc in (("A", "I1"), ("B", "I2"), ("C", "I1"))]
    (f,) = restore_findings(load_views(tmp_path, steps))
    assert f["rule"] == "no_restores"
    assert [(e["cell"], e["metric"], e["value"], e["role"]) for e in f["evidence"]] == [
        ("A/fwd", "host_fetched_tokens", 0.0, "forward replay"),
        ("B/rev", "host_fetched_tokens", 0.0, "reverse replay"),
        ("C/control", "hit_tokens", 0.0, "control")]


def test_a_control_with_two_live_tiers_where_only_the_second_restored():
    # Compared on the host tier; the control has none. Its live tiers, in order: device
    # (lookups 2, hit_tokens 0) then usage (2 ok answers, cached_tokens 128). The first reads 0,
    # the second 128: the control restored, read on usage, not on its first tier's 0.
    ev = delta_evidence("control", DEVICE0, usage_cached=128, ok=2)
    assert [(t.tier, t.key, t.value) for t in ev.tiers] == [
        ("device", "hit_tokens", 0.0), ("usage", "usage cached_tokens", 128.0)]
    t = figure_on(ev, "host")
    assert (t.tier, t.key, t.value) == ("usage", "usage cached_tokens", 128.0)
    assert restored_on(ev, "host") is True
    assert ev.restored is True
    # the same control with both tiers at 0 reads on its first tier, and restored nothing
    ev0 = delta_evidence("control", DEVICE0, usage_cached=0, ok=2)
    assert (figure_on(ev0, "host").tier, restored_on(ev0, "host"), ev0.restored) == ("device", False, False)
