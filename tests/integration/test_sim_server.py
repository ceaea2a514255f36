"""The simulator over HTTP on 127.0.0.1 port 0: endpoints, stream shape, gauges, faults.

Every request loop is bounded; delays use time_scale 0 unless a test needs a
request in flight (then a small scale and a bounded poll, never a timing assertion).
"""

from __future__ import annotations

import asyncio
import contextlib
import re

import aiohttp
import orjson
import pytest

from kvreplay.sim import SimConfig, SimServer
from kvreplay.sim.faults import parse_fault

CHAT = "/v1/chat/completions"


def chat_body(system: str, user: str, *, stream: bool = True, max_tokens: int = 16, usage: bool = True) -> bytes:
    body = {
        "model": "m",
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    if stream and usage:
        body["stream_options"] = {"include_usage": True}
    return orjson.dumps(body)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 50))


@contextlib.asynccontextmanager
async def sim(**kw):
    kw.setdefault("time_scale", 0.0)
    faults = tuple(parse_fault(f) for f in kw.pop("fault_specs", ()))
    srv = SimServer(SimConfig(faults=faults, **kw))
    await srv.start(host="127.0.0.1", port=0)
    try:
        async with aiohttp.ClientSession() as s:
            yield srv, s
    finally:
        await srv.stop()


async def post(s, url, raw, path=CHAT):
    async with s.post(url + path, data=raw, headers={"Content-Type": "application/json"}) as r:
        return r.status, await r.read()


def sse(data: bytes) -> list:
    out = []
    for block in data.split(b"\n\n"):
        if block.startswith(b"data: "):
            payload = block[6:]
            out.append("[DONE]" if payload == b"[DONE]" else orjson.loads(payload))
    return out


async def metrics(s, url) -> dict[str, float]:
    async with s.get(url + "/metrics") as r:
        text = await r.text()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            m = re.match(r"^([^{ ]+)(\{[^}]*\})? (\S+)$", line)
            assert m, line
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def one(ms: dict[str, float], name: str) -> float:
    vals = [v for k, v in ms.items() if k == name or k.startswith(name + "{")]
    assert len(vals) == 1, (name, vals)
    return vals[0]


def test_stream_shape_and_usage():
    async def go():
        async with sim(output_tokens=5) as (srv, s):
            assert srv.base_url.startswith("http://127.0.0.1:") and srv.port > 0
            status, data = await post(s, srv.base_url, chat_body("Be brief.", "Hi"))
            return status, sse(data), data

    status, evs, data = run(go())
    assert status == 200 and data.endswith(b"data: [DONE]\n\n")
    role, *tokens, fin, usage, done = evs
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert len(tokens) == 5 and all(len(t["choices"][0]["delta"]["content"]) > 0 for t in tokens)
    assert fin["choices"][0]["delta"] == {} and fin["choices"][0]["finish_reason"] == "stop"
    assert usage["choices"] == []
    # prompt: 8 (system) + 6 (user) + 4 (generation prompt) = 18, see test_sim_tokenizer
    assert usage["usage"] == {"prompt_tokens": 18, "completion_tokens": 5, "total_tokens": 23,
                              "prompt_tokens_details": {"cached_tokens": 0}}
    assert done == "[DONE]"


def test_deterministic_output_and_max_tokens():
    async def go():
        async with sim() as (srv, s):
            a = await post(s, srv.base_url, chat_body("S", "q", stream=False, max_tokens=4))
            b = await post(s, srv.base_url, chat_body("S", "q", stream=False, max_tokens=4))
            c = await post(s, srv.base_url, chat_body("S", "q", stream=False, max_tokens=1000))
            return [orjson.loads(x[1]) for x in (a, b, c)]

    a, b, c = run(go())
    assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]
    assert a["choices"][0]["finish_reason"] == "length" and a["usage"]["completion_tokens"] == 4
    # natural length is 32..256 tokens, under a cap of 1000: "stop"
    assert c["choices"][0]["finish_reason"] == "stop" and 32 <= c["usage"]["completion_tokens"] <= 256
    # a repeat hits the messages snapshot: system "S" message 6 tokens (<|im_start|> "system"
    # "\n" "S" <|im_end|> "\n") + user "q" message 6 = 12 tokens (prompt: 12 + 4 = 16)
    assert (a["usage"]["prompt_tokens_details"]["cached_tokens"],
            b["usage"]["prompt_tokens_details"]["cached_tokens"]) == (0, 12)


