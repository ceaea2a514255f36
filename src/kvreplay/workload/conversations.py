"""What a conversation workload offers a prefix cache, turn by turn, and its checks before a run.

A session's turn ``k+1`` normally resends turn ``k``'s messages (its history) and
adds the assistant's answer and a new user message. Measured on prefix chains
(``kvreplay.workload.chain``: one link per chat message, or per block of a
completions prompt), a turn *extends* the previous one when every link of the
previous turn's chain is a leading link of its own; the reuse a turn could get is
the bytes of its chain's leading links shared with the previous turn's chain (an
upper bound at message granularity: no tokenizer is applied, bytes of the raw body).

Checks (``session_warnings``), named so a user can grep them; none refuses the run:

- ``history_not_prefix``: turns whose history does not extend the previous turn's
  (the replay still sends them; the cache reuse across the turn is lost), counted;
- ``session_over_deadline``: sessions whose think times alone exceed the run's
  deadline (``--stop-new-after`` / ``--hard-deadline``), so their later turns are
  never sent.

The side file's own checks (contiguous turns, think times negative or absurd) are
``kvreplay.workload.sessions.load_sessions``'s, raised when the workload is loaded.
"""

from __future__ import annotations

from typing import Any

import orjson

from kvreplay.workload import chain as chain_mod
from kvreplay.workload._loader import Workload
from kvreplay.workload.chain import DEFAULT_BLOCK_BYTES

__all__ = ["LIVE_OFF_LOOP_BYTES", "LiveHistory", "by_turn", "live_body", "session_warnings", "turn_reuse"]


def turn_reuse(workload: Workload, *, block_bytes: int = DEFAULT_BLOCK_BYTES) -> list[dict[str, Any]]:
    """One row per body of a conversation workload, in session order then turn order.

    Args:
        workload: A workload with sessions (``workload.sessions`` not None).
        block_bytes: Block size for completions prompts (bytes).

    Returns:
        Rows ``{"session", "turn", "body", "think_time_s", "prefix_bytes", "shared_bytes",
        "extends"}``: ``prefix_bytes`` the bytes its chain hashes, ``shared_bytes`` the bytes
        of its leading links equal to the previous turn's (0 for a first turn), ``extends``
        whether the previous turn's whole chain leads its own (True for a first turn).
        Empty without sessions.
    """
    ss = workload.sessions
    if ss is None:
        return []
    rows = []
    for sid in ss.order:
        prev: chain_mod.PrefixChain | None = None
        for k, bi in enumerate(ss.bodies[sid]):
            c = chain_mod.prefix_chain(workload.bodies[bi].raw, block_bytes=block_bytes)
            m = 0
            if prev is not None:
                while m < min(len(prev.links), len(c.links)) and prev.links[m] == c.links[m]:
                    m += 1
            rows.append({
                "session": sid, "turn": k, "body": bi, "think_time_s": ss.turns[bi].think_time_s,
                "prefix_bytes": c.ends[-1] if c.ends else 0, "shared_bytes": c.ends[m - 1] if m else 0,
                "extends": prev is None or m == len(prev.links),
            })
            prev = c
    return rows


