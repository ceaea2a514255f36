"""Issue 42 item 9: the OpenAI Python SDK's streaming client captured through ``kvreplay record``.

The SDK reads a stream to ``[DONE]``, closes the response and sends its next request at
once. Before, 1 of 16 to 2 of 8 such requests were logged ``client_gone`` with no TTFT or
E2E, and a one-at-a-time client was once captured as concurrency 2 (the previous request
still "in flight" until its exchange closed). The SDK is the one installed with the
real-server set-up (the vLLM CPU environment carries ``openai``); no network: the
upstream is ``kvreplay serve-sim`` on 127.0.0.1.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from integration.real.conftest import require
from integration.real.realsrv_helpers import Recorder

from kvreplay.testing import free_port, vllm_python

pytestmark = [pytest.mark.real_server, pytest.mark.timeout(300)]

N = 16
CLIENT = """
import sys, openai
c = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="x", max_retries=0)
for i in range(int(sys.argv[2])):
    s = c.chat.completions.create(model="kvreplay-sim", max_tokens=8, stream=True,
                                  stream_options={"include_usage": True},
                                  messages=[{"role": "user", "content": f"question {i}: " + "word " * 30}])
    for _chunk in s:
        pass
print("sent", sys.argv[2])
"""


def test_sdk_streams_are_complete_and_one_at_a_time(tmp_path: Path) -> None:
    py = vllm_python()
    require(py, "the vLLM CPU environment (its openai package)")
    sim = subprocess.Popen([sys.executable, "-m", "kvreplay", "serve-sim", "--port", str(free_port()),
                            "--time-scale", "0.001", "--output-tokens", "8"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        line = sim.stdout.readline().decode()  # type: ignore[union-attr]
        m = re.search(r"listening on (http://\S+)", line)
        assert m, line
        w = tmp_path / "W"
        rec = Recorder(m.group(1), w, free_port())
        try:
            client = subprocess.run([str(py), "-c", CLIENT, rec.url, str(N)], capture_output=True, text=True,
                                    timeout=120, check=False)
        finally:
            rc, err = rec.stop()
    finally:
        sim.terminate()
        sim.wait(timeout=30)
        sim.stdout.close()  # type: ignore[union-attr]
    assert client.returncode == 0, client.stderr[-3000:]
    assert rc == 0, err
    lines = [json.loads(x) for x in (w / "capture.jsonl").read_text().splitlines()]
    assert [(ln["index"], ln["outcome"], ln["in_flight_at_arrival"]) for ln in lines] == [
        (i, "complete", 1) for i in range(N)]
    for ln in lines:
        assert ln["usage"]["completion_tokens"] == 8
        assert ln["ttft_ms"] is not None and ln["e2e_ms"] is not None and 0 < ln["ttft_ms"] <= ln["e2e_ms"]
    plan = (tmp_path / "W.plan.toml").read_text()
    assert "\nconcurrency = 1\n" in plan