def test_completions_stream_and_small_endpoints():
    async def go():
        async with sim(output_tokens=3) as (srv, s):
            raw = orjson.dumps({"prompt": "Hello, world!", "stream": True, "max_tokens": 8,
                                "stream_options": {"include_usage": True}})
            st, data = await post(s, srv.base_url, raw, "/v1/completions")
            out = {"completions": (st, sse(data))}
            for path in ("/v1/models", "/version", "/health", "/cache"):
                async with s.get(srv.base_url + path) as r:
                    out[path] = (r.status, await r.json())
            async with s.post(srv.base_url + "/tokenize", json={"prompt": "Hello, world!"}) as r:
                out["tok"] = await r.json()
            async with s.post(srv.base_url + "/tokenize", json={"messages": [{"role": "user", "content": "Hi"}]}) as r:
                out["tok2"] = await r.json()
            async with s.post(srv.base_url + "/tokenize", data=b"[1]") as r:
                out["tok_bad"] = r.status
            st, _ = await post(s, srv.base_url, b'{"messages": 3}')
            out["bad"] = st
            return out

    out = run(go())
    st, evs = out["completions"]
    assert st == 200 and [e["choices"][0]["text"] for e in evs[:3]] != ["", "", ""]
    assert evs[0]["object"] == "text_completion" and evs[3]["choices"][0]["finish_reason"] == "stop"
    assert evs[4]["usage"]["prompt_tokens"] == 4 and evs[-1] == "[DONE]"
    assert out["/v1/models"][1]["data"][0]["id"] == "kvreplay-sim"
    assert out["/version"][1]["build"] == "sim-1" and "version" in out["/version"][1]
    assert out["/health"] == (200, {"status": "ok"})
    assert set(out["/cache"][1]) == {
        "entries", "bytes", "last_entry_bytes", "max_entries", "hits", "misses", "stores", "evicted",
        "prompt_tokens_saved", "store_ms_total", "restore_ms_total", "refused", "rows_copied", "hit_rate",
    }
    assert out["tok"]["count"] == 4 and len(out["tok"]["tokens"]) == 4
    assert out["tok2"]["count"] == 10  # 6 (user message) + 4 (generation prompt)
    assert out["tok_bad"] == 400 and out["bad"] == 400


def test_reset_keeps_counters_events_page():
    async def go():
        async with sim(output_tokens=2) as (srv, s):
            for _ in range(3):
                await post(s, srv.base_url, chat_body("Sys", "q"))
            async with s.get(srv.base_url + "/cache") as r:
                before = await r.json()
            async with s.post(srv.base_url + "/reset_prefix_cache") as r:
                assert r.status == 200
            async with s.get(srv.base_url + "/cache") as r:
                after = await r.json()
            ms = await metrics(s, srv.base_url)
            pages, since = [], 0
            for _ in range(10):  # bounded paging
                async with s.get(srv.base_url + "/events", params={"since": str(since), "limit": "2"}) as r:
                    page = await r.json()
                if not page["events"]:
                    break
                pages.append([e["id"] for e in page["events"]])
                since = page["next"]
            return before, after, ms, pages

    before, after, ms, pages = run(go())
    assert (before["entries"], before["hits"], before["misses"], before["stores"]) == (2, 2, 1, 2)
    assert (after["entries"], after["bytes"], after["hits"], after["stores"]) == (0, 0, 2, 2)
    assert one(ms, "vllm:prefix_cache_queries_total") == 3 * 16  # 16-token prompt x 3, not zeroed
    assert pages == [[1, 2], [3, 4]]  # 3 requests + 1 reset event


