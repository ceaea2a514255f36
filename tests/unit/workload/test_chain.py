"""Prefix chains: both twins agree, and chains share exactly the shared prefix.

Expected links are written from the definition (BLAKE2b-128 chained over the
exact message bytes, seeded by the kind and the ``tools`` bytes) with hashlib
directly, and spans are located with ``bytes.index`` on literal substrings.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvreplay.errors import WorkloadError
from kvreplay.workload import __all__ as workload_all
from kvreplay.workload import _chain, chain

NO_EXT = os.environ.get("KVREPLAY_NO_EXTENSIONS", "") == "1"
TWINS = ["pure"] if NO_EXT else ["native", "pure"]


@pytest.fixture(params=TWINS)
def impl(request):
    if request.param == "pure":
        return _chain
    return importlib.import_module("kvreplay.workload._hash_c")


def H(*parts: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for p in parts:
        h.update(p)
    return h.digest()


SEED_CHAT = H(b"kvreplay/prefix-chain/v1/chat")
SEED_COMPLETIONS = H(b"kvreplay/prefix-chain/v1/completions")

SYS = b'{"role": "system", "content": "You are terse."}'
U1 = b'{"role":"user","content":"Hi \\"there\\" {[}]"}'
A1 = b'{"role":"assistant","content":[{"type":"text","text":"Hello"}]}'
U2 = b'{"role":"user","content":"Bye"}'


def chat(*msgs: bytes, extra: bytes = b'"model":"m","stream":true') -> bytes:
    return b'{' + extra + b',"messages": [' + b" ,\n ".join(msgs) + b'],"max_tokens":8}'


def test_public_surface():
    assert workload_all == sorted(workload_all, key=lambda n: (not n.isupper(), n))
    assert ("pure" if NO_EXT else "native") == chain.IMPLEMENTATION
    if not NO_EXT:
        assert chain.prefix_chain is importlib.import_module("kvreplay.workload._hash_c").prefix_chain


def test_spans_are_the_exact_message_bytes(impl):
    raw = chat(SYS, U1, A1)
    spans = impl.body_spans(raw)
    assert spans.messages == tuple((raw.index(m), raw.index(m) + len(m)) for m in (SYS, U1, A1))
    assert spans.prompt is None and spans.tools is None


def test_chat_links_from_the_definition(impl):
    raw = chat(SYS, U1)
    c = impl.prefix_chain(raw)
    l0 = H(H(SEED_CHAT, b""), SYS)
    assert c.kind == "chat"
    assert c.links == (l0, H(l0, U1))
    assert c.ends == (len(SYS), len(SYS) + len(U1))


def test_tools_fold_into_the_seed(impl):
    tools = b'[{"type":"function","function":{"name":"f"}}]'
    raw = chat(SYS, extra=b'"tools": ' + tools)
    assert impl.body_spans(raw).tools == (raw.index(tools), raw.index(tools) + len(tools))
    assert impl.prefix_chain(raw).links == (H(H(SEED_CHAT, tools), SYS),)
    assert impl.prefix_chain(raw).shared(impl.prefix_chain(chat(SYS))) == 0


def test_sharing_semantics(impl):
    base = impl.prefix_chain(chat(SYS, U1, A1, U2))
    # Same first three messages; other keys, their order and the separators differ.
    other = impl.prefix_chain(
        b'{"messages":[' + SYS + b"," + U1 + b"," + A1 + b',{"role":"user","content":"Other"}],"model":"x"}')
    assert base.shared(other) == 3
    assert base.links[:3] == other.links[:3] and base.links[3] != other.links[3]
    # A strict prefix-extension (multi-turn) shares all of the shorter chain.
    assert base.shared(impl.prefix_chain(chat(SYS, U1))) == 2
    # The first message differs by one space inside the object: nothing shared.
    assert base.shared(impl.prefix_chain(chat(SYS.replace(b": ", b":"), U1, A1, U2))) == 0
    # Identical bodies share everything.
    assert base.shared(impl.prefix_chain(chat(SYS, U1, A1, U2))) == 4


def test_prompt_blocks(impl):
    prompt = "Shall I compare thee to a summer's day? " * 70  # 2800 bytes
    raw = orjson.dumps({"model": "m", "prompt": prompt, "max_tokens": 4})
    c = impl.prefix_chain(raw, block_bytes=1024)
    p = prompt.encode()
    assert impl.body_spans(raw).prompt == (raw.index(p), raw.index(p) + len(p))
    l0 = H(SEED_COMPLETIONS, p[:1024])
    l1 = H(l0, p[1024:2048])
    assert c.kind == "completions"
    assert c.links == (l0, l1, H(l1, p[2048:]))
    assert c.ends == (1024, 2048, 2800)
    longer = impl.prefix_chain(orjson.dumps({"prompt": prompt[:2500] + "X" * 600}), block_bytes=1024)
    assert c.shared(longer) == 2


def test_prompt_list_and_escapes(impl):
    raw = b'{"prompt":[1,2,3],"model":"prompt"}'
    assert impl.body_spans(raw).prompt == (10, 17)
    raw = b'{"model":"prompt","prompt":"a\\"b"}'
    assert impl.body_spans(raw).prompt == (28, 32)
    assert impl.prefix_chain(raw).links == (H(SEED_COMPLETIONS, b'a\\"b'),)


def test_last_duplicate_key_wins(impl):
    raw = b'{"messages":[' + SYS + b'],"messages":[' + U1 + b"]}"
    assert impl.body_spans(raw).messages == ((raw.index(U1), raw.index(U1) + len(U1)),)


def test_nested_keys_ignored(impl):
    raw = b'{"meta":{"messages":[{"x":1}],"prompt":"p"},"messages":[' + U2 + b"]}"
    spans = impl.body_spans(raw)
    assert spans.messages == ((raw.index(U2), raw.index(U2) + len(U2)),) and spans.prompt is None


def test_not_a_request(impl):
    with pytest.raises(WorkloadError):
        impl.prefix_chain(b'{"input":"x"}')
    with pytest.raises(WorkloadError):
        impl.prefix_chain(b'{"prompt":"x"}', block_bytes=0)


# ------------------------------------------------------------------ parity
_msg = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool"]),
     "content": st.text(max_size=30)
     | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=10)}), max_size=2)}
)


@st.composite
def _body(draw) -> bytes:
    obj: dict = {}
    if draw(st.booleans()):
        obj["model"] = draw(st.sampled_from(["m", "messages", "prompt", "tools"]))
    kind = draw(st.integers(0, 2))
    if kind == 0:
        obj["messages"] = draw(st.lists(_msg, min_size=1, max_size=5))
    elif kind == 1:
        obj["prompt"] = draw(st.text(max_size=3000) | st.lists(st.integers(0, 50000), max_size=20))
    else:
        obj["messages"] = draw(st.lists(_msg, min_size=1, max_size=3))
        obj["tools"] = [{"type": "function", "function": {"name": draw(st.text(max_size=5))}}]
    if draw(st.booleans()):
        obj["stream_options"] = {"include_usage": True, "messages": [1]}
    items = list(obj.items())
    if draw(st.booleans()):
        items.reverse()
    style = draw(st.integers(0, 2))
    d = dict(items)
    if style == 0:
        return orjson.dumps(d)
    if style == 1:
        return json.dumps(d).encode()
    return json.dumps(d, indent=draw(st.integers(0, 3)), ensure_ascii=False).encode()


@pytest.mark.skipif(NO_EXT, reason="pure twin only")
@settings(max_examples=200, deadline=None)
@given(raw=_body(), block=st.integers(1, 700))
def test_twins_agree_on_generated_bodies(raw, block):
    native = importlib.import_module("kvreplay.workload._hash_c")
    assert native.body_spans(raw) == _chain.body_spans(raw)
    assert native.prefix_chain(raw, block_bytes=block) == _chain.prefix_chain(raw, block_bytes=block)
    # The spans really are the messages: each parses back to the message object.
    obj = orjson.loads(raw)
    spans = _chain.body_spans(raw)
    if "messages" in obj:
        assert [orjson.loads(raw[a:b]) for a, b in spans.messages] == obj["messages"]


@pytest.mark.skipif(NO_EXT, reason="pure twin only")
@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.sampled_from([b"{", b"}", b"[", b"]", b'"', b"\\", b":", b",", b" ", b'"messages"',
                                       b'"prompt"',
                                       b'"tools"', b'"a"', b"1", b"\n"]), max_size=40))
def test_twins_agree_on_byte_soup(parts):
    native = importlib.import_module("kvreplay.workload._hash_c")
    raw = b"".join(parts)
    assert native.body_spans(raw) == _chain.body_spans(raw)


def test_facade_env_switch_and_fallback(monkeypatch):
    import sys

    import kvreplay.workload

    try:
        monkeypatch.setenv("KVREPLAY_NO_EXTENSIONS", "1")
        assert importlib.reload(chain).IMPLEMENTATION == "pure"
        monkeypatch.delenv("KVREPLAY_NO_EXTENSIONS")
        monkeypatch.setitem(sys.modules, "kvreplay.workload._hash_c", None)
        monkeypatch.delattr(kvreplay.workload, "_hash_c", raising=False)
        with pytest.warns(RuntimeWarning, match="pure-Python twin"):
            mod = importlib.reload(chain)
        assert mod.IMPLEMENTATION == "pure" and mod.prefix_chain is _chain.prefix_chain
    finally:
        monkeypatch.undo()
        importlib.reload(chain)
