"""``kvreplay serve-sim``: prints its URL, binds loopback by default, serves on uvloop."""

from __future__ import annotations

import asyncio
import contextlib
import io

import aiohttp
import pytest
import uvloop

from kvreplay.cli import build_parser, main
from kvreplay.commands import serve_sim


def parse(*argv: str):
    return build_parser().parse_args(["serve-sim", *argv])


async def serve_and_probe(args, probe):
    ready = asyncio.Event()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        task = asyncio.ensure_future(serve_sim.serve(args, ready=ready))
        await asyncio.wait_for(ready.wait(), 10)
    url = out.getvalue().split("listening on ")[1].split()[0]
    try:
        return url, await probe(url)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_prints_url_and_serves_on_uvloop():
    args = parse("--port", "0", "--time-scale", "0", "--cache", "radix", "--device-blocks", "64", "--host-rows", "4")

    async def probe(url):
        async with aiohttp.ClientSession() as s:
            async with s.post(url + "/v1/chat/completions",
                              json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}) as r:
                body = await r.json()
            async with s.get(url + "/metrics") as r:
                text = await r.text()
        return body, text

    url, (body, text) = uvloop.run(asyncio.wait_for(serve_and_probe(args, probe), 30))
    assert url.startswith("http://127.0.0.1:") and not url.endswith(":0")
    assert body["usage"]["completion_tokens"] == 3
    assert "kvreplay_sim:host_rows_capacity" in text and 'vllm:cache_config_info' in text


def test_duration_exit_and_warning_off_loopback(capsys, monkeypatch):
    assert main(["serve-sim", "--port", "0", "--duration", "0.05", "--time-scale", "0"]) == 0
    captured = capsys.readouterr()
    assert "listening on http://127.0.0.1:" in captured.out and "not loopback" not in captured.err
    # Tests bind loopback only: pretend 127.0.0.1 is not loopback to see the warning.
    monkeypatch.setattr(serve_sim, "is_loopback", lambda host: False)
    assert main(["serve-sim", "--port", "0", "--duration", "0.05"]) == 0
    assert "not loopback" in capsys.readouterr().err


@pytest.mark.parametrize(("host", "expected"), [("127.0.0.1", True), ("127.0.0.2", True), ("::1", True),
                                                ("localhost", True), ("0.0.0.0", False), ("10.1.2.3", False),
                                                ("example.org", False)])
def test_is_loopback(host, expected):
    assert serve_sim.is_loopback(host) is expected


def test_bad_option_is_exit_2(capsys):
    assert main(["serve-sim", "--fault", "nope"]) == 2
    with pytest.raises(SystemExit):
        main(["serve-sim", "--cache", "fifo"])
