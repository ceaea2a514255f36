"""``kvreplay export`` files read back by the peers' own loaders.

Both run in the vLLM CPU environment's interpreter (``kvreplay.testing.vllm_python``; it
has pydantic and numpy), with ``KVREPLAY_PEER_PATH`` (a PYTHONPATH) added for what that
environment lacks; each test is skipped when its peer cannot be imported:

- vLLM: ``vllm.benchmarks.datasets.CustomDataset``; it reads JSONL with pandas, which the
  CPU environment does not install (unpacked wheels of ``pandas python-dateutil pytz tzdata
  six``, ``pip download --no-deps``, on ``KVREPLAY_PEER_PATH`` supply it);
- AIPerf: its ``MultiTurnDatasetLoader``, ``SingleTurnDatasetLoader`` and
  ``MooncakeTraceDatasetLoader`` checks and pydantic models, from the unpacked ``aiperf``
  wheel and its import-time dependencies (``aiperf ruamel.yaml cyclopts aiofiles
  ffmpeg-python future orjson``) on ``KVREPLAY_PEER_PATH``.

``scripts/setup_real_servers.sh peers`` (run by ``make test``) unpacks those wheels into
``~/.cache/kvreplay/realsrv/peers/site``, the default of ``KVREPLAY_PEER_PATH``.
``tests/unit/workload/test_peers.py`` checks the documented schemas byte for byte either way.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from kvreplay.testing import realsrv_home, vllm_python
from kvreplay.workload.import_sharegpt import import_sharegpt
from kvreplay.workload.peers import export_aiperf, export_vllm

_VLLM_READ = """
import json, sys, types
from vllm.benchmarks.datasets.datasets import CustomDataset
class Tok:  # counts words: enough for the loader's prompt_len, no model download
    def __call__(self, s):
        return types.SimpleNamespace(input_ids=s.split())
ds = CustomDataset(dataset_path=sys.argv[1], disable_shuffle=True)
reqs = ds.sample(tokenizer=Tok(), num_requests=0, skip_chat_template=True, output_len=None)
print(json.dumps([[r.prompt, r.prompt_len, r.expected_output_len] for r in reqs]))
"""

_AIPERF_READ = """
import json, sys
from aiperf.dataset.loader.models import MooncakeTrace, SingleTurn
from aiperf.dataset.loader.multi_turn import MultiTurnDatasetLoader
from aiperf.dataset.loader.mooncake_trace import MooncakeTraceDatasetLoader
from aiperf.dataset.loader.single_turn import SingleTurnDatasetLoader
multi, trace, single = sys.argv[1:4]
l = MultiTurnDatasetLoader(filename=multi)
out = {"multi": [[c.session_id, c.system_message, [[t.texts[0].contents, t.delay, t.max_tokens] for t in c.turns]]
                 for c in l.convert_to_conversations(l.load_dataset())]}
rows = [json.loads(x) for x in open(trace)]
out["trace"] = [MooncakeTraceDatasetLoader.can_load(r) and len(MooncakeTrace.model_validate(r).messages) for r in rows]
rows = [json.loads(x) for x in open(single)]
out["single"] = [SingleTurnDatasetLoader.can_load(r) and SingleTurn.model_validate(r).text for r in rows]
print(json.dumps(out))
"""


def _workload(tmp_path: Path) -> Path:
    src = tmp_path / "c.json"
    src.write_text('[{"id":"a","conversations":[{"from":"system","value":"S"},{"from":"human","value":"h1 two"},'
                   '{"from":"gpt","value":"g1"},{"from":"human","value":"h2"}]},'
                   '{"id":"b","conversations":[{"from":"human","value":"x y z"}]}]')
    return import_sharegpt(src, tmp_path / "w", max_tokens=8, think_time=2.0).workload


def _run(script: str, *args: str) -> object:
    """Run ``script`` in the peers' interpreter; skips the test when the peer cannot be imported."""
    py = vllm_python()
    if py is None:
        pytest.skip("the vLLM CPU environment is not installed")
    site = realsrv_home() / "peers" / "site"  # scripts/setup_real_servers.sh peers (make test runs it)
    env = {**os.environ, "PYTHONPATH": os.environ.get("KVREPLAY_PEER_PATH", str(site) if site.is_dir() else "")}
    out = subprocess.run([str(py), "-c", script, *args], capture_output=True, text=True, timeout=280,
                         env=env, check=False)
    missing = re.search(r"(ModuleNotFoundError: .*|PackageNotFoundError: .*)", out.stderr)
    if out.returncode and missing and "kvreplay" not in missing.group(1):
        pytest.skip(f"{missing.group(1)} (see KVREPLAY_PEER_PATH in this module's docstring)")
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(300)  # importing vllm takes tens of seconds on a loaded machine
def test_vllm_custom_dataset_reads_the_export(tmp_path: Path) -> None:
    res = export_vllm(_workload(tmp_path), tmp_path / "v.jsonl", lossy=True)
    got = _run(_VLLM_READ, str(res.path))
    assert got == [["S\n\nh1 two", 3, 8], ["S\n\nh1 two\n\ng1\n\nh2", 5, 8], ["x y z", 3, 8]]


@pytest.mark.timeout(300)
def test_aiperf_loaders_read_the_export(tmp_path: Path) -> None:
    wl = _workload(tmp_path)
    multi = export_aiperf(wl, tmp_path / "m.jsonl", lossy=True).path
    trace = export_aiperf(wl, tmp_path / "t.jsonl", kind="mooncake_trace").path
    single = export_aiperf(wl, tmp_path / "s.jsonl", kind="single_turn", lossy=True).path
    got = _run(_AIPERF_READ, str(multi), str(trace), str(single))
    assert got == {
        "multi": [["a", "S", [[["h1 two"], None, 8], [["h2"], 2000.0, 8]]], ["b", None, [[["x y z"], None, 8]]]],
        "trace": [2, 4, 1],
        "single": ["h1 two", "h2", "x y z"],
    }


_AIPERF_RAW_READ = """
import json, sys
import orjson
from aiperf.dataset.loader.raw_payload import RawPayloadDatasetLoader
out = []
for f in sys.argv[1:]:
    l = RawPayloadDatasetLoader(filename=f)
    out.append([[orjson.dumps(t.raw_payload).decode() for t in c.turns]
                for c in l.convert_to_conversations(l.load_dataset())])
print(json.dumps(out))
"""


@pytest.mark.timeout(300)
def test_aiperf_raw_payload_loader_sends_the_exact_bodies(tmp_path: Path) -> None:
    wl = _workload(tmp_path)  # sessions: a folder, one file per session
    bodies = [b.decode() for b in wl.read_bytes().splitlines()]
    folder = export_aiperf(wl, tmp_path / "raw", kind="raw_payload").path
    flat = tmp_path / "flat.jsonl"
    flat.write_bytes(wl.read_bytes())  # the same bodies without a sessions side file: one line each
    single = export_aiperf(flat, tmp_path / "single.jsonl", kind="raw_payload").path
    got = _run(_AIPERF_RAW_READ, str(folder), str(single))
    # the bytes AIPerf sends (orjson.dumps of each parsed line) are the bodies' own
    assert got == [[bodies[0:2], bodies[2:3]], [[b] for b in bodies]]
