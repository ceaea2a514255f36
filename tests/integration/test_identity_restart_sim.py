"""Identity at C1 with cheap reads (issue 31 item 3): a restart is caught before the next request.

After each request at C1 a Prometheus adapter takes ``/v1/models`` and
``/version`` from its last read of them while the counter read shows the same
start marker (``process_start_time_seconds``, the ``_created`` times). Fault
numbers are 1-based requests (``kvreplay.sim.faults``): ``@3`` fires on position
2. The ``identity`` fault changes the build string of ``/version``
(``version.build``: ``sim-1`` -> ``sim-1+1``). The simulator also prints its build
and model in ``vllm:cache_config_info``, which every counter read carries, so
these runs use the vLLM profile without that info series (``--backend prometheus
--profile FILE``): the build is then seen only in ``/version``.
"""

from __future__ import annotations

import json
from pathlib import Path

from kvreplay.cli import main

ROOT = Path(__file__).resolve().parents[2]
MTBENCH = ROOT / "fixtures" / "workloads" / "mtbench-52"


def profile_without_info(tmp: Path) -> Path:
    """The built-in vLLM profile less its ``info_series`` line."""
    text = (ROOT / "src" / "kvreplay" / "profiles" / "vllm.toml").read_text()
    assert 'info_series = ["vllm:cache_config_info"]\n' in text
    path = tmp / "vllm-no-info.toml"
    path.write_text(text.replace('info_series = ["vllm:cache_config_info"]\n', ""))
    return path


def kvrun(out: Path, *faults: str, phases: tuple[str, ...]) -> tuple[int, list[dict], dict]:
    args = ["run", str(MTBENCH), "--target", "sim", "--backend", "prometheus", "--profile",
            str(profile_without_info(out.parent)), "--out", str(out), "--quiet",
            "--sim-time-scale", "0", "--sim-output-tokens", "6"]
    for f in faults:
        args += ["--sim-fault", f]
    for p in phases:
        args += ["--phase", p]
    rc = main(args)
    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    return rc, recs, json.loads((out / "summary.json").read_text())


def test_restart_with_another_build_is_caught_after_the_request_it_served(tmp_path: Path) -> None:
    # Request 3 is served by a restarted server of another build: the counter read after it
    # shows a new start marker, so /version is read again and the drift stops the phase there.
    rc, recs, summary = kvrun(tmp_path / "r", "restart@3", "identity@3", phases=("a:forward:c1:first12",))
    assert rc == 3
    ab = summary["aborted"]
    assert ab["reason"] == "identity_drift"
    assert [r["sent"] for r in recs] == [True] * 3 + [False] * 9
    assert ab["changes"] == [{"key": "version.build", "old": "sim-1", "new": "sim-1+1"}]
    assert [bool((r.get("counter_delta") or {}).get("reset")) for r in recs[:3]] == [False, False, True]
    # the reads before it saw the old process unchanged: only the request the new build served is marked
    assert [bool(r.get("identity_unverified")) for r in recs[:3]] == [False, False, True]


def test_build_changed_without_a_restart_is_caught_at_the_phase_end(tmp_path: Path) -> None:
    # The same start marker: the served part is reused, so the change (request 3) is seen by the
    # phase's closing read; phase b sends nothing. The reused reads vouch for nothing when the
    # process is the same: all 6 records sent since the opening read's /version are marked.
    rc, recs, summary = kvrun(tmp_path / "r", "identity@3", phases=("a:forward:c1:first6", "b:forward:c1:first2"))
    assert rc == 3 and summary["aborted"]["reason"] == "identity_drift"
    assert summary["aborted"]["changes"] == [{"key": "version.build", "old": "sim-1", "new": "sim-1+1"}]
    assert [(r["phase"], r["sent"]) for r in recs] == [("a", True)] * 6 + [("b", False)] * 2
    assert [bool(r.get("identity_unverified")) for r in recs if r["phase"] == "a"] == [True] * 6
    assert summary["phases"][0]["valid"] is False
