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

- **AIPerf** ``raw_payload`` (the exact bodies, chat only): ``kvreplay.workload.peers_raw``.

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
by a blank line); ``multi_turn`` writes each turn's *new* user message only (what it adds
to the previous turn's messages; AIPerf resends the history itself), so ``import aiperf``
of the file gives back the workload it came from. ``max_tokens`` (or
``max_completion_tokens``) becomes the output length. Only ``mooncake_trace`` keeps a chat
body's whole message array; no format keeps the other body fields (temperature, ...).

What a format cannot hold is counted per body (``Exported.lost``, keys in ``LOSSES``:
messages by role, captured replies, flattened roles, sessions, body and message fields)
and written to ``F.manifest.json``; an export that would lose anything is refused, with
the counts, unless ``lossy`` (``--lossy``) is given (issue 44 item 4).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from kvreplay.errors import WorkloadError
from kvreplay.options.export import AIPERF_TYPES
from kvreplay.safe_io import atomic_write_bytes, atomic_write_json
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

__all__ = ["AIPERF_TYPES", "LOSSES", "Exported", "export_aiperf", "export_vllm", "import_aiperf", "import_vllm",
           "manifest_path"]


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
    implicit: dict[str, int] = {}  # "#<line>" -> that line: the session of a line without a session_id
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
            if sid is not None and sid in implicit:  # it would join the session of a line without one
                raise WorkloadError(f"session id {sid!r} is also the session of line {implicit[sid]}, which has no "
                                    "session_id; give that line one, or this line another", path=p, line=lineno,
                                    field="session_id")
            if sid is None:
                implicit[key] = lineno
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
    """What an export wrote, and what the format could not hold.

    Attributes:
        path: The file written.
        kind: The dataset type written (AIPerf's ``single_turn``, ...; ``custom`` for vLLM).
        lines: Lines written.
        bodies: Bodies exported.
        lost: Content the format cannot hold, by what (``message role user``, ``field temperature``,
            ``roles flattened into one prompt``, ...; see ``LOSSES``): the number of bodies that lost it.
        messages_lost: Messages not carried, by role (``assistant``, ``developer``, ``tool``...), and
            ``assistant reply`` for the captured replies a peer replaces with its own.
        notes: Defaults filled in, not losses (``no max_tokens``): bodies, by what.
        lossy: Whether it was written despite ``lost`` (``--lossy``).
        manifest: ``<path>.manifest.json``, the same account as JSON (None until written).
    """

    path: Path
    kind: str
    lines: int
    bodies: int
    notes: dict[str, int] = field(default_factory=dict)
    lost: dict[str, int] = field(default_factory=dict)
    messages_lost: dict[str, int] = field(default_factory=dict)
    lossy: bool = False
    manifest: Path | None = None

    def note(self, what: str) -> None:
        """Count one body with the default ``what`` filled in."""
        self.notes[what] = self.notes.get(what, 0) + 1

    def lose(self, body_lost: set[str]) -> None:
        """Count one body that lost each content of ``body_lost``."""
        for what in body_lost:
            self.lost[what] = self.lost.get(what, 0) + 1

    def lines_lost(self) -> list[str]:
        """The account, one line per content lost (``kvreplay export`` prints them)."""
        def messages(what: str) -> str:
            role = what[len("message role "):] if what.startswith("message role ") else \
                "assistant reply" if what == _REPLY else None
            return f" ({self.messages_lost[role]} messages)" if role in self.messages_lost else ""

        out = [f"lost in {n} bodies: {what}{messages(what)}" for what, n in sorted(self.lost.items())]
        return out + [f"{n} bodies: {what}" for what, n in sorted(self.notes.items())]

    def to_json(self) -> dict[str, Any]:
        """The manifest: ``format`` kind, ``lines``, ``bodies``, ``lossy``, ``lost``, ``messages_lost``, ``notes``."""
        return {"kind": self.kind, "lines": self.lines, "bodies": self.bodies, "lossy": self.lossy,
                "lost": dict(sorted(self.lost.items())), "messages_lost": dict(sorted(self.messages_lost.items())),
                "notes": dict(sorted(self.notes.items()))}