def test_waiting_gauge_with_one_slot():
    async def go():
        async with sim(slots=1, time_scale=0.05, output_tokens=2) as (srv, s):
            tasks = [asyncio.create_task(post(s, srv.base_url, chat_body("S", f"q{i}"))) for i in range(2)]
            seen = set()
            for _ in range(200):  # bounded poll
                ms = await metrics(s, srv.base_url)
                seen.add((one(ms, "vllm:num_requests_running"), one(ms, "vllm:num_requests_waiting")))
                if all(t.done() for t in tasks):
                    break
                await asyncio.sleep(0.005)
            await asyncio.gather(*tasks)
            ms = await metrics(s, srv.base_url)
            return seen, ms

    seen, ms = run(go())
    assert (1.0, 1.0) in seen
    assert one(ms, "vllm:num_requests_running") == 0 and one(ms, "vllm:num_requests_waiting") == 0


def test_metrics_names_and_restart_fault():
    async def go():
        async with sim(fault_specs=["restart@3", "identity@4:what=model"], output_tokens=2) as (srv, s):
            await post(s, srv.base_url, chat_body("S", "q"))
            await post(s, srv.base_url, chat_body("S", "q"))
            m1 = await metrics(s, srv.base_url)
            await post(s, srv.base_url, chat_body("S", "q"))
            m2 = await metrics(s, srv.base_url)
            async with s.get(srv.base_url + "/version") as r:
                v3 = await r.json()
            st, data = await post(s, srv.base_url, chat_body("S", "q", stream=False))
            async with s.get(srv.base_url + "/v1/models") as r:
                models = await r.json()
            return m1, m2, v3, orjson.loads(data), models

    m1, m2, v3, resp4, models = run(go())
    lab = '{engine="0",model_name="kvreplay-sim"}'
    for name in ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_total",
                 "vllm:generation_tokens_total", "vllm:prefix_cache_queries_created", "vllm:num_requests_running",
                 "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert name + lab in m1, name
    assert m1["vllm:prompt_tokens_by_source_total"
              + '{engine="0",model_name="kvreplay-sim",source="local_cache_hit"}'] == 12
    assert m1["vllm:prefix_cache_queries_total" + lab] == 32  # 2 x 16
    # request 3 restarts the server first: counters restart from that request alone
    assert m2["vllm:prefix_cache_queries_total" + lab] == 16 and m2["vllm:prefix_cache_hits_total" + lab] == 0
    assert m2["process_start_time_seconds"] > m1["process_start_time_seconds"]
    assert m2["vllm:prefix_cache_queries_created" + lab] > m1["vllm:prefix_cache_queries_created" + lab]
    assert v3["build"] == "sim-1"
    assert resp4["model"] == "kvreplay-sim-2" and models["data"][0]["id"] == "kvreplay-sim-2"


@pytest.mark.parametrize(("fault", "status"), [("http401", 401), ("http403", 403), ("oom500", 500)])
def test_http_error_faults(fault, status):
    async def go():
        async with sim(fault_specs=[f"{fault}@2"], output_tokens=2) as (srv, s):
            return [await post(s, srv.base_url, chat_body("S", "q")) for _ in range(3)]

    res = run(go())
    assert [r[0] for r in res] == [200, status, 200]
    err = orjson.loads(res[1][1])["error"]
    assert err["code"] == status
    if fault == "oom500":
        assert "CUDA out of memory" in err["message"]


