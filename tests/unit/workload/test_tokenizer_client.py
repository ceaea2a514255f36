"""``--tokenizer URL`` against stand-ins of vLLM's and llama-server's tokenize endpoints (127.0.0.1, stdlib server).

Both stand-ins share a toy tokenizer with a BOS (id 1, added on request): a token is a
space-led word or a run of other characters (the simulator's pieces), ids given in order
of first sight. The vLLM one takes ``{"prompt"}`` / ``{"messages"}`` and adds the BOS
unless ``add_special_tokens`` is false; the llama-server one takes ``{"content"}``, adds
it only with ``add_special`` and renders chat through ``/apply-template``. With a BOS every
prompt starts with 1 common token (``head_tokens``), which the first block / the group
prefix counts.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kvreplay.errors import ConfigError
from kvreplay.sim.tokenizer import pieces
from kvreplay.workload.synth import SynthSpec, synthesize
from kvreplay.workload.synth_corpus import Length
from kvreplay.workload.token_blocks import TokenBlocks
from kvreplay.workload.tokenizer_client import common_prefix_len, open_tokenizer

BOS = 1


class Toy:
    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.text: dict[int, str] = {BOS: "<s>"}

    def encode(self, text: str, bos: bool) -> list[int]:
        out = [BOS] if bos else []
        for p in pieces(text):
            if p not in self.ids:
                self.ids[p] = len(self.ids) + 10
                self.text[self.ids[p]] = p
            out.append(self.ids[p])
        return out

    def decode(self, ids: list[int]) -> str:
        return "".join(self.text[i] for i in ids)


def template(messages: list[dict]) -> str:
    return "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages) + "<|assistant|>\n"


def handler(kind: str, toy: Toy) -> type[BaseHTTPRequestHandler]:
    class H(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # quiet
            pass

        def reply(self, obj: object, status: int = 200) -> None:
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/v1/models":
                self.reply({"object": "list", "data": [{"id": f"toy-{kind}", "owned_by": kind}]})
            else:
                self.reply({"error": "no"}, 404)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if kind == "vllm" and self.path == "/tokenize":
                if "messages" in body:
                    toks = toy.encode(template(body["messages"]), True)
                elif "prompt" in body:
                    toks = toy.encode(body["prompt"], body.get("add_special_tokens", True))
                else:
                    return self.reply({"error": "prompt or messages"}, 400)
                return self.reply({"tokens": toks, "count": len(toks), "max_model_len": 4096})
            if kind == "vllm" and self.path == "/detokenize":
                return self.reply({"prompt": toy.decode(body["tokens"])})
            if kind.startswith("llama") and self.path == "/tokenize":  # a body without content: no tokens
                return self.reply({"tokens": toy.encode(body["content"], body.get("add_special", False))
                                   if "content" in body else []})
            if kind.startswith("llama") and self.path == "/detokenize":
                return self.reply({"content": toy.decode(body["tokens"])})
            if kind == "llama" and self.path == "/apply-template":
                return self.reply({"prompt": template(body["messages"])})
            if self.path == "/v1/chat/completions":  # what the template costs, as usage says
                n = len(toy.encode(template(body["messages"]), True))
                return self.reply({"choices": [], "usage": {"prompt_tokens": n, "completion_tokens": 1}})
            self.reply({"error": "no"}, 404)

    return H


def _serve(kind: str) -> tuple[ThreadingHTTPServer, threading.Thread, Toy]:
    toy = Toy()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler(kind, toy))
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    return srv, t, toy


@pytest.fixture(params=["vllm", "llama"])
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, str, Toy]]:
    srv, t, toy = _serve(request.param)
    try:
        yield request.param, f"http://127.0.0.1:{srv.server_address[1]}", toy
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(timeout=5)


def test_dialect_model_and_counts(server) -> None:
    kind, url, _ = server
    tok = open_tokenizer(url + "/v1/")  # an OpenAI base URL works too
    assert (tok.dialect, tok.model) == (kind, f"toy-{kind}")
    assert tok.encode("Hello, world!") == tok.prompt_ids("Hello, world!")[1:] and tok.prompt_ids("x")[0] == BOS
    assert tok.decode(tok.encode("Hello, world!")) == "Hello, world!"
    assert len(tok.chat_ids([{"role": "user", "content": "Hi"}])) == 1 + len(pieces(template(
        [{"role": "user", "content": "Hi"}])))


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_synth_exact_in_the_servers_tokens_with_a_bos(server, api) -> None:
    kind, url, toy = server
    tok = open_tokenizer(url)
    spec = SynthSpec(requests=6, isl=Length(120), osl=Length(4), model=tok.model or "", prefix_tokens=40,
                     prefix_groups=2, api=api)
    res = synthesize(spec, tok)
    assert res.manifest["head_tokens"] == (1 if api == "completions" else 5)  # BOS (+ "<|", "user", "|>", "\n")
    bodies = [json.loads(b) for b in res.bodies]
    ids = [toy.encode(b["prompt"], True) if api == "completions" else toy.encode(template(b["messages"]), True)
           for b in bodies]
    assert [len(x) for x in ids] == [120] * 6
    assert [b.get("min_tokens") for b in bodies] == ([4] * 6 if kind == "vllm" else [None] * 6)
    for i in (2, 4):
        assert ids[i][:40] == ids[0][:40] and ids[i][40] != ids[0][40]
    assert ids[3][:40] == ids[1][:40] and ids[1][:40] != ids[0][:40]
    assert [r["shared_tokens"] for r in res.manifest["bodies"]] == [0, res.manifest["head_tokens"], 40, 40, 40, 40]


def test_token_blocks_count_the_bos_in_the_first_block(server) -> None:
    _, url, toy = server
    blocks = TokenBlocks(open_tokenizer(url), 16, chat=False)
    text = blocks.prompt((7, 8, 9), 40)
    blocks.check(text, 40, "line 1")
    ids = toy.encode(text, True)
    assert len(ids) == 40 and ids[0] == BOS  # the server's block 0 is BOS + 15 words of block 7
    assert toy.encode(blocks.prompt((7, 8, 5), 40), True)[:32] == ids[:32]


def test_unreachable_and_bad_specs_name_the_flag_without_credentials() -> None:
    with pytest.raises(ConfigError, match=r"--tokenizer http://\[REDACTED\]@127.0.0.1:9/: GET /v1/models failed"):
        open_tokenizer("http://me:s3cretpass@127.0.0.1:9/")
    with pytest.raises(ConfigError, match="neither an http"):
        open_tokenizer("no-such-tokenizer.json")


def test_a_server_that_cannot_render_its_template_is_said_with_the_overhead_usage_shows() -> None:
    srv, t, toy = _serve("llama-old")  # llama's endpoints without /apply-template
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        tok = open_tokenizer(url)  # found as llama: /tokenize takes content
        assert tok.dialect == "llama"
        # "Hello world": 2 tokens; billed: BOS "<|" "user" "|>" "\n" + 2 + "\n" "<|" "assist" "ant" "|>" "\n" = 13
        with pytest.raises(ConfigError, match=r"cannot render its chat template \(POST /apply-template answered "
                                              r"HTTP 404.*a 2-token message was billed 13 prompt tokens: the "
                                              r"template adds 11 \(measured from usage.prompt_tokens\)"):
            tok.chat_ids([{"role": "user", "content": "x"}])
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(timeout=5)


class SpacePrefixToy:
    """A tokenizer that puts a space before every text it encodes, as SentencePiece's "add space
    prefix" does (llama-server's tiny GGUF): a token is a space-led lower-case word, a lone space
    (before anything else: a capital, a digit), or a run of other characters; decoding keeps the
    leading space (``decode(encode("word")) == " word"``)."""

    model = "toy-spm"
    dialect = "llama"

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.text: dict[int, str] = {BOS: ""}

    def encode(self, text: str) -> list[int]:
        import re

        out = []
        for p in re.findall(r" ?[a-z]+| |[^ a-z]+", " " + text):
            out.append(self.ids.setdefault(p, len(self.ids) + 10))
            self.text[self.ids[p]] = p
        return out

    def decode(self, ids) -> str:
        return "".join(self.text[i] for i in ids)

    def prompt_ids(self, text: str) -> list[int]:
        return [BOS, *self.encode(text)]

    def chat_ids(self, messages: list[dict]) -> list[int]:
        return self.prompt_ids(template(messages))

    def identity(self) -> dict:
        return {"dialect": self.dialect, "model": self.model}


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_synth_with_a_space_prefixing_tokenizer_shares_exactly_the_prefix(api) -> None:
    # encode(" " + text) starts with a lone space token: kept, every member's own text would start
    # on it (one token more shared than designed), and the third body found no start of its own
    tok = SpacePrefixToy()
    spec = SynthSpec(requests=6, isl=Length(60), osl=Length(4), model="toy-spm", prefix_tokens=30,
                     prefix_groups=2, api=api)
    res = synthesize(spec, tok)
    bodies = [json.loads(b) for b in res.bodies]
    ids = [tok.prompt_ids(b["prompt"]) if api == "completions" else tok.chat_ids(b["messages"]) for b in bodies]
    assert [len(x) for x in ids] == [60] * 6
    if api == "completions":  # the head is the BOS only: "the" starts on a word of its own, "Alpha" on a space
        assert res.manifest["head_tokens"] == 1 == common_prefix_len(ids[0], ids[1])
    for i in range(2, 6):
        for j in range(i % 2, i, 2):  # every earlier body of its group: exactly the 30 prefix tokens
            assert ids[i][:30] == ids[j][:30] and ids[i][30] != ids[j][30], (i, j)
    assert [r["shared_tokens"] for r in res.manifest["bodies"]][2:] == [30] * 4