_REPLY = "reply (the peer sends its own)"
_NO_NEW = "turn adds no user message (its last one is sent again)"
_REWRITTEN = "history diverges within the previous turn's text (the peer resends that turn's own)"

LOSSES = {
    "message role R": "a message of role R the format does not carry (single_turn: all but the last user "
                      "message; multi_turn: all but a turn's new user message and the first turn's system message)",
    "reply (the peer sends its own)": "a captured assistant reply between two turns (multi_turn: AIPerf threads its "
                                      "live reply in instead)",
    "history does not extend the previous turn's": "multi_turn: a turn whose messages do not start with the previous "
                                                   "turn's (its last user message is sent alone)",
    _REWRITTEN: "multi_turn: one-message turns (a completions prompt, a block trace) whose text does not start "
                "with the previous turn's whole text (a partial last block filled in): the new text starts at the "
                "word where they diverge, and the peer resends the previous turn's text as it was",
    _NO_NEW: "multi_turn: a later turn whose messages add no user message to the previous turn's (a retry): its "
             "last user message is sent again as a new turn",
    "roles flattened into one prompt": "vLLM: several messages joined by a blank line",
    "field F": "a body field no format carries (temperature, ignore_eos, ...; model is the peer's own option)",
    "message field F": "a message key other than role and content (name, tool_call_id, ...)",
    "sessions": "vLLM: the body belongs to a session (vLLM sends every line alone, shuffled unless told not to)",
}
"""What ``Exported.lost`` counts, by key (``R``, ``F``: a role, a field name)."""


def _content_text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(c, dict) and c.get("type") == "text"
                                         and isinstance(c.get("text"), str) for c in content):
        return "".join(c["text"] for c in content)
    return None


_KEPT = {"model", "messages", "prompt", "max_tokens", "max_completion_tokens", "stream", "stream_options"}


def _parts(b: Body, lost: set[str]) -> tuple[list[dict[str, str]], int | None]:
    """A body's messages (text only) and output length; the fields it loses added to ``lost``."""
    d = b.decoded()
    lost.update(f"field {k}" for k in set(d) - _KEPT)
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
        lost.update(f"message field {k}" for k in set(m) - {"role", "content"})
        msgs.append({"role": m["role"], "content": text})
    return msgs, n


def _keep_last_user(msgs: list[dict[str, str]], b: Body, res: Exported, lost: set[str]) -> str:
    """The last user message's text; every other message of ``msgs`` counted as lost, by role."""
    for j in range(len(msgs) - 1, -1, -1):
        if msgs[j]["role"] == "user":
            for m in msgs[:j] + msgs[j + 1:]:
                lost.add(f"message role {m['role']}")
                res.messages_lost[m["role"]] = res.messages_lost.get(m["role"], 0) + 1
            return msgs[j]["content"]
    raise WorkloadError("has no user message", path=b.source, body_index=b.index, field="messages")


