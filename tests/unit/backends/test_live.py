"""Adapters against tiny aiohttp servers on 127.0.0.1 port 0 serving the fixture dumps."""

import asyncio
import json
import socket

import aiohttp
import pytest

from kvreplay.backends import check_fresh, detect, make_backend, settled_snapshot, wait_drained
from kvreplay.backends._http import fetch
from kvreplay.cli import main
from kvreplay.errors import BackendError

JSON = "application/json"
GENERATION_PATHS = ("/v1/chat/completions", "/v1/completions", "/completion", "/generate")


def run(coro):
    return asyncio.run(coro)


def models(*ids, owned_by="kvreplay-test", **extra):
    return (
        200,
        json.dumps(
            {"object": "list", "data": [{"id": i, "owned_by": owned_by, **extra} for i in ids]}
        ),
        JSON,
    )


async def with_backend(serve, routes, name, body):
    async with serve(routes) as (url, hits), aiohttp.ClientSession() as session:
        result = await body(url, session)
    assert not [h for h in hits if h[1].split("?")[0] in GENERATION_PATHS]
    return result, hits


# ---- detect -----------------------------------------------------------------


def test_detect_each_family(serve, dump):
    cases = {
        "halogen": {("GET", "/cache"): (200, '{"hits": 0, "misses": 0}', JSON)},
        "vllm": {("GET", "/metrics"): (200, dump("vllm/nvcr-25.09.prom"))},
        "sglang": {("GET", "/metrics"): (200, dump("sglang/docs-2024-11.prom"))},
        "llamacpp": {("GET", "/metrics"): (200, dump("llamacpp/ik-pr695.prom"))},
    }
    for expected, routes in cases.items():
        (name, hits) = run(with_backend(serve, routes, expected, lambda u, s: detect(u, s)))
        assert name == expected
        for _method, path, accept in hits:
            if path == "/metrics":
                assert accept.startswith("text/plain")


def test_detect_servers_with_metrics_off(serve):
    cases = {
        "llamacpp": {
            ("GET", "/metrics"): (501, "This server does not support metrics endpoint."),
            ("GET", "/props"): (200, '{"build_info": "b6097-abc", "model_path": "/m.gguf"}', JSON),
        },
        "sglang": {
            ("GET", "/get_server_info"): (200, '{"version": "0.4.0", "model_path": "x"}', JSON)
        },
        "vllm": {("GET", "/v1/models"): models("m", owned_by="vllm")},
        "openai": {("GET", "/v1/models"): models("gpt-x")},
    }
    for expected, routes in cases.items():
        (name, _) = run(with_backend(serve, routes, expected, lambda u, s: detect(u, s)))
        assert name == expected, expected


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_server_raises_backend_error_from_aiohttp():
    async def body():
        async with aiohttp.ClientSession() as session:
            await detect(f"http://127.0.0.1:{_free_port()}", session)

    with pytest.raises(BackendError) as ei:
        run(body())
    assert isinstance(ei.value.__cause__, aiohttp.ClientError)
    assert ei.value.url.endswith("/cache")


