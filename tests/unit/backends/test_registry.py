import pytest

import kvreplay.backends as backends
from kvreplay.backends import BACKEND_NAMES, detect_text, make_backend, parse_dump
from kvreplay.errors import BackendError, ConfigError
from kvreplay.runner.backend import Backend


def test_public_surface_is_sorted_and_importable():
    assert backends.__all__ == sorted(backends.__all__)
    for name in backends.__all__:
        assert hasattr(backends, name), name


def test_names():
    assert BACKEND_NAMES == ("halogen", "llamacpp", "openai", "prometheus", "sglang", "vllm")


@pytest.mark.parametrize("name", ["halogen", "llamacpp", "openai", "sglang", "vllm"])
def test_every_adapter_satisfies_the_protocol(name):
    b = make_backend(name, "http://x", None)
    assert isinstance(b, Backend)
    assert b.name == name


def test_prometheus_needs_a_profile_and_takes_builtin_or_file():
    with pytest.raises(ConfigError, match="profile"):
        make_backend("prometheus", "http://x", None)
    b = make_backend("prometheus", "http://x", None, profile="vllm")
    assert isinstance(b, Backend) and b.profile.name == "vllm"


def test_unknown_backend():
    with pytest.raises(ConfigError, match="unknown backend"):
        make_backend("tgi", "http://x", None)


def test_detect_text():
    assert detect_text('  {"hits": 1}') == "halogen"
    assert detect_text("# HELP x\nllamacpp:prompt_tokens_total 1\n") == "llamacpp"
    with pytest.raises(BackendError):
        detect_text("# HELP vllm:x mentions vllm: only in help\nother 1\n")


def test_parse_dump_openai_is_empty():
    assert parse_dump("anything", "openai") == ("openai", {}, {}, {}, None)


def test_check_empty():
    from kvreplay.backends import check_empty
    from kvreplay.runner.backend import Snapshot

    def snap(**common):
        return Snapshot(taken_ns=0, raw={}, common=common)

    assert check_empty(snap(entries=0, bytes=0, hits=5)) == (True, None)
    assert check_empty(snap(entries=2, bytes=0)) == (False, "cache not empty: entries=2")
    ok, why = check_empty(snap(hits=0, running=0))
    assert ok is False and "no cache occupancy gauge" in why


def test_a_server_that_is_not_there_is_not_called_halogen():
    """Detection against a closed port: the error says the server could not be reached, names halogen's
    /cache only as the probe tried, and names each backend's own endpoint for --backend (issue 45 item 4)."""
    import asyncio
    import socket

    import aiohttp
    import pytest

    from kvreplay.backends import detect
    from kvreplay.errors import BackendError

    with socket.socket() as s:  # a free port, closed again: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = f"http://127.0.0.1:{port}"

    async def go() -> str:
        async with aiohttp.ClientSession() as session:
            return await detect(base, session)

    with pytest.raises(BackendError) as e:
        asyncio.run(go())
    msg = str(e.value)
    assert msg.startswith(f"cannot reach {base} to detect its backend (probing GET {base}/cache: ")
    from kvreplay.backends._family import families

    names = ", ".join(f.name for f in families())  # the registry's order
    assert {"halogen", "vllm", "llamacpp"} <= set(names.split(", "))
    assert msg.endswith(f"With --backend NAME ({names}) kvreplay reads that backend's own endpoints (vllm, "
                        "sglang, llamacpp: /metrics; halogen: /cache)")
