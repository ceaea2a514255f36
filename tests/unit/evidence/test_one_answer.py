"""Issue 26 item 2: the same run directories give one answer on every surface.

Surfaces: the experiment findings (``experiments.findings``: ``tiers``,
``restore_findings``, ``cells``, ``compare_tables``), the run report's diagnosis
(``report.document.build``: its ``findings``) and ``kvreplay compare``
(``experiments.ab.compare``: a counter ratio read off each phase). Each run is
prime (bodies 0-3 forward), ``fwd`` (0-3 forward) and ``rev`` (3-0 reverse);
every expected figure is written out by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rundirs_evidence import write_run

from kvreplay.experiments.ab.compare import compare_blocks, load_pairs, parse_threshold
from kvreplay.experiments.ab.ratios import missing_counter, ratio_value
from kvreplay.experiments.findings import compare_tables, load_views, restore_findings, tiers
from kvreplay.experiments.publish import cells
from kvreplay.report.document import build
from kvreplay.rundir import load_run

ORDER_RULES = {"churn", "no_restores", "one_order_zero"}

# llama.cpp: prompt_tokens_cached_total (hit_tokens) and prompt_tokens_total (computed_tokens),
# no lookup counter at all: its prompt work makes the device tier live.
LLAMACPP = {
    "prime": {"hit_tokens": 0, "computed_tokens": 400},
    "fwd": {"hit_tokens": 0, "computed_tokens": 400},
    "rev": {"hit_tokens": 300, "computed_tokens": 100},
}
# A host tier (the simulator's host profile): host lookups move in every phase.
HOST = {
    "prime": {"lookups": 4, "query_tokens": 400, "hit_tokens": 0,
              "host_lookups": 4, "host_query_tokens": 400, "host_fetched_tokens": 0},
    "fwd": {"lookups": 4, "query_tokens": 400, "hit_tokens": 0,
            "host_lookups": 4, "host_query_tokens": 400, "host_fetched_tokens": 0},
    "rev": {"lookups": 4, "query_tokens": 400, "hit_tokens": 0,
            "host_lookups": 4, "host_query_tokens": 400, "host_fetched_tokens": 256},
}
# vLLM without a KV connector: the external series are exported and stay 0 while
# the device lookups move.
NO_CONNECTOR = {"host_lookups": 0, "host_query_tokens": 0, "host_hit_tokens": 0, "host_fetched_tokens": 0}
VLLM = {
    "prime": {**NO_CONNECTOR, "query_tokens": 400, "hit_tokens": 0},
    "fwd": {**NO_CONNECTOR, "query_tokens": 400, "hit_tokens": 0},
    "rev": {**NO_CONNECTOR, "query_tokens": 400, "hit_tokens": 384},
}
# vLLM-like, the server restarted during rev: its delta (post-restart values) is void.
RESET = {**VLLM, "rev": {**VLLM["rev"], "reset": True, "reset_names": ["query_tokens"]}}

PHASES = [("prime", "forward", [0, 1, 2, 3]), ("fwd", "forward", [0, 1, 2, 3]), ("rev", "reverse", [3, 2, 1, 0])]


def make(tmp_path: Path, name: str, deltas: dict, **kw) -> Path:
    return write_run(tmp_path / name, [(n, o, b, deltas[n]) for n, o, b in PHASES], **kw)


def findings_answer(tmp_path: Path, name: str) -> dict:
    steps = [{"name": name, "kind": "run", "status": "measured", "run_dir": name, "comparable": True,
              "incarnation": name}]
    views = load_views(tmp_path, steps)
    (f,) = restore_findings(views)
    frozen = {"steps": [{"name": name, "plan": {"phases": [{"name": n} for n, _o, _b in PHASES]}}]}
    cs = {c["metric"]: c for c in cells(steps, frozen, views, [f])}
    (table,) = compare_tables(views, [[f"{name}/fwd", f"{name}/rev"]])
    rows = {r["metric"]: (r["a"], r["b"]) for r in table["rows"]}
    return {
        "tiers": tiers(views),
        "rule": f["rule"],
        "figures": {e["cell"].split("/")[1]: (e["metric"], e["value"]) for e in f["evidence"]},
        "cells": {(p, k): (cs[f"{p}.{k}"]["status"], cs[f"{p}.{k}"]["value"])
                  for p in ("fwd", "rev") for k in ("hit_tokens", "host_fetched_tokens")},
        "table": {k: rows[k] for k in ("hit_tokens", "host_fetched_tokens")},
    }


def report_answer(d: Path) -> dict:
    rep = build(load_run(d))
    found = [f for f in rep.findings if f.rule in ORDER_RULES]
    return {"rules": [f.rule for f in found], "phases": [f.phases for f in found],
            "evidence": [f.evidence for f in found], "text": [f.finding for f in found]}


def one_answer(fa: dict, ra: dict, key: str) -> dict[str, float | None]:
    """Each replay's restore figure ``key`` as every surface gives it; asserts they agree.

    None: the surface gives no figure for the phase (the tier is absent there, or
    the delta is void).
    """
    ev = ra["evidence"][0] if ra["evidence"] else {}
    replays = ("fwd", "rev")
    by_surface = {
        "findings": {p: (fa["figures"][p][1] if fa["figures"].get(p, ("",))[0] == key else None)
                     for p in replays},
        "report": {p: ev.get(p, {}).get(key) for p in replays},
        "cells": {p: fa["cells"][(p, key)][1] for p in replays},
        "compare_tables": {p: (None if v == "absent" else v)
                           for p, v in zip(replays, fa["table"][key], strict=True)},
    }
    answers = list(by_surface.values())
    assert all(a == answers[0] for a in answers), by_surface
    return answers[0]


def compare_answer(d: Path, metric: str) -> dict:
    """``kvreplay compare`` of the run against itself: the figure per phase, or why there is none."""
    pairs, _arms = load_pairs([d, d])
    res = compare_blocks(pairs, [parse_threshold(f"{p}.{metric}:+5%", "primary") for p in ("fwd", "rev")],
                         n_boot=50)
    ph = {p["name"]: p for p in pairs[0]["baseline"]["summary"]["phases"]}
    return {p: (ratio_value(ph[p], metric), missing_counter(ph[p], metric, "x"),
                next(c["n"] for c in res["checks"] if c["phase"] == p)) for p in ("fwd", "rev")}


def test_llamacpp_without_a_lookup_counter_reads_the_device_tier_everywhere(tmp_path):
    d = make(tmp_path, "L", LLAMACPP)
    assert findings_answer(tmp_path, "L") == {
        "tiers": {"host": False, "device": True},
        "rule": "row_checkpoint_churn",
        "figures": {"fwd": ("hit_tokens", 0.0), "rev": ("hit_tokens", 300.0)},
        "cells": {("fwd", "hit_tokens"): ("measured", 0.0), ("fwd", "host_fetched_tokens"): ("absent", None),
                  ("rev", "hit_tokens"): ("measured", 300.0), ("rev", "host_fetched_tokens"): ("absent", None)},
        "table": {"hit_tokens": (0.0, 300.0), "host_fetched_tokens": ("absent", "absent")},
    }
    ra = report_answer(d)
    assert one_answer(findings_answer(tmp_path, "L"), ra, "hit_tokens") == {"fwd": 0.0, "rev": 300.0}
    assert ra["rules"] == ["churn"] and ra["phases"] == [("fwd", "rev")]
    assert ra["evidence"] == [{"fwd": {"hit_tokens": 0.0, "computed_tokens": 400.0},
                               "rev": {"hit_tokens": 300.0, "computed_tokens": 100.0}}]
    assert "on the device tier" in ra["text"][0]
    # compare reads the same figure (300 / 100) and says the server has no lookup counter
    assert compare_answer(d, "ratio:hit_tokens/computed_tokens") == {
        "fwd": (0.0, None, 0), "rev": (3.0, None, 1)}
    assert compare_answer(d, "ratio:hit_tokens/query_tokens")["rev"][1] == (
        "query_tokens: no such counter for backend x (have: hit_tokens, computed_tokens)")


def test_host_tier_run_reads_the_host_tier_everywhere(tmp_path):
    d = make(tmp_path, "H", HOST, attribution="per_request")
    assert findings_answer(tmp_path, "H") == {
        "tiers": {"host": True, "device": True},
        "rule": "row_checkpoint_churn",
        "figures": {"fwd": ("host_fetched_tokens", 0.0), "rev": ("host_fetched_tokens", 256.0)},
        "cells": {("fwd", "hit_tokens"): ("measured", 0.0), ("fwd", "host_fetched_tokens"): ("measured", 0.0),
                  ("rev", "hit_tokens"): ("measured", 0.0), ("rev", "host_fetched_tokens"): ("measured", 256.0)},
        "table": {"hit_tokens": (0.0, 0.0), "host_fetched_tokens": (0.0, 256.0)},
    }
    ra = report_answer(d)
    assert one_answer(findings_answer(tmp_path, "H"), ra, "host_fetched_tokens") == {"fwd": 0.0, "rev": 256.0}
    assert ra["rules"] == ["churn"] and ra["phases"] == [("fwd", "rev")]
    assert "on the host tier" in ra["text"][0]
    assert ra["evidence"][0]["rev"]["host_fetched_tokens"] == 256.0
    assert ra["evidence"][0]["fwd"]["host_fetched_tokens"] == 0.0
    assert compare_answer(d, "ratio:host_fetched_tokens/host_query_tokens") == {
        "fwd": (0.0, None, 0), "rev": (0.64, None, 1)}


def test_host_tier_exported_at_zero_is_absent_while_device_lookups_move(tmp_path):
    # Missing test (issue 26): the host tier counted present when its lookup counter is
    # exported but stays 0 would read both replays on it (0 and 0): "no restores".
    d = make(tmp_path, "V", VLLM)
    assert findings_answer(tmp_path, "V") == {
        "tiers": {"host": False, "device": True},
        "rule": "row_checkpoint_churn",
        "figures": {"fwd": ("hit_tokens", 0.0), "rev": ("hit_tokens", 384.0)},
        "cells": {("fwd", "hit_tokens"): ("measured", 0.0), ("fwd", "host_fetched_tokens"): ("absent", None),
                  ("rev", "hit_tokens"): ("measured", 384.0), ("rev", "host_fetched_tokens"): ("absent", None)},
        "table": {"hit_tokens": (0.0, 384.0), "host_fetched_tokens": ("absent", "absent")},
    }
    ra = report_answer(d)
    assert one_answer(findings_answer(tmp_path, "V"), ra, "hit_tokens") == {"fwd": 0.0, "rev": 384.0}
    assert ra["rules"] == ["churn"] and "on the device tier" in ra["text"][0]
    assert "host tier absent (host_lookups 0, host_query_tokens 0 in this phase)" in ra["text"][0]
    assert compare_answer(d, "ratio:hit_tokens/query_tokens") == {"fwd": (0.0, None, 0), "rev": (0.96, None, 1)}


def test_a_phase_delta_across_a_restart_is_no_evidence_anywhere(tmp_path):
    # Missing test (issue 26): rev's delta has reset = true; its 384 (post-restart values)
    # used as evidence would read churn on every surface.
    d = make(tmp_path, "R", RESET)
    fa = findings_answer(tmp_path, "R")
    assert fa["rule"] == "restore_pattern_incomplete"
    assert fa["figures"] == {"fwd": ("hit_tokens", 0.0)}
    assert fa["cells"][("rev", "hit_tokens")] == ("failed", None)
    assert fa["table"] == {"hit_tokens": (0.0, "absent"), "host_fetched_tokens": ("absent", "absent")}
    ra = report_answer(d)
    assert ra["rules"] == ["one_order_zero"] and ra["phases"] == [("fwd",)]
    assert one_answer(fa, ra, "hit_tokens") == {"fwd": 0.0, "rev": None}
    # compare: no figure for rev, and not for want of a counter (the delta is void)
    assert compare_answer(d, "ratio:hit_tokens/query_tokens") == {"fwd": (0.0, None, 0), "rev": (None, None, 0)}


@pytest.mark.parametrize("attribution", ["phase_only", "per_request"])
def test_a_phase_sharing_only_some_bodies_is_not_a_replay(tmp_path, attribution):
    # Missing test (issue 26): "mixed" sends 2, 3 (sent before) and 4, 5 (first sends);
    # read as a reverse replay, its 200 restored tokens would make churn of it.
    dev = lambda h: {"query_tokens": 400, "hit_tokens": h}  # noqa: E731
    d = write_run(tmp_path / "P", [("prime", "forward", [0, 1, 2, 3], dev(0)),
                                   ("fwd", "forward", [0, 1, 2, 3], dev(0)),
                                   ("mixed", "reverse", [5, 4, 3, 2], dev(200))], attribution=attribution)
    ra = report_answer(d)
    assert ra["rules"] == ["one_order_zero"] and ra["phases"] == [("fwd",)]
    steps = [{"name": "P", "kind": "run", "status": "measured", "run_dir": "P", "comparable": True,
              "incarnation": "P"}]
    views = load_views(tmp_path, steps)
    assert [(v.phase, v.repeats, v.first) for v in views] == [("prime", 0, 4), ("fwd", 4, 0), ("mixed", 2, 2)]
    (f,) = restore_findings(views)
    if attribution == "phase_only":
        # phase-wide counters of a phase that is not a replay are no evidence
        assert views[2].evidence is None and "mixes first sends with repeats" in views[2].note
        assert f["rule"] == "restore_pattern_incomplete"
    else:
        # at C1 its two repeats count one by one: their deltas here are 0 (the 200 rode on body 5),
        # so the device tier did not move in them: absent, not a reverse replay that restored nothing
        assert views[2].evidence == {"query_tokens": 0.0, "hit_tokens": 0.0}
        assert f["rule"] == "restore_pattern_incomplete"
        assert [(k["cell"], k["reason"]) for k in f["skipped"]] == [
            ("P/mixed", "device tier absent in its repeats (query_tokens 0 in this phase)")]