def by_turn(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``turn_reuse`` rows summed by turn index: ``{"turn", "bodies", "prefix_bytes", "shared_bytes", "fraction"}``."""
    out: dict[int, dict[str, Any]] = {}
    for r in rows:
        t = out.setdefault(r["turn"], {"turn": r["turn"], "bodies": 0, "prefix_bytes": 0, "shared_bytes": 0})
        t["bodies"] += 1
        t["prefix_bytes"] += r["prefix_bytes"]
        t["shared_bytes"] += r["shared_bytes"]
    for t in out.values():
        t["fraction"] = t["shared_bytes"] / t["prefix_bytes"] if t["prefix_bytes"] else 0.0
    return [out[k] for k in sorted(out)]


def session_warnings(workload: Workload, *, deadline_s: float | None = None,
                     rows: list[dict[str, Any]] | None = None) -> list[str]:
    """Named warnings about a conversation workload (empty without sessions or when all is well).

    Args:
        workload: The workload.
        deadline_s: The run's deadline (s after its start), or None.
        rows: ``turn_reuse(workload)`` when already computed.

    Returns:
        Lines starting with the warning's name: ``history_not_prefix: N turns ...``,
        ``first_turn_think: N sessions ...`` and ``session_over_deadline: N sessions ...``.
    """
    ss = workload.sessions
    if ss is None:
        return []
    out = []
    rows = turn_reuse(workload) if rows is None else rows
    broken = [r for r in rows if not r["extends"]]
    if broken:
        out.append(f"history_not_prefix: {len(broken)} turns whose history does not extend the previous turn's "
                   f"(first: session {broken[0]['session']!r} turn {broken[0]['turn']}); they are sent as retained, "
                   "and the reuse across those turns is lost")
    first = [sid for sid in ss.order if ss.bodies[sid] and ss.turns[ss.bodies[sid][0]].think_time_s > 0]
    if first:
        out.append(f"first_turn_think: {len(first)} sessions whose first turn has a think time (first: {first[0]!r}, "
                   f"{ss.turns[ss.bodies[first[0]][0]].think_time_s:g} s); a first turn is sent when its session "
                   "starts, so it is not applied (records: think_time_planned_s 0)")
    if deadline_s is not None:
        long = {sid: sum(ss.turns[b].think_time_s for b in ss.bodies[sid]) for sid in ss.order}
        over = [sid for sid, t in long.items() if t > deadline_s]
        if over:
            out.append(f"session_over_deadline: {len(over)} sessions whose think times alone exceed the run's "
                       f"deadline of {deadline_s:g} s (first: {over[0]!r}, {long[over[0]]:g} s); their later turns "
                       "will not be sent")
    return out


LIVE_OFF_LOOP_BYTES = 256 << 10
"""A live-history turn whose retained body is larger than this is built in a thread, off the event loop (bytes)."""


class LiveHistory:
    """One session's live history, built turn by turn (``live_body`` for each turn, incrementally).

    Each turn's retained body is parsed once. What ``live_body`` decides by comparing
    every earlier turn's messages with this turn's (O(turns) parses and comparisons per
    turn) is carried from turn to turn: whether each earlier turn's messages are a prefix
    of the latest turn's. When the latest turn extends the one before it (the usual case),
    that holds for turn ``j`` exactly when it held before and turn ``j`` was not longer;
    otherwise (the history does not extend: ``session_warnings``' ``history_not_prefix``)
    the earlier bodies are compared again, as ``live_body`` does.

    Args:
        earlier: Turn index ``j`` -> its retained bytes (only read when the history does
            not extend).
    """

    def __init__(self, earlier: Any) -> None:
        self._earlier = earlier
        self._prev: list[Any] | None = None  # the latest turn's retained messages
        self._lens: list[int] = []  # per earlier turn: its message count, -1 without messages
        self._ok: list[bool] = []  # per earlier turn: its messages are a prefix of the latest turn's

    def _messages(self, raw: bytes) -> tuple[Any, list[Any] | None]:
        obj = orjson.loads(raw)
        msgs = obj.get("messages") if isinstance(obj, dict) else None
        return obj, (msgs if isinstance(msgs, list) else None)

    def body(self, raw: bytes, replies: list[str]) -> bytes:
        """The bytes to send for the next turn (``live_body``'s result for it); then it is an earlier turn.

        Args:
            raw: The turn's retained bytes.
            replies: The visible text this server returned for each earlier turn (one each).
        """
        obj, msgs = self._messages(raw)
        k = len(self._lens)
        if msgs is None:
            ok = [False] * k
        elif self._prev is not None and len(self._prev) <= len(msgs) and msgs[:len(self._prev)] == self._prev:
            ok = [o and n <= len(self._prev) for o, n in zip(self._ok, self._lens, strict=True)]
            ok[-1] = True
            for j in range(k - 1):  # an earlier turn longer than the previous one: compared itself
                if not ok[j] and self._lens[j] > len(self._prev) and self._lens[j] <= len(msgs):
                    ok[j] = msgs[:self._lens[j]] == self._messages(self._earlier(j))[1]
        else:
            ok = []
            for j in range(k):
                prev = self._messages(self._earlier(j))[1]
                ok.append(prev is not None and len(prev) <= len(msgs) and msgs[:len(prev)] == prev)
        retained = list(msgs) if msgs is not None else None
        changed = False
        if msgs is not None:
            for good, n, reply in zip(ok, self._lens, replies, strict=True):
                if (good and 0 <= n < len(msgs) and isinstance(msgs[n], dict)
                        and msgs[n].get("role") == "assistant" and msgs[n].get("content") != reply):
                    msgs[n] = {**msgs[n], "content": reply}
                    changed = True
        self._lens.append(len(retained) if retained is not None else -1)
        self._ok = [*ok, retained is not None]
        self._prev = retained
        return orjson.dumps(obj) if changed else raw


def live_body(raw: bytes, earlier: list[bytes], replies: list[str]) -> bytes:
    """The bytes of a turn in ``live`` history: earlier turns' assistant messages replaced by this server's replies.

    Turn ``k``'s retained body resends the messages of each earlier turn ``j`` followed
    by the assistant's answer to it (captured from another server, model or seed). In
    live history that answer is what this server returned for turn ``j``. The message
    replaced is the one right after turn ``j``'s own messages, when it is an assistant
    message and the messages before it are turn ``j``'s exactly (the history extends);
    otherwise nothing is replaced there. One turn on its own; a run builds a session's
    turns with ``LiveHistory`` (each body parsed once).

    Args:
        raw: Turn ``k``'s retained bytes.
        earlier: The retained bytes of turns ``0..k-1`` of the same session.
        replies: The visible text this server returned for turns ``0..k-1``.

    Returns:
        The bytes to send: ``raw`` itself when nothing was replaced (a completions body,
        a first turn, no matching assistant message), else the body re-serialised with
        orjson (compact; keys in their order).
    """
    obj = orjson.loads(raw)
    msgs = obj.get("messages") if isinstance(obj, dict) else None
    if not isinstance(msgs, list):
        return raw
    changed = False
    retained = list(msgs)  # compared with the earlier turns' retained messages
    for prev_raw, reply in zip(earlier, replies, strict=True):
        prev = orjson.loads(prev_raw).get("messages")
        n = len(prev) if isinstance(prev, list) else -1
        if (0 <= n < len(msgs) and retained[:n] == prev and isinstance(msgs[n], dict)
                and msgs[n].get("role") == "assistant" and msgs[n].get("content") != reply):
            msgs[n] = {**msgs[n], "content": reply}
            changed = True
    return orjson.dumps(obj) if changed else raw