def _new_part(msgs: list[dict[str, str]], prev: list[dict[str, str]] | None, res: Exported,
              lost: set[str]) -> list[dict[str, str]]:
    """The messages turn ``k`` adds to turn ``k-1``'s (``prev``; None for a first turn), replies counted.

    A turn extends the previous one when the previous turn's messages lead its own; what
    follows them is its new part, less the captured replies that lead it (the peer threads
    its own in). Two single user messages (a completions prompt, a block trace's one
    message) extend when one text starts with the other: the new part is the rest of the text
    (from the word where they diverge, counted as ``_REWRITTEN``, when they share a prefix).
    """
    if prev is None:
        return msgs
    if msgs[:len(prev)] == prev:
        new = msgs[len(prev):]
        j = 0
        while j < len(new) and new[j]["role"] == "assistant":
            j += 1
        if j:
            lost.add(_REPLY)
            res.messages_lost["assistant reply"] = res.messages_lost.get("assistant reply", 0) + j
        return new[j:]
    if len(msgs) == len(prev) == 1 and msgs[0]["role"] == prev[0]["role"] == "user":
        was, text = prev[0]["content"], msgs[0]["content"]
        if text.startswith(was):
            return [{"role": "user", "content": text[len(was):]}] if len(text) > len(was) else []
        # a block trace's partial last block changes once the next turn fills it: the new text
        # starts at the word where the two diverge (the peer resends the earlier turn's own)
        cut = text.rfind(" ", 0, len(os.path.commonprefix([was, text])) + 1)
        if cut > 0:
            lost.add(_REWRITTEN)
            return [{"role": "user", "content": text[cut:]}]
    lost.add("history does not extend the previous turn's")
    return msgs


def _refuse_or_write(res: Exported, lines: list[bytes], workload: str | Path, lossy: bool) -> Exported:
    """Write the lines and the manifest, or refuse (nothing written) when content is lost without ``lossy``.

    Raises:
        WorkloadError: ``res.lost`` is not empty and not ``lossy``: the counts named.
    """
    if res.lost and not lossy:
        what = "; ".join(f"{n} bodies: {w}" for w, n in sorted(res.lost.items()))
        raise WorkloadError(f"{res.kind} cannot hold all of it ({what}); nothing written: give --lossy to write "
                            "it with these counts", path=workload)
    res.lossy = bool(res.lost)
    res.lines = len(lines)
    atomic_write_bytes(res.path, b"".join(x + b"\n" for x in lines))
    res.manifest = res.path.with_name(res.path.name + ".manifest.json")
    atomic_write_json(res.manifest, {"workload": str(workload), "path": str(res.path), **res.to_json()})
    return res


def manifest_path(out: str | Path) -> Path:
    """Where the export of ``out`` writes its manifest: ``<out>.manifest.json`` beside it."""
    p = Path(out)
    return p.with_name(p.name + ".manifest.json")


def export_vllm(workload: str | Path, out: str | Path, *, lossy: bool = False) -> Exported:
    """Write ``vllm bench serve --dataset-name custom`` JSONL: ``{"prompt", "output_tokens"}`` per body.

    A body of one user message is its prompt; several messages are joined by a blank line
    (``roles flattened into one prompt``, a loss); a session's body loses its session.

    Args:
        workload: The workload.
        out: The file to write (and ``<out>.manifest.json`` beside it).
        lossy: Write even when content is lost (counted in the result and the manifest).

    Raises:
        WorkloadError: a bad workload, a body with no text form (images, tool calls), or
            content lost without ``lossy`` (nothing written).
    """
    wl = load_workload(workload)
    ss = load_sessions(workload, len(wl))
    in_session = {t.body for t in ss.turns if len(ss.bodies[t.session]) > 1} if ss is not None else set()
    res = Exported(Path(out), "custom", 0, len(wl))
    lines = []
    for b in wl.bodies:
        lost: set[str] = set()
        msgs, n = _parts(b, lost)
        if len(msgs) == 1 and msgs[0]["role"] == "user":
            prompt = msgs[0]["content"]
        else:
            prompt = "\n\n".join(m["content"] for m in msgs)
            lost.add("roles flattened into one prompt")
        if b.index in in_session:
            lost.add("sessions")
        if n is None:
            res.note(f"no max_tokens (output_tokens {DEFAULT_MAX_TOKENS})")
        res.lose(lost)
        lines.append(orjson.dumps({"prompt": prompt, "output_tokens": n or DEFAULT_MAX_TOKENS}))
    return _refuse_or_write(res, lines, workload, lossy)


