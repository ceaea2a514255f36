"""Helpers for the real_server tests, independent of kvreplay's own parsing."""

from __future__ import annotations

import hashlib
import json
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import orjson

from kvreplay.workload.sessions import Turn, write_sessions

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def scrape(url: str) -> dict[str, float]:
    """GET /metrics (text format) and return {name{labels}: value} for every sample."""
    req = urllib.request.Request(url + "/metrics", headers={"Accept": "text/plain"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        text = resp.read().decode("utf-8")
    out = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and not line.startswith("#"):
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def series(samples: dict[str, float], name: str) -> float:
    """Sum of the samples of one series name over its label sets."""
    return sum(v for k, v in samples.items() if k == name or k.startswith(name + "{"))


def post_json(url: str, path: str, obj: dict) -> dict:
    req = urllib.request.Request(
        url + path, data=json.dumps(obj).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def kvreplay(*args: str, timeout_s: float = 600) -> subprocess.CompletedProcess:
    """Run the kvreplay CLI of this interpreter as a subprocess (bounded)."""
    return subprocess.run(
        [sys.executable, "-m", "kvreplay", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def read_records(out: Path) -> list[dict]:
    return [
        json.loads(line)
        for line in (out / "records.jsonl").read_text().splitlines()
        if line.strip()
    ]


def lcp(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


# `kvreplay probe` in a subprocess, with the probe's send_body wrapped so that the
# exact bytes of every leg are kept (by SHA-256): the tests then measure the
# shared prefix of the cold and warm legs with the server's own tokenizer.
_PROBE_CAPTURE = """
import hashlib, json, sys
import kvreplay.experiments.probe.legs as probe
from kvreplay.cli import main

sink = open(sys.argv[1], "a", encoding="utf-8")
real_send = probe.send_body

async def send_body(session, url, raw, **kw):
    sink.write(json.dumps({"sha256": hashlib.sha256(raw).hexdigest(), "raw": raw.decode()}) + "\\n")
    sink.flush()
    return await real_send(session, url, raw, **kw)

probe.send_body = send_body
sys.exit(main(sys.argv[2:]))
"""


def kvreplay_probe(out: Path, *args: str, timeout_s: float = 600):
    """Run ``kvreplay probe --out OUT ARGS``; return (process, verdict, legs, bodies by sha256)."""
    out.mkdir(parents=True, exist_ok=True)
    bodies_path = out / "bodies.jsonl"
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE_CAPTURE, str(bodies_path), "probe", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if proc.returncode != 0:
        return proc, None, [], {}
    verdict = json.loads((out / "verdict.json").read_text())
    legs = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines() if x.strip()]
    bodies = {}
    for line in bodies_path.read_text().splitlines():
        row = json.loads(line)
        bodies[row["sha256"]] = json.loads(row["raw"])
    return proc, verdict, legs, bodies


# A multi-turn conversation replayed with captured and with live history (issue 34).
# Every reply is forced to CONV_REPLY_TOKENS copies of one token (logit_bias +100 on the
# token the server's own tokenizer gives CONV_WORD inside an assistant message, greedy),
# so what the server generated for a turn (G) is known exactly, and with it what it has
# computed after the turn: that turn's prompt T followed by G minus its last token (the
# last sampled token is never fed back). The captured replies differ from G from their
# first token on.
CONV_WORD = " the"
CONV_REPLY_TOKENS = 160  # more than one 128-token vLLM block
CONV_TURNS = 3


def conversation_reply_token(tokens) -> int:
    """The token id the server's tokenizer gives CONV_WORD inside an assistant message.

    ``tokens(messages)`` returns the server's prompt tokens for chat messages (with the
    generation prompt when the last message is a user's).
    """
    user = {"role": "user", "content": "hi"}
    base = tokens([user])
    longer = tokens([user, {"role": "assistant", "content": CONV_WORD * 4}, user])
    assert longer[: len(base)] == base, "the history does not extend the prompt token-wise"
    reply = longer[len(base) : len(base) + 4]
    assert len(set(reply)) == 1, f"{CONV_WORD!r} x4 is not one token repeated: {reply}"
    return reply[0]


def conversation_bodies(marker: str, reply_token: int) -> list[dict]:
    """The retained bodies of one session of CONV_TURNS turns; ``marker`` opens the system message."""
    system = f"{marker} conversation. " + "Answer every question about the weather in the old harbour town. " * 6
    msgs: list[dict] = [{"role": "system", "content": system}]
    out = []
    for k in range(CONV_TURNS):
        msgs = [*msgs, {"role": "user", "content": f"Question {k}: what will the wind do after noon on day {k}?"}]
        out.append({"model": "tiny", "messages": msgs, "max_tokens": CONV_REPLY_TOKENS, "temperature": 0,
                    "logit_bias": {str(reply_token): 100}, "stream": True,
                    "stream_options": {"include_usage": True}})
        msgs = [*msgs, {"role": "assistant", "content": f"Captured answer {k}: calm seas and a light breeze."}]
    return out


def run_conversation(folder: Path, bodies: list[dict], url: str, backend: str, history: str) -> list[dict]:
    """Write the bodies as a one-session workload, replay it at C1 with ``--history``; its records by turn."""
    folder.mkdir(parents=True)
    for i, b in enumerate(bodies):
        (folder / f"{i:03d}.json").write_text(json.dumps(b))
    write_sessions(folder, [Turn(i, "conv", i, 0.0) for i in range(len(bodies))])
    out = folder.parent / f"{folder.name}-run"
    proc = kvreplay("run", str(folder), "--target", url, "--backend", backend, "--phase", "conv:forward:c1",
                    "--history", history, "--out", str(out), "--report", "md")
    assert proc.returncode == 0, proc.stderr[-4000:]
    recs = sorted(read_records(out), key=lambda r: r["turn"])
    assert [(r["session"], r["turn"]) for r in recs] == [("conv", k) for k in range(len(bodies))]
    summary = json.loads((out / "summary.json").read_text())
    by_turn = summary["phases"][0]["by_turn"]
    assert [(t["turn"], t["cached_tokens"]) for t in by_turn] == [
        (r["turn"], r["usage"]["cached_tokens"]) for r in recs]
    return recs


def sent_conversation(bodies: list[dict], recs: list[dict], history: str, tokens) -> list[list[int]]:
    """Check each turn's reply and sent bytes; return the server's tokens of each turn's sent prompt.

    In live history the assistant messages of earlier turns are the replies this server
    returned; the bytes rebuilt here must hash to the record's ``sent_sha256``.
    """
    reply = CONV_WORD * CONV_REPLY_TOKENS
    out = []
    for k, (body, r) in enumerate(zip(bodies, recs, strict=True)):
        assert r["status"] == "ok" and r["finish_reason"] == "length", r
        assert r["usage"]["completion_tokens"] == CONV_REPLY_TOKENS, r["usage"]
        assert r["text_head"] == reply[: len(r["text_head"])] and len(r["text_head"]) >= len(CONV_WORD) * 8, r
        msgs = body["messages"]
        if history == "live":
            msgs = [{**m, "content": reply} if m["role"] == "assistant" else m for m in msgs]
            sent = orjson.dumps({**body, "messages": msgs})
            assert r["history_differs"] is (k > 0)
            if k:
                assert r["sent_sha256"] == hashlib.sha256(sent).hexdigest(), k
        t = tokens(msgs)
        assert r["usage"]["prompt_tokens"] == len(t), (k, r["usage"])
        out.append(t)
    return out


def computed_after(prompt: list[int], reply_token: int) -> list[int]:
    """What the server computed for a turn: its prompt and its reply minus the last sampled token."""
    return prompt + [reply_token] * (CONV_REPLY_TOKENS - 1)


class Recorder:
    """``kvreplay record --upstream URL --listen 127.0.0.1:PORT --out W`` as a subprocess.

    ``url`` is the proxy's (from its first stdout line); ``stop()`` sends SIGINT and
    returns (exit status, stderr), bounded.
    """

    def __init__(self, upstream: str, out: Path, port: int) -> None:
        self.err_path = out.parent / (out.name + ".record.stderr")
        self._err = open(self.err_path, "wb")  # noqa: SIM115 - the child writes to it until stop()
        self.p = subprocess.Popen(
            [sys.executable, "-m", "kvreplay", "record", "--upstream", upstream,
             "--listen", f"127.0.0.1:{port}", "--out", str(out)],
            stdout=subprocess.PIPE, stderr=self._err,
        )
        line = self.p.stdout.readline().decode()  # type: ignore[union-attr]
        if "listening on " not in line:
            self.p.kill()
            raise AssertionError(f"kvreplay record did not start: {line!r} {self.err_path.read_text()}")
        self.url = line.split("listening on ")[1].split()[0]

    def stop(self, timeout_s: float = 30) -> tuple[int, str]:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGINT)
        try:
            rc = self.p.wait(timeout=timeout_s)
        finally:
            if self.p.poll() is None:
                self.p.kill()
                self.p.wait()
            self.p.stdout.close()  # type: ignore[union-attr]
            self._err.close()
        return rc, self.err_path.read_text(errors="replace")


# `kvreplay synth` sized through a real server's tokenizer, then `--check` (issue 46): 6 bodies of exactly
# SYNTH_ISL prompt tokens and SYNTH_OSL output tokens, in 2 prefix groups of SYNTH_PREFIX tokens dealt in turn
# (body i in group i % 2; bodies 0 and 1 lead their groups). The check replays them once, in order, at C1
# against the same server. SYNTH_PREFIX is over half of a prompt, so llama-server always keeps a
# group's slot (it saves a slot to its host prompt cache when the match keeps under half of it), and not
# a whole number of vLLM's 128-token blocks, so vLLM's hit is visibly rounded down.
SYNTH_ISL, SYNTH_OSL, SYNTH_PREFIX, SYNTH_BODIES = 400, 4, 300, 6


def synth_check(folder: Path, url: str, api: str, seed: int) -> tuple[list[dict], dict, list[dict], str]:
    """``kvreplay synth --tokenizer URL --api API ... --check`` in a subprocess.

    Returns:
        The bodies (in workload order), the manifest, the check run's records in body order
        and what the command printed.
    """
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{api}.jsonl"
    proc = kvreplay("synth", "--tokenizer", url, "--out", str(out), "--api", api, "--seed", str(seed),
                    "--requests", str(SYNTH_BODIES), "--isl", str(SYNTH_ISL), "--osl", str(SYNTH_OSL),
                    "--prefix-tokens", str(SYNTH_PREFIX), "--prefix-groups", "2", "--check", timeout_s=300)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-4000:])
    bodies = [json.loads(line) for line in out.read_bytes().splitlines()]
    manifest = json.loads((folder / f"{api}.synth.json").read_text())
    recs = sorted(read_records(folder / f"{api}.check"), key=lambda r: r["body_index"])
    assert [r["body_index"] for r in recs] == list(range(SYNTH_BODIES)), recs
    return bodies, manifest, recs, proc.stdout


def assert_synth_design(bodies: list[dict], manifest: dict, recs: list[dict], tokens: list[list[int]],
                        api: str) -> int:
    """Exact lengths and the designed sharing, measured on the server's own tokens of the bytes sent.

    ``tokens[i]`` is the server's tokenization of body i's prompt (its ``/tokenize``, and for chat
    its rendered template). Every prompt is exactly SYNTH_ISL tokens in the server's tokenizer,
    in the manifest and in the usage the server billed; every reply SYNTH_OSL tokens (the length
    forced, ``finish_reason`` length). A group member shares exactly SYNTH_PREFIX tokens with
    every earlier body of its group, and with a body of the other group only the head every
    prompt starts with (BOS, the template's opening). Returns that head (tokens).
    """
    head = manifest["head_tokens"]
    assert lcp(tokens[0], tokens[1]) == head < 16, (head, tokens[0][:20], tokens[1][:20])
    assert [(r["group"], r["leader"]) for r in manifest["bodies"]] == [
        (i % 2, i < 2) for i in range(SYNTH_BODIES)]
    for i, (body, rec, t) in enumerate(zip(bodies, recs, tokens, strict=True)):
        assert ("messages" in body) is (api == "chat") and body["max_tokens"] == SYNTH_OSL, body
        assert body["ignore_eos"] is True and body["stream_options"] == {"include_usage": True}
        assert len(t) == SYNTH_ISL == manifest["bodies"][i]["prompt_tokens"], (i, len(t))
        assert rec["status"] == "ok" and rec["http_status"] == 200, rec
        usage = rec["usage"]
        assert (usage["prompt_tokens"], usage["completion_tokens"]) == (SYNTH_ISL, SYNTH_OSL), (i, usage)
        assert rec["finish_reason"] == "length", (i, rec["finish_reason"])  # no early stop
        for j in range(i):
            assert lcp(t, tokens[j]) == (SYNTH_PREFIX if i % 2 == j % 2 else head), (i, j)
    return head


def synth_check_lines(manifest: dict, cached: list[int]) -> list[str]:
    """The per-group lines ``synth --check`` must print: bodies, designed shared, cached (summed)."""
    lines = []
    for g in (0, 1):
        rows = [r for r in manifest["bodies"] if r["group"] == g]
        got = sum(cached[r["body"]] for r in rows)
        lines.append(f"  {g:<8} {len(rows):>6}  {sum(r['shared_tokens'] for r in rows):>15}  {got:>6}")
    return lines