async def _metrics_server(handler, body):
    from aiohttp import web

    app = web.Application()
    app.router.add_get("/metrics", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        return await body(f"http://127.0.0.1:{port}")
    finally:
        await runner.cleanup()


def test_timeout_raises_backend_error(serve):
    async def slow(request):
        await asyncio.sleep(1.0)
        return aiohttp.web.Response(text="late")

    async def body(url):
        async with aiohttp.ClientSession() as session:
            await fetch(session, "GET", url, "/metrics", timeout_s=0.1)

    with pytest.raises(BackendError, match="no response within 0.1 s") as ei:
        run(_metrics_server(slow, body))
    assert isinstance(ei.value.__cause__, asyncio.TimeoutError)


def _trickle(text: str, pieces: int):
    """A handler writing ``text`` as ``pieces`` chunks with a pause between them."""
    from aiohttp import web

    async def handler(request):
        resp = web.StreamResponse(headers={"Content-Type": "text/plain; version=0.0.4"})
        await resp.prepare(request)
        raw = text.encode()
        step = -(-len(raw) // pieces)
        for i in range(0, len(raw), step):
            await resp.write(raw[i : i + step])
            await asyncio.sleep(0.01)
        await resp.write_eof()
        return resp

    return handler


@pytest.mark.parametrize("pieces", [1, 3, 17])
def test_scrape_arriving_in_pieces_is_read_whole(dump, pieces):
    """A body sent as several chunks with pauses (a big vLLM scrape over TCP) is read
    to EOF, not cut at the first read (CI failure: 'Invalid value' mid-line)."""
    text = dump("vllm/nvcr-25.09.prom")

    async def body(url):
        async with aiohttp.ClientSession() as session:
            reply = await fetch(session, "GET", url, "/metrics", accept="text/plain")
            backend = make_backend("vllm", url, session)
            snap = await backend.snapshot()
        return reply, snap

    reply, snap = run(_metrics_server(_trickle(text, pieces), body))
    assert reply.text == text
    assert snap.raw == make_backend("vllm", "http://x", None).parse(text)[0]


def test_body_over_the_bound_is_refused_even_in_pieces(dump, monkeypatch):
    import kvreplay.backends._http as http_mod

    text = dump("vllm/nvcr-25.09.prom")
    monkeypatch.setattr(http_mod, "MAX_BODY_BYTES", len(text.encode()) - 1)

    async def body(url):
        async with aiohttp.ClientSession() as session:
            return await fetch(session, "GET", url, "/metrics")

    with pytest.raises(BackendError, match="body over"):
        run(_metrics_server(_trickle(text, 5), body))
    monkeypatch.setattr(http_mod, "MAX_BODY_BYTES", len(text.encode()))
    assert run(_metrics_server(_trickle(text, 5), body)).text == text


# ---- vLLM -------------------------------------------------------------------


def vllm_routes(dump, more=None):
    routes = {
        ("GET", "/metrics"): (200, dump("vllm/nvcr-25.09.prom")),
        ("GET", "/v1/models"): models(
            "Qwen/Qwen3-4B-Instruct-2507-FP8", owned_by="vllm", max_model_len=32768
        ),
        ("GET", "/version"): (200, '{"version": "0.10.1.1"}', JSON),
    }
    routes.update(more or {})
    return routes


def test_vllm_identity_snapshot_and_reset_absent(serve, dump):
    async def body(url, session):
        b = make_backend("vllm", url, session)
        return await b.identity(), await b.snapshot(), await b.reset_cache()

    (ident, snap, reset), hits = run(with_backend(serve, vllm_routes(dump), "vllm", body))
    assert ident["models"] == ["Qwen/Qwen3-4B-Instruct-2507-FP8"]
    assert ident["max_model_len"] == 32768
    assert ident["version"] == "0.10.1.1"
    assert ident["cache_config"]["num_gpu_blocks"] == "850"
    assert snap.common["hit_tokens"] == 80 and snap.common["query_tokens"] == 246
    assert (
        snap.raw[
            'vllm:prefix_cache_hits_total{engine="0",model_name="Qwen/Qwen3-4B-Instruct-2507-FP8"}'
        ]
        == 80
    )
    assert reset is False  # no dev-mode route: 404
    assert ("POST", "/reset_prefix_cache") in [(m, p) for m, p, _ in hits]


def test_vllm_reset_in_dev_mode(serve, dump):
    routes = vllm_routes(dump, {("POST", "/reset_prefix_cache"): (200, "")})

    async def body(url, session):
        return await make_backend("vllm", url, session).reset_cache()

    assert run(with_backend(serve, routes, "vllm", body))[0] is True


@pytest.mark.parametrize(("text", "accepted", "tries"), [
    ('{"success": true}', True, 1),
    ('{"success": false}', False, 3),  # vLLM 0.32 while blocks are held: retried, then refused
])
def test_vllm_reset_reads_its_success_answer(serve, dump, monkeypatch, text, accepted, tries):
    import kvreplay.backends._families as fam

    monkeypatch.setattr(fam, "VLLM_RESET_TRIES", 3)
    monkeypatch.setattr(fam, "VLLM_RESET_RETRY_S", 0.01)
    routes = vllm_routes(dump, {("POST", "/reset_prefix_cache"): (200, text, JSON)})

    async def body(url, session):
        return await make_backend("vllm", url, session).reset_cache()

    reset, hits = run(with_backend(serve, routes, "vllm", body))
    assert reset is accepted
    assert [(m, p) for m, p, _ in hits].count(("POST", "/reset_prefix_cache")) == tries


@pytest.mark.parametrize(("status", "text"), [(500, "boom"), (200, 'vllm:x{a="b" 1\n')])
def test_vllm_bad_scrape_raises(serve, status, text):
    async def body(url, session):
        return await make_backend("vllm", url, session).snapshot()

    with pytest.raises(BackendError):
        run(with_backend(serve, {("GET", "/metrics"): (status, text)}, "vllm", body))


# ---- SGLang -----------------------------------------------------------------

SERVER_INFO = {
    "model_path": "google/gemma-2-9b-it",
    "tp_size": 1,
    "page_size": 1,
    "version": "0.4.0",
    "disable_radix_cache": False,
    "internal_states": [{"last_gen_throughput": 12.5}],
    "port": 30000,
}


@pytest.mark.parametrize(
    ("flush", "expected"),
    [
        ((200, "Cache flushed.\nPlease check backend logs for more details."), True),
        ((400, "Cache not flushed. Please check backend logs for more details. "), False),
        ((200, "something else"), False),
    ],
)
def test_sglang_identity_and_flush_checks_the_body(serve, dump, flush, expected):
    routes = {
        ("GET", "/metrics"): (200, dump("sglang/docs-2024-11.prom")),
        ("GET", "/get_server_info"): (200, json.dumps(SERVER_INFO), JSON),
        ("POST", "/flush_cache"): flush,
    }

    async def body(url, session):
        b = make_backend("sglang", url, session)
        return await b.identity(), await b.snapshot(), await b.reset_cache()

    (ident, snap, reset), _ = run(with_backend(serve, routes, "sglang", body))
    assert ident == {
        "backend": "sglang",
        "model_path": "google/gemma-2-9b-it",
        "tp_size": 1,
        "page_size": 1,
        "version": "0.4.0",
        "disable_radix_cache": False,
    }
    assert snap.common["prompt_tokens"] == 506780
    assert reset is expected


# ---- llama.cpp --------------------------------------------------------------


def test_llamacpp_metrics_off_falls_back_to_slots(serve):
    routes = {
        ("GET", "/metrics"): (501, "This server does not support metrics endpoint."),
        ("GET", "/slots"): (
            200,
            '[{"id": 0, "is_processing": true}, {"id": 1, "is_processing": false}]',
            JSON,
        ),
        ("GET", "/props"): (
            200,
            json.dumps(
                {
                    "build_info": "b6097-5c0eb5ef",
                    "model_path": "/m/phi-4.gguf",
                    "total_slots": 2,
                    "default_generation_settings": {"n_ctx": 4096},
                    "chat_template": "...",
                }
            ),
            JSON,
        ),
    }

    async def body(url, session):
        b = make_backend("llamacpp", url, session)
        return await b.identity(), await b.snapshot(), await b.reset_cache()

    (ident, snap, reset), hits = run(with_backend(serve, routes, "llamacpp", body))
    assert ident == {
        "backend": "llamacpp",
        "build_info": "b6097-5c0eb5ef",
        "model_path": "/m/phi-4.gguf",
        "total_slots": 2,
        "n_ctx": 4096,
    }
    assert snap.common == {"running": 1.0}
    assert snap.raw == {"slots.is_processing": [True, False]}
    assert reset is False
    assert not [h for h in hits if h[0] == "POST"]


# ---- halogen ----------------------------------------------------------------


def test_halogen_snapshot_identity_reset(serve):
    routes = {
        ("GET", "/cache"): (
            200,
            '{"entries": 2, "bytes": 10, "max_entries": 8, "hits": 1, "misses": 2, '
            '"stores": 4, "evicted": 0, "prompt_tokens_saved": 30, "refused": 0}',
            JSON,
        ),
        ("GET", "/v1/models"): models("sim-model"),
        ("GET", "/version"): (200, '{"version": "halogen 1.2"}', JSON),
        ("POST", "/reset_prefix_cache"): (200, "{}", JSON),
    }

    async def body(url, session):
        b = make_backend("halogen", url, session)
        return await b.identity(), await b.snapshot(), await b.reset_cache()

    (ident, snap, reset), _ = run(with_backend(serve, routes, "halogen", body))
    assert ident == {
        "backend": "halogen",
        "models": ["sim-model"],
        "version": "halogen 1.2",
        "max_entries": 8,
    }
    assert snap.common["lookups"] == 3 and snap.common["hit_tokens"] == 30
    assert reset is True


# ---- settle, drain, fresh -----------------------------------------------------


def moving_metrics(moves: int, running: int = 0):
    """/metrics whose hit counter grows on each of the first `moves` scrapes, then stays."""
    state = {"n": 0}

    def handler(request):
        state["n"] += 1
        hits = min(state["n"], moves + 1)
        return (200, f"vllm:prefix_cache_hits_total {hits}\nvllm:num_requests_running {running}\n")

    return handler, state


def test_settled_snapshot_waits_until_two_reads_agree(serve):
    handler, state = moving_metrics(moves=3)

    async def body(url, session):
        return await settled_snapshot(
            make_backend("vllm", url, session), interval_s=0.001, timeout_s=5.0
        )

    snap, _ = run(with_backend(serve, {("GET", "/metrics"): handler}, "vllm", body))
    assert snap.common["hit_tokens"] == 4  # counts 1,2,3,4,4: settles at the 5th read
    assert state["n"] == 5


def test_drain_passes_once_counters_stop(serve):
    handler, _ = moving_metrics(moves=2)

    async def body(url, session):
        return await wait_drained(
            make_backend("vllm", url, session), interval_s=0.001, timeout_s=5.0
        )

    res, _ = run(with_backend(serve, {("GET", "/metrics"): handler}, "vllm", body))
    assert res.passed is True and res.reason is None
    assert res.snapshot.common["hit_tokens"] == 3


def test_drain_times_out_on_a_busy_gauge(serve):
    handler, _ = moving_metrics(moves=0, running=1)

    async def body(url, session):
        return await wait_drained(
            make_backend("vllm", url, session), interval_s=0.01, timeout_s=0.1
        )

    res, _ = run(with_backend(serve, {("GET", "/metrics"): handler}, "vllm", body))
    assert res.passed is False
    assert "running" in res.reason
    assert res.waited_s >= 0.1


def test_fresh_check(serve, dump):
    fresh = (
        "vllm:prefix_cache_queries_total 0\n"
        "vllm:prefix_cache_hits_total 0\n"
        "vllm:num_requests_running 0\n"
    )

    async def body(url, session):
        return await make_backend("vllm", url, session).snapshot()

    snap, _ = run(with_backend(serve, {("GET", "/metrics"): (200, fresh)}, "vllm", body))
    assert check_fresh(snap) == (True, None)
    used, _ = run(
        with_backend(
            serve, {("GET", "/metrics"): (200, dump("vllm/nvcr-25.09.prom"))}, "vllm", body
        )
    )
    ok, reason = check_fresh(used)
    assert ok is False and "hit_tokens" in reason


# ---- kvreplay snapshot --------------------------------------------------------


def test_snapshot_command_live(serve, dump, capsys):
    async def body(url, session):
        return await asyncio.to_thread(main, ["snapshot", "--target", url])

    code, _ = run(with_backend(serve, vllm_routes(dump), "vllm", body))
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["backend"] == "vllm"
    assert out["identity"]["version"] == "0.10.1.1"
    assert out["common"]["hit_tokens"] == 80
    assert out["units"]["hit_tokens"] == "tokens"


def test_snapshot_command_from_file(capsys):
    from pathlib import Path

    dump = Path(__file__).resolve().parents[3] / "fixtures/metrics/llamacpp/ik-pr695.prom"
    assert main(["snapshot", "--from-file", str(dump), "--backend", "llamacpp"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["backend"] == "llamacpp"
    assert out["common"] == {"computed_tokens": 6886, "running": 0, "waiting": 0}
    assert out["raw"]["llamacpp:kv_cache_tokens"] == 31428


def test_snapshot_command_unreachable(capsys):
    assert (
        main(["snapshot", "--target", f"http://127.0.0.1:{_free_port()}", "--backend", "vllm"]) == 2
    )
    assert "kvreplay snapshot:" in capsys.readouterr().err


def test_halogen_takes_load_gauges_and_start_marker_from_a_companion_metrics(serve):
    state = {"running": 1}

    def metrics(request):
        return (
            200,
            "process_start_time_seconds 1.5e9\n"
            f'vllm:num_requests_running{{engine="0"}} {state["running"]}\n'
            'vllm:num_requests_waiting{engine="0"} 0\n'
            'vllm:prefix_cache_hits_total{engine="0"} 999\n',
        )

    routes = {
        ("GET", "/cache"): (200, '{"hits": 1, "misses": 2}', JSON),
        ("GET", "/metrics"): metrics,
    }

    async def body(url, session):
        b = make_backend("halogen", url, session)
        s1 = await b.snapshot()
        busy = await wait_drained(b, interval_s=0.01, timeout_s=0.05)
        state["running"] = 0
        idle = await wait_drained(b, interval_s=0.01, timeout_s=2.0)
        return s1, busy, idle

    (s1, busy, idle), _ = run(with_backend(serve, routes, "halogen", body))
    assert s1.common == {"hits": 1, "misses": 2, "lookups": 3, "running": 1, "waiting": 0}
    assert s1.started == 1.5e9
    assert s1.raw["/metrics"]['vllm:prefix_cache_hits_total{engine="0"}'] == 999
    assert busy.passed is False and "running" in busy.reason
    assert idle.passed is True


def test_halogen_without_metrics_asks_once(serve):
    routes = {("GET", "/cache"): (200, '{"hits": 1, "misses": 2}', JSON)}

    async def body(url, session):
        b = make_backend("halogen", url, session)
        return [await b.snapshot() for _ in range(3)]

    snaps, hits = run(with_backend(serve, routes, "halogen", body))
    assert all(s.common == {"hits": 1, "misses": 2, "lookups": 3} for s in snaps)
    assert "/metrics" not in snaps[0].raw
    assert [p for _, p, _ in hits] == ["/cache", "/metrics", "/cache", "/cache"]


def test_profile_driven_backend_live_with_reset(serve, tmp_path):
    prof = tmp_path / "p.toml"
    prof.write_text(
        'name = "mine"\nload_gauges = ["running"]\n'
        '[reset]\nmethod = "POST"\npath = "/admin/flush"\nexpect_body = "ok"\n'
        '[common.running]\nseries = ["my_busy"]\n'
        '[common.host_hits]\nseries = ["my_host_hits_total"]\n'
    )
    routes = {
        ("GET", "/metrics"): (200, "my_busy 0\nmy_host_hits_total 7\nother 1\n"),
        ("POST", "/admin/flush"): (200, "ok, flushed"),
    }

    async def body(url, session):
        b = make_backend("prometheus", url, session, profile=str(prof))
        return await b.snapshot(), await b.reset_cache(), await b.identity()

    (snap, reset, ident), hits = run(with_backend(serve, routes, "prometheus", body))
    assert snap.common == {"running": 0, "host_hits": 7}
    assert snap.raw == {"my_busy": 0, "my_host_hits_total": 7, "other": 1}
    assert reset is True
    assert ident == {"backend": "prometheus", "profile": "mine"}
    assert ("POST", "/admin/flush") in [(m, p) for m, p, _ in hits]


def test_snapshot_command_from_halogen_dump_auto(tmp_path, capsys):
    f = tmp_path / "cache.json"
    f.write_text('{"entries": 3, "hits": 5, "misses": 1, "hit_rate": 0.833333}')
    assert main(["snapshot", "--from-file", str(f)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["backend"] == "halogen"
    assert out["common"] == {"entries": 3, "hits": 5, "misses": 1, "lookups": 6}
    assert out["raw"]["hit_rate"] == 0.833333


def test_snapshot_command_rejects_unknown_backend(tmp_path, capsys):
    f = tmp_path / "m.prom"
    f.write_text("x 1\n")
    assert main(["snapshot", "--from-file", str(f), "--backend", "tgi"]) == 2
    assert "unknown backend" in capsys.readouterr().err