def export_aiperf(workload: str | Path, out: str | Path, *, kind: str = "auto", lossy: bool = False) -> Exported:
    """Write an AIPerf custom dataset JSONL of type ``kind`` (``AIPERF_TYPES``; module docstring).

    ``multi_turn`` writes each turn's *new* message only (its messages past the previous
    turn's, less the captured replies AIPerf replaces with its own), so a session's turns
    add up to its last body, and ``import aiperf`` of the file gives back the workload it
    came from. What a type cannot hold is counted by body in ``Exported.lost`` (``LOSSES``).

    Args:
        workload: The workload (its sessions side file is read).
        out: The file to write (and ``<out>.manifest.json`` beside it).
        kind: ``auto`` (``multi_turn`` with sessions, else ``single_turn``), ``single_turn``,
            ``multi_turn``, ``mooncake_trace``.
        lossy: Write even when content is lost (counted in the result and the manifest).

    Raises:
        WorkloadError: a bad workload or side file; a body with no text form; a turn with no
            user message; content lost without ``lossy`` (nothing written).
        ValueError: an unknown ``kind``.
    """
    if kind not in AIPERF_TYPES:
        raise ValueError(f"unknown AIPerf dataset type {kind!r}")
    if kind == "raw_payload":  # the exact bodies: kvreplay.workload.peers_raw
        from kvreplay.workload.peers_raw import export_aiperf_raw

        return export_aiperf_raw(workload, out, Exported(Path(out), kind, 0, 0))
    wl = load_workload(workload)
    ss = load_sessions(workload, len(wl))
    if kind == "auto":
        kind = "multi_turn" if ss is not None else "single_turn"
    res = Exported(Path(out), kind, 0, len(wl))
    turn_of = {t.body: t for t in ss.turns} if ss is not None else {}
    lines = []

    def delay_ms(i: int) -> float:
        return round(turn_of[i].think_time_s * 1000.0, 3)  # ms to the microsecond: s -> ms -> s is exact

    def extra(line: dict, b: Body, n: int | None) -> dict:
        t = turn_of.get(b.index)
        if t is not None:
            line["session_id"] = t.session
            if t.turn:
                line["delay"] = delay_ms(b.index)
        if n is not None:
            line["output_length"] = n
        return line

    if kind == "multi_turn":
        order = ss.order if ss is not None else tuple(str(i) for i in range(len(wl)))
        members = ss.bodies if ss is not None else {str(i): (i,) for i in range(len(wl))}
        for sid in order:
            turns: list[dict] = []
            prev: list[dict[str, str]] | None = None
            for k, i in enumerate(members[sid]):
                b = wl.bodies[i]
                lost: set[str] = set()
                msgs, n = _parts(b, lost)
                new = _new_part(msgs, prev, res, lost)
                if k == 0 and new and new[0]["role"] == "system":
                    turns.append({"role": "system", "text": new[0]["content"]})
                    new = new[1:]
                if k and not any(m["role"] == "user" for m in new):  # the same messages again (a retry)
                    lost.add(_NO_NEW)
                    new = [next((m for m in reversed(msgs) if m["role"] == "user"), {"role": "none", "content": ""})]
                turn: dict = {"text": _keep_last_user(new, b, res, lost)}
                if k and ss is not None:
                    turn["delay"] = delay_ms(i)
                if n is not None:
                    turn["output_length"] = n
                turns.append(turn)
                res.lose(lost)
                prev = msgs
            lines.append(orjson.dumps({"session_id": sid, "turns": turns}))
    else:
        for b in wl.bodies:
            lost = set()
            msgs, n = _parts(b, lost)
            if kind == "single_turn":
                line = extra({"text": _keep_last_user(msgs, b, res, lost)}, b, n)
            else:
                d = b.decoded()
                line = extra({"messages": msgs} if b.kind == "chat" else {"text_input": d["prompt"]}, b, n)
            res.lose(lost)
            lines.append(orjson.dumps(line))
    return _refuse_or_write(res, lines, workload, lossy)
