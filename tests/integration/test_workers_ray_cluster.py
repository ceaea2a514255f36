"""--ray on a simulated multi-node cluster: two Ray nodes on this host (``ray.cluster_utils.Cluster``).

Each node has one CPU and a custom resource naming it (``node_a`` on the head,
``node_b`` on the added node); every worker actor takes one CPU, so Ray must
place the two workers on different nodes, as on two hosts. Both nodes share this
host's boot id, so the clocks stay ``shared``; what a real second host changes
(wall-aligned clocks) is tested in ``test_workers_ray.py``. One test, a small
workload: Ray takes several seconds to start two nodes on this machine.
"""

import asyncio
import json

import pytest
from helpers import SlowSSE, write_chat_workload

from kvreplay.plan import build_plan, parse_phase
from kvreplay.runner import RunOptions
from kvreplay.workload import load_workload

ray = pytest.importorskip("ray", reason="Ray is not installed (optional extra: pip install 'kvreplay[ray]')")
cluster_utils = pytest.importorskip("ray.cluster_utils", reason="this Ray has no ray.cluster_utils")

from kvreplay.runner.rayrun import execute_plan_ray  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]

_STORE = 80 << 20  # object store per node (bytes): Ray's floor is 75 MiB


@pytest.fixture()
def two_node_cluster():
    """A head node {"node_a": 1} and a second node {"node_b": 1}, 1 CPU each; yields its GCS address."""
    if ray.is_initialized():
        ray.shutdown()
    cluster = cluster_utils.Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "resources": {"node_a": 1}, "object_store_memory": _STORE,
                        "include_dashboard": False},
    )
    try:
        cluster.add_node(num_cpus=1, resources={"node_b": 1}, object_store_memory=_STORE)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False, configure_logging=False)
        yield cluster.address
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_workers_on_two_nodes_each_run_positions_and_merge_losslessly_in_order(two_node_cluster, tmp_path):
    # Position 0 answers after 2 s: the worker that claimed it is busy, so the other node's
    # worker claims position 1 (and more) meanwhile: both nodes run positions.
    bodies = [("s", "SLOW first")] + [("s", f"q{i}") for i in range(1, 12)]
    wl_path = write_chat_workload(tmp_path / "wl", bodies)
    out = tmp_path / "o"

    async def body():
        loop = asyncio.get_running_loop()
        srv = await loop.create_server(SlowSSE, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        try:
            wl = load_workload(wl_path)
            plan = build_plan(wl, [parse_phase("a:forward:c2"), parse_phase("b:reverse:c2")])
            opts = RunOptions(target_url=f"http://127.0.0.1:{port}", out_dir=out, quiet=True)
            return await execute_plan_ray(plan, wl, opts, workers=2, address=two_node_cluster)
        finally:
            srv.close()

    summary = asyncio.run(asyncio.wait_for(body(), 180))
    node_of = {n["NodeID"]: name for n in ray.nodes() if n["Alive"]
               for name in ("node_a", "node_b") if name in n["Resources"]}
    assert sorted(node_of.values()) == ["node_a", "node_b"]

    hosts = summary["ray"]["hosts"]
    assert [h["worker"] for h in hosts] == [0, 1]
    assert sorted(node_of[h["node"]] for h in hosts) == ["node_a", "node_b"]  # one worker per node
    assert summary["ray"]["address"] == two_node_cluster

    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    # Lossless and in (phase, position) order: every position of both phases once, all answered.
    assert [(r["phase"], r["position"]) for r in recs] == [(p, i) for p in "ab" for i in range(12)]
    assert {r["status"] for r in recs} == {"ok"}
    a = [r for r in recs if r["phase"] == "a"]
    slow = a[0]["worker"]
    assert a[1]["worker"] == 1 - slow  # claimed by the other node's worker while position 0 was slow
    assert {node_of[hosts[r["worker"]]["node"]] for r in a} == {"node_a", "node_b"}
    for ph, n in zip(summary["phases"], (12, 12), strict=True):
        assert ph["ok"] == n and ph["tokens"]["completion"] == 4 * n
    assert json.loads((out / "plan.json").read_text())["run"]["ray"]["hosts"][0]["node"] == hosts[0]["node"]
    assert not (out / "workers").exists()
