"""``kvreplay import sharegpt``: ShareGPT-style conversation files -> one session per conversation.

Source format (ShareGPT, as FastChat, vLLM's ``benchmarks`` ShareGPT loader and axolotl
read it): one JSON array of conversations (a file holding a single conversation object
is read as an array of one)::

    [{"id": "abc", "conversations": [{"from": "system", "value": "..."},
                                     {"from": "human", "value": "..."},
                                     {"from": "gpt", "value": "..."}, ...]}, ...]

- ``from`` is ``human``, ``gpt`` or ``system`` (roles ``user``, ``assistant``, ``system``);
  anything else is refused with its JSON path (``[3].conversations[2].from``).
- ``id`` (a string, or an integer written in decimal) is the session id; a conversation
  without one gets ``#<index>`` (its 0-based index in the array). Ids must be unique.

Each conversation is one session; each ``human`` message is one body (one turn), whose
``messages`` are every earlier message of the conversation (system, human, gpt, in file
order) followed by that human message, the ``value`` text kept exactly. Bodies are
``workload.conversation.chat_body`` (``stream: true`` with usage); the file names no model
or output length, so ``model`` and ``max_tokens`` come from ``--model`` and
``--max-tokens`` (defaults ``DEFAULT_MODEL``, ``DEFAULT_MAX_TOKENS``). Think time is 0
for a first turn and ``--think-time`` (default 0) for every later one. A conversation
with no ``human`` message is skipped and counted.

The file is read one conversation at a time (``iter_json_array``), the workload written
one body at a time; peak memory is about one conversation's bodies.
"""

from __future__ import annotations

from pathlib import Path

from kvreplay.errors import WorkloadError
from kvreplay.workload.conversation import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_MODEL,
    ConversationImport,
    SessionWorkloadWriter,
    chat_body,
    iter_json_array,
)

__all__ = ["ROLES", "import_sharegpt"]

ROLES = {"human": "user", "gpt": "assistant", "system": "system"}
"""ShareGPT ``from`` -> chat ``role``."""


def _session_id(conv: dict, index: int, p: Path) -> str:
    sid = conv.get("id")
    if sid is None:
        return f"#{index}"
    if isinstance(sid, bool) or not isinstance(sid, (str, int)) or sid == "":
        raise WorkloadError("must be a non-empty string or an integer", path=p, field=f"[{index}].id")
    return str(sid)


def _messages(conv: dict, index: int, p: Path) -> list[dict[str, str]]:
    turns = conv.get("conversations")
    if not isinstance(turns, list):
        raise WorkloadError("missing or not a list", path=p, field=f"[{index}].conversations")
    out = []
    for j, t in enumerate(turns):
        where = f"[{index}].conversations[{j}]"
        if not isinstance(t, dict):
            raise WorkloadError("not an object", path=p, field=where)
        role = ROLES.get(t.get("from"))  # type: ignore[arg-type]
        if role is None:
            raise WorkloadError(f"must be one of {', '.join(ROLES)}, not {t.get('from')!r}", path=p,
                                field=f"{where}.from")
        if not isinstance(t.get("value"), str):
            raise WorkloadError("missing or not a string", path=p, field=f"{where}.value")
        out.append({"role": role, "content": t["value"]})
    return out


def import_sharegpt(src: str | Path, out: str | Path, *, model: str = DEFAULT_MODEL,
                    max_tokens: int = DEFAULT_MAX_TOKENS, think_time: float = 0.0,
                    limit: int | None = None) -> ConversationImport:
    """Write a sessions workload from a ShareGPT-style file (see module docstring).

    Args:
        src: The JSON file.
        out: The workload file (``.jsonl`` added when missing); the side file goes beside it.
        model: ``model`` of every body.
        max_tokens: ``max_tokens`` of every body.
        think_time: Think time (s) of every turn after the first.
        limit: Import only the first ``limit`` conversations written (the rest is not read).

    Returns:
        What was written.

    Raises:
        WorkloadError: not a JSON array of conversation objects; a bad ``id``,
            ``conversations``, ``from`` or ``value`` (its JSON path named); an id used
            twice; no conversation with a human message. Nothing is left at ``out``.
    """
    p = Path(src)
    skipped: dict[str, int] = {}
    with SessionWorkloadWriter(out, src) as w:
        for index, conv in iter_json_array(p):
            if limit is not None and w.sessions >= limit:
                break
            if not isinstance(conv, dict):
                raise WorkloadError("not an object", path=p, field=f"[{index}]")
            sid = _session_id(conv, index, p)
            msgs = _messages(conv, index, p)
            if not any(m["role"] == "user" for m in msgs):
                skipped["no human message"] = skipped.get("no human message", 0) + 1
                continue
            w.new_session(sid, p, f"[{index}].id")
            turn = 0
            for k, m in enumerate(msgs):
                if m["role"] == "user":
                    w.add(chat_body(model, msgs[: k + 1], max_tokens), sid, turn, think_time if turn else 0.0)
                    turn += 1
        if not w.turns:
            raise WorkloadError("no conversation with a human message", path=p)
        side = w.commit()
        assert side is not None
        return ConversationImport(w.path, side, w.sessions, len(w.turns), skipped, p)
