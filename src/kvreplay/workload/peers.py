"""The peers' custom dataset files both ways: AIPerf's single-/multi-turn JSONL, ``vllm bench serve`` custom JSONL.

Schemas (read from the peers' own loaders; a test runs an export through them where
they can be imported):

- **AIPerf** ``--custom-dataset-type single_turn | multi_turn | mooncake_trace``
  (ai-dynamo/aiperf 0.13, ``src/aiperf/dataset/loader/models.py``: ``SingleTurn``,
  ``MultiTurn``, ``MooncakeTrace``; ``docs/reference/conversation-context-mode.md``):

  - ``single_turn``: one request per line, ``{"text": str, "output_length": int,
    "session_id": str, "delay": ms}`` (all but ``text`` optional; lines sharing a
    ``session_id`` are sent one after another, each self-contained);
  - ``multi_turn``: one conversation per line, ``{"session_id": str, "turns": [{"text",
    "delay" (ms), "output_length", "role"}, ...]}``; AIPerf sends turn k as the earlier
    user turns with *its own live replies* between them (``deltas_without_responses``);
    a leading ``role: "system"`` turn becomes the system message of every turn;
  - ``mooncake_trace`` with ``messages``: each line a complete message array sent as it
    is (``message_array_with_responses``), with ``session_id``, ``delay`` (ms) and
    ``output_length``.

- **vLLM** ``vllm bench serve --dataset-name custom --dataset-path F.jsonl``
  (vllm 0.32, ``vllm/benchmarks/datasets/datasets.py``: ``CustomDataset``): one request
  per line, ``{"prompt": str, "output_tokens": int}``; the prompt is sent as one user
  message (chat template applied unless ``--skip-chat-template``); no sessions, and the
  lines are shuffled unless ``--disable-shuffle``.

Import (``kvreplay import aiperf | vllm``) writes chat bodies (``conversation.chat_body``):
``text`` / ``prompt`` is one user message; ``output_length`` / ``output_tokens`` is
``max_tokens`` (else ``--max-tokens``). AIPerf sessions become kvreplay sessions, ``delay``
their think time (ms -> s); a multi-turn body holds the session's earlier user texts back
to back (the file has no replies: AIPerf threads live ones in, as kvreplay's ``live``
history mode does). ``timestamp`` (fixed schedule), images, audio and video are refused.

Export (``kvreplay export aiperf | vllm W --out F``) writes one line per body (vLLM,
AIPerf ``single_turn`` and ``mooncake_trace``) or per session (``multi_turn``). A chat body's
text is its last user message (vLLM: with several messages, every message's text joined
by a blank line, and counted as *flattened*); ``max_tokens`` (or ``max_completion_tokens``)
becomes the output length. Only ``mooncake_trace`` keeps a chat body's whole message
array; no format keeps the other body fields (temperature, ...), which the summary says.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from kvreplay.errors import WorkloadError
from kvreplay.safe_io import atomic_write_bytes
from kvreplay.workload._loader import Body, json_line, load_workload
from kvreplay.workload.conversation import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_MODEL,
    ConversationImport,
    SessionWorkloadWriter,
    chat_body,
)
from kvreplay.workload.importers_capture import _lines
from kvreplay.workload.sessions import MAX_THINK_TIME_S, load_sessions

__all__ = ["AIPERF_TYPES", "Exported", "export_aiperf", "export_vllm", "import_aiperf", "import_vllm"]

AIPERF_TYPES = ("auto", "single_turn", "multi_turn", "mooncake_trace")
"""``--aiperf-type`` choices; ``auto`` is ``multi_turn`` for a workload with sessions, else ``single_turn``."""

_MEDIA = ("image", "images", "audio", "audios", "video", "videos", "image_uuids")


# --- import ------------------------------------------------------------------------------


def _turn_text(t: dict, p: Path, lineno: int, where: str) -> str:
    for key in _MEDIA:
        if t.get(key):
            raise WorkloadError("not supported (text only)", path=p, line=lineno, field=f"{where}{key}")
    if t.get("timestamp") is not None:
        raise WorkloadError("fixed-schedule timestamps are not supported (use delay)", path=p, line=lineno,
                            field=f"{where}timestamp")
    text, texts = t.get("text"), t.get("texts")
    if isinstance(texts, list) and len(texts) == 1 and isinstance(texts[0], str) and text is None:
        text = texts[0]
    if not isinstance(text, str):
        raise WorkloadError("missing or not a string (one text per turn)", path=p, line=lineno, field=f"{where}text")
    return text


def _opt_int(t: dict, key: str, p: Path, lineno: int, where: str, default: int) -> int:
    v = t.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise WorkloadError("must be an integer >= 1", path=p, line=lineno, field=f"{where}{key}")
    return v


def _delay_s(t: dict, p: Path, lineno: int, where: str) -> float:
    v = t.get("delay")
    if v is None:
        return 0.0
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= MAX_THINK_TIME_S * 1000:
        raise WorkloadError(f"must be milliseconds in [0, {MAX_THINK_TIME_S * 1000:.0f}]", path=p, line=lineno,
                            field=f"{where}delay")
    return v / 1000.0


@dataclass(slots=True)
class _Session:
    system: list[dict[str, str]]
    users: list[dict[str, str]]
    turns: int = 0


def import_aiperf(src: str | Path, out: str | Path, *, model: str = DEFAULT_MODEL,
                  max_tokens: int = DEFAULT_MAX_TOKENS) -> ConversationImport:
    """Write a workload from an AIPerf ``single_turn`` or ``multi_turn`` JSONL file (module docstring).

    A line with ``turns`` is a multi-turn conversation, any other line a single turn.
    With no ``session_id`` anywhere and no multi-turn line the workload is flat (no side
    file); otherwise every line without a ``session_id`` is a session of its own
    (``#<line>``).

    Raises:
        WorkloadError: a line that is not a JSON object; a turn without one ``text``, with
            media or a ``timestamp``; a bad ``output_length``, ``delay``, ``role`` or
            ``session_id`` (file, line and field named).
    """
    p = Path(src)
    sessions: dict[str, _Session] = {}
    flat = True
    with SessionWorkloadWriter(out, src) as w:
        for lineno, line in _lines(p):
            obj = json_line(line, p, lineno)
            if not isinstance(obj, dict):
                raise WorkloadError("not a JSON object", path=p, line=lineno)
            sid = obj.get("session_id")
            if sid is not None and (not isinstance(sid, str) or not sid):
                raise WorkloadError("must be a non-empty string", path=p, line=lineno, field="session_id")
            multi = "turns" in obj
            if multi and (not isinstance(obj["turns"], list) or not obj["turns"]):
                raise WorkloadError("must be a non-empty list", path=p, line=lineno, field="turns")
            flat = flat and sid is None and not multi
            key = sid if sid is not None else f"#{lineno}"
            if sid is None and key in sessions:
                raise WorkloadError(f"session id {key!r} is also this line's own", path=p, line=lineno,
                                    field="session_id")
            s = sessions.get(key)
            if s is None:
                s = sessions[key] = _Session([], [])
                w.new_session(key, p, "session_id")
            for j, t in enumerate(obj["turns"] if multi else [obj]):
                where = f"turns[{j}]." if multi else ""
                if not isinstance(t, dict):
                    raise WorkloadError("not an object", path=p, line=lineno, field=where.rstrip("."))
                text = _turn_text(t, p, lineno, where)
                role = t.get("role", "user") or "user"
                if role not in ("user", "system"):
                    raise WorkloadError("must be user or system", path=p, line=lineno, field=f"{where}role")
                if role == "system":
                    if not multi or s.turns or s.users or s.system:
                        raise WorkloadError("only a multi-turn conversation's first turn may be a system turn", path=p,
                                            line=lineno, field=f"{where}role")
                    s.system.append({"role": "system", "content": text})
                    continue
                if not multi:  # single_turn entries are self-contained
                    s.users = []
                s.users.append({"role": "user", "content": text})
                n = _opt_int(t, "output_length", p, lineno, where, max_tokens)
                w.add(chat_body(model, s.system + s.users, n), key, s.turns, _delay_s(t, p, lineno, where)
                      if s.turns else 0.0)
                s.turns += 1
        side = w.commit(sessions=not flat)
        return ConversationImport(w.path, side, 0 if flat else w.sessions, len(w.turns), {}, p)


def import_vllm(src: str | Path, out: str | Path, *, model: str = DEFAULT_MODEL,
                max_tokens: int = DEFAULT_MAX_TOKENS) -> ConversationImport:
    """Write a flat workload from a ``vllm bench serve`` custom JSONL file (module docstring).

    Raises:
        WorkloadError: a line that is not a JSON object, without a string ``prompt``, or
            whose ``output_tokens`` is not an integer >= 1 (file, line and field named).
    """
    p = Path(src)
    with SessionWorkloadWriter(out, src) as w:
        for lineno, line in _lines(p):
            obj = json_line(line, p, lineno)
            if not isinstance(obj, dict):
                raise WorkloadError("not a JSON object", path=p, line=lineno)
            if not isinstance(obj.get("prompt"), str):
                raise WorkloadError("missing or not a string", path=p, line=lineno, field="prompt")
            n = _opt_int(obj, "output_tokens", p, lineno, "", max_tokens)
            w.add(chat_body(model, [{"role": "user", "content": obj["prompt"]}], n), "", 0)
        side = w.commit(sessions=False)
        return ConversationImport(w.path, side, 0, len(w.turns), {}, p)


# --- export ------------------------------------------------------------------------------


@dataclass(slots=True)
class Exported:
    """What an export wrote.

    Attributes:
        path: The file written.
        kind: The dataset type written (AIPerf's ``single_turn``, ...; ``custom`` for vLLM).
        lines: Lines written.
        bodies: Bodies exported.
        notes: Counted losses (``flattened``, ``no max_tokens``, fields dropped), by name.
    """

    path: Path
    kind: str
    lines: int
    bodies: int
    notes: dict[str, int] = field(default_factory=dict)

    def note(self, what: str) -> None:
        """Count one ``what``."""
        self.notes[what] = self.notes.get(what, 0) + 1


def _content_text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(c, dict) and c.get("type") == "text"
                                         and isinstance(c.get("text"), str) for c in content):
        return "".join(c["text"] for c in content)
    return None


_KEPT = {"model", "messages", "prompt", "max_tokens", "max_completion_tokens", "stream", "stream_options"}


def _parts(b: Body, res: Exported) -> tuple[list[dict[str, str]], int | None]:
    """A body's messages (text only) and output length; refused when it has no text form."""
    d = b.decoded()
    if set(d) - _KEPT:
        res.note("other body fields dropped")
    n = d.get("max_tokens", d.get("max_completion_tokens"))
    n = n if type(n) is int and n >= 1 else None
    if b.kind == "completions":
        if not isinstance(d.get("prompt"), str):
            raise WorkloadError("prompt is not one string", path=b.source, body_index=b.index, field="prompt")
        return [{"role": "user", "content": d["prompt"]}], n
    msgs = []
    for i, m in enumerate(d["messages"]):
        text = _content_text(m.get("content")) if isinstance(m, dict) else None
        if text is None or not isinstance(m.get("role"), str):
            raise WorkloadError("has no text content (images, tool calls) to export", path=b.source,
                                body_index=b.index, field=f"messages[{i}]")
        msgs.append({"role": m["role"], "content": text})
    return msgs, n


def _last_user(msgs: list[dict[str, str]], b: Body) -> str:
    for m in reversed(msgs):
        if m["role"] == "user":
            return m["content"]
    raise WorkloadError("has no user message", path=b.source, body_index=b.index, field="messages")


def export_vllm(workload: str | Path, out: str | Path) -> Exported:
    """Write ``vllm bench serve --dataset-name custom`` JSONL: ``{"prompt", "output_tokens"}`` per body.

    Raises:
        WorkloadError: a bad workload, or a body with no text form (images, tool calls).
    """
    wl = load_workload(workload)
    res = Exported(Path(out), "custom", 0, 0)
    lines = []
    for b in wl.bodies:
        msgs, n = _parts(b, res)
        if len(msgs) == 1 and msgs[0]["role"] == "user":
            prompt = msgs[0]["content"]
        else:
            prompt = "\n\n".join(m["content"] for m in msgs)
            res.note("flattened (several messages joined by a blank line)")
        if n is None:
            res.note(f"no max_tokens (output_tokens {DEFAULT_MAX_TOKENS})")
        lines.append(orjson.dumps({"prompt": prompt, "output_tokens": n or DEFAULT_MAX_TOKENS}))
    atomic_write_bytes(res.path, b"".join(x + b"\n" for x in lines))
    res.lines = res.bodies = len(lines)
    return res


def export_aiperf(workload: str | Path, out: str | Path, *, kind: str = "auto") -> Exported:
    """Write an AIPerf custom dataset JSONL of type ``kind`` (``AIPERF_TYPES``; module docstring).

    Raises:
        WorkloadError: a bad workload or side file; a body with no text form; ``multi_turn``
            of a session whose turn has no user message.
        ValueError: an unknown ``kind``.
    """
    if kind not in AIPERF_TYPES:
        raise ValueError(f"unknown AIPerf dataset type {kind!r}")
    wl = load_workload(workload)
    ss = load_sessions(workload, len(wl))
    if kind == "auto":
        kind = "multi_turn" if ss is not None else "single_turn"
    res = Exported(Path(out), kind, 0, len(wl))
    turn_of = {t.body: t for t in ss.turns} if ss is not None else {}
    lines = []

    def extra(line: dict, b: Body, n: int | None) -> dict:
        t = turn_of.get(b.index)
        if t is not None:
            line["session_id"] = t.session
            if t.turn:
                line["delay"] = t.think_time_s * 1000.0
        if n is not None:
            line["output_length"] = n
        return line

    if kind == "multi_turn":
        order = ss.order if ss is not None else tuple(str(i) for i in range(len(wl)))
        members = ss.bodies if ss is not None else {str(i): (i,) for i in range(len(wl))}
        for sid in order:
            turns: list[dict] = []
            for k, i in enumerate(members[sid]):
                b = wl.bodies[i]
                msgs, n = _parts(b, res)
                if k == 0 and msgs[0]["role"] == "system":
                    turns.append({"role": "system", "text": msgs[0]["content"]})
                turn: dict = {"text": _last_user(msgs, b)}
                if k and ss is not None:
                    turn["delay"] = ss.turns[i].think_time_s * 1000.0
                if n is not None:
                    turn["output_length"] = n
                turns.append(turn)
            lines.append(orjson.dumps({"session_id": sid, "turns": turns}))
    else:
        for b in wl.bodies:
            msgs, n = _parts(b, res)
            if kind == "single_turn":
                if len(msgs) > 1:
                    res.note("history dropped (single_turn sends the last user message alone)")
                line = extra({"text": _last_user(msgs, b)}, b, n)
            else:
                d = b.decoded()
                line = extra({"messages": msgs} if b.kind == "chat" else {"text_input": d["prompt"]}, b, n)
            lines.append(orjson.dumps(line))
    atomic_write_bytes(res.path, b"".join(x + b"\n" for x in lines))
    res.lines = len(lines)
    return res
