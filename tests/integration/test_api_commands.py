"""The API functions and the commands over them give the same results on the same input (issue 35).

Each command moved into ``kvreplay.api`` is run twice, through ``kvreplay.cli.main``
(its ``--json`` output) and through the API function, and the two must be equal; the
figures checked are independent of the code: the demo workload's 52 bodies hold 190,516
prompt tokens, and an entries cache of two snapshots serves 175,848 of them from cache
(the README's prime phase: 175848/190516).
"""

from __future__ import annotations

import json
from pathlib import Path

import kvreplay
from kvreplay.cli import main

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "fixtures" / "workloads" / "mtbench-52"


def _cli_json(capsys, *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_simulate_api_equals_cli(capsys):
    cli = _cli_json(capsys, "simulate", str(DEMO), "--capacities", "1,2,4", "--today", "1")
    api = kvreplay.simulate(DEMO, capacities=[1, 2, 4], today=1)
    assert api == cli
    curve = {p["capacity"]: (p["hit_requests"], p["hit_tokens"]) for p in api["curve"]}
    # capacity 1: each body's snapshot evicts the one the next body needs; 2 keeps it: 51 of 52 hit
    assert curve == {1: (0, 0), 2: (51, 175848), 4: (51, 175848)}
    assert (api["requests"], api["prompt_tokens"], api["recommended"]["capacity"]) == (52, 190516, 2)
    assert "answer" in api and api["answer"] == cli["answer"]


def test_simulate_fleet_api_equals_cli(capsys):
    cli = _cli_json(capsys, "simulate", str(DEMO), "--replicas", "2", "--capacities", "4")
    api = kvreplay.simulate_fleet(DEMO, 2, capacities=[4])
    assert api == cli
    assert api["cache"] == {"model": "entries", "unit": "entries", "per_replica": [4, 4], "merged": 8}
    assert api["policies"]["merged"]["cached_tokens"] == 175848