def test_stream_faults():
    async def go():
        specs = ["error-event@1:chunks=2", "cut@2:chunks=3", "malformed@3:chunks=1", "identity@4"]
        async with sim(fault_specs=specs, output_tokens=6) as (srv, s):
            out = []
            for _ in range(4):
                try:
                    out.append(await post(s, srv.base_url, chat_body("S", "q")))
                except aiohttp.ClientPayloadError as exc:
                    out.append(("cut", exc))
            async with s.get(srv.base_url + "/version") as r:
                version = await r.json()
            async with s.get(srv.base_url + "/events") as r:
                evs = (await r.json())["events"]
            return out, version, evs

    out, version, evs = run(go())
    st, data = out[0]
    blocks = data.split(b"\n\n")
    assert st == 200 and blocks[-3:] == [
        b'data: {"error":{"message":"simulated engine error mid-stream","type":"InternalServerError",'
        b'"param":null,"code":500}}',
        b"data: [DONE]", b""]
    assert len([b for b in blocks if b'"content":"' in b and b'"content":""' not in b]) == 2
    assert out[1][0] == "cut"
    st, data = out[2]
    bad = [b for b in data.split(b"\n\n") if b.startswith(b"data: ") and b != b"data: [DONE]"]
    with pytest.raises(orjson.JSONDecodeError):
        [orjson.loads(b[6:]) for b in bad]
    assert data.endswith(b"data: [DONE]\n\n")
    assert version["build"] == "sim-1+1"
    reqs = [e for e in evs if e["kind"] == "request"]
    assert [(e["outcome"], e["completion_tokens"], e["finish_reason"]) for e in reqs] == [
        ("error-event", 2, "error"), ("cut", 3, "abort"), ("ok", 6, "stop"), ("ok", 6, "stop")]


def test_stall_and_busy_gauge():
    async def go():
        async with sim(fault_specs=["stall@1:s=0.2,at=first", "busy-gauge@2:s=0.3"], output_tokens=2) as (srv, s):
            task = asyncio.create_task(post(s, srv.base_url, chat_body("S", "q")))
            stalled = False
            for _ in range(100):  # bounded poll while the first token is held back
                ms = await metrics(s, srv.base_url)
                if one(ms, "vllm:num_requests_running") == 1 and not task.done():
                    stalled = True
                    break
                await asyncio.sleep(0.005)
            await task
            await post(s, srv.base_url, chat_body("S", "q"))
            busy = one(await metrics(s, srv.base_url), "vllm:num_requests_running")
            for _ in range(200):  # bounded wait for the gauge to drop
                idle = one(await metrics(s, srv.base_url), "vllm:num_requests_running")
                if idle == 0:
                    break
                await asyncio.sleep(0.01)
            return stalled, busy, idle

    stalled, busy, idle = run(go())
    assert stalled and busy == 1 and idle == 0


def test_stop_is_idempotent_and_start_twice_fails():
    async def go():
        srv = SimServer(SimConfig(time_scale=0))
        await srv.start()
        with pytest.raises(RuntimeError):
            await srv.start()
        await srv.stop()
        await srv.stop()

    run(go())


def test_detokenize_gives_back_the_text_of_ids_it_produced():
    async def go():
        async with sim() as (srv, s):
            async with s.post(srv.base_url + "/tokenize", json={"prompt": "Zyzzyva quokkas, 1234!"}) as r:
                ids = (await r.json())["tokens"]
            out = {}
            for name, toks in (("all", ids), ("cut", ids[:3]), ("special", [1, 2]), ("unknown", [999_999]),
                               ("bad", "x")):
                async with s.post(srv.base_url + "/detokenize", json={"tokens": toks}) as r:
                    out[name] = (r.status, await r.json())
            return out

    out = run(go())
    # pieces: "Zyzzyv" "a" " quokka" "s" "," " 123" "4" "!" (letters in chunks of 6, digits of 3)
    assert out["all"] == (200, {"prompt": "Zyzzyva quokkas, 1234!"})
    assert out["cut"] == (200, {"prompt": "Zyzzyva quokka"})
    assert out["special"] == (200, {"prompt": "<|im_start|><|im_end|>"})
    assert out["unknown"][0] == 400 and "tokens[0] = 999999" in out["unknown"][1]["error"]["message"]
    assert out["bad"][0] == 400
