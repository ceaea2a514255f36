"""The backend-family registry: a toy family added at run time through the registry alone
is selectable (``--backend``, help text), detected, and its counters read."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from kvreplay.backends import (
    BACKEND_NAMES,
    BUILTIN_FAMILIES,
    BackendFamily,
    PrometheusBackend,
    backend_names,
    detect,
    detect_text,
    families,
    load_profile,
    make_backend,
    parse_dump,
    register_family,
    unregister_family,
)
from kvreplay.cli import main
from kvreplay.errors import ConfigError

JSON = "application/json"
TOY_PROFILE = """
name = "toyllm"
description = "a toy server's /metrics"
[common.prompt_tokens]
series = ["toyllm:prompt_tokens_total"]
unit = "tokens"
[common.hit_tokens]
series = ["toyllm:cached_tokens_total"]
unit = "tokens"
"""
TOY_METRICS = ("# TYPE toyllm:prompt_tokens_total counter\ntoyllm:prompt_tokens_total 120\n"
               "# TYPE toyllm:cached_tokens_total counter\ntoyllm:cached_tokens_total 48\n")


@pytest.fixture
def toy(tmp_path):
    """A family in one "module" (this fixture) plus one profile (a TOML file)."""
    profile_path = tmp_path / "toyllm.toml"
    profile_path.write_text(TOY_PROFILE)

    class ToyBackend(PrometheusBackend):
        name = "toyllm"

        def __init__(self, base_url, session, profile=None):
            super().__init__(base_url, session, profile or load_profile(profile_path))

    async def serves_toy(session, base_url):
        from kvreplay.backends._http import fetch_json

        return isinstance(await fetch_json(session, base_url, "/toy"), dict)

    fam = register_family(BackendFamily(name="toyllm", adapter=ToyBackend, summary="a toy", profile=None,
                                        series_prefix="toyllm:", probe=serves_toy, probe_rank=60))
    yield fam
    unregister_family("toyllm")
    assert "toyllm" not in backend_names()


def test_builtin_families_in_order():
    assert backend_names()[:6] == ("halogen", "vllm", "sglang", "llamacpp", "prometheus", "openai")
    assert tuple(sorted(f.name for f in BUILTIN_FAMILIES)) == BACKEND_NAMES
    assert [f.name for f in BUILTIN_FAMILIES if not f.counters] == ["openai"]  # the probe reads none there
    assert [f.name for f in BUILTIN_FAMILIES if f.needs_profile] == ["prometheus"]
    assert [(f.name, f.series_prefix) for f in BUILTIN_FAMILIES if f.series_prefix] == [
        ("vllm", "vllm:"), ("sglang", "sglang:"), ("llamacpp", "llamacpp:")]  # matched in this order
    with pytest.raises(ValueError, match="already registered"):
        register_family(BUILTIN_FAMILIES[0])
    with pytest.raises(ValueError, match="built in"):
        unregister_family("vllm")
    with pytest.raises(ValueError, match="bad backend family name"):
        register_family(BackendFamily(name="auto", adapter=PrometheusBackend, summary=""))


def _help(cmd: str) -> str:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), pytest.raises(SystemExit):
        main([cmd, "--help"])
    return " ".join(buf.getvalue().split())


def test_a_toy_family_is_selectable_detected_and_read(toy, serve):
    assert backend_names()[-1] == "toyllm" and families()[-1] is toy
    # the CLI lists it (help of every command taking --backend)
    assert "auto, none, halogen, vllm, sglang, llamacpp, prometheus, openai, toyllm" in _help("run")
    assert "openai, toyllm" in _help("snapshot")
    b = make_backend("toyllm", "http://127.0.0.1:1", None)
    assert type(b).__name__ == "ToyBackend" and b.profile.name == "toyllm"
    with pytest.raises(ConfigError, match="one of: auto, halogen, llamacpp, openai, prometheus, sglang, toyllm, vllm"):
        make_backend("tgi", "http://x", None)

    # a saved dump: told by its series prefix, parsed through its profile
    assert detect_text(TOY_METRICS) == "toyllm"
    name, _ident, _raw, common, _started = parse_dump(TOY_METRICS)
    assert (name, common) == ("toyllm", {"prompt_tokens": 120.0, "hit_tokens": 48.0})

    async def detect_at(routes):
        async with serve(routes) as (url, _hits), aiohttp.ClientSession() as session:
            return await detect(url, session)

    # a live server: by its /metrics series, and with metrics off by its own probe (after /metrics)
    assert asyncio.run(detect_at({("GET", "/metrics"): (200, TOY_METRICS)})) == "toyllm"
    assert asyncio.run(detect_at({("GET", "/toy"): (200, "{}", JSON)})) == "toyllm"
    assert asyncio.run(detect_at({})) == "openai"  # nothing recognised: the fallback


def test_kvreplay_snapshot_reads_the_toy_familys_counters(toy, serve, capsys):
    async def body():
        async with serve({("GET", "/metrics"): (200, TOY_METRICS)}) as (url, _hits):
            return await asyncio.to_thread(main, ["snapshot", "--target", url, "--backend", "auto"])

    assert asyncio.run(body()) == 0
    got = json.loads(capsys.readouterr().out)
    assert (got["backend"], got["common"]) == ("toyllm", {"prompt_tokens": 120.0, "hit_tokens": 48.0})
    assert got["units"] == {"prompt_tokens": "tokens", "hit_tokens": "tokens"}
