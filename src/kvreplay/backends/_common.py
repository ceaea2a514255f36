"""Pieces shared by the adapters: snapshot construction, drain rule, identity probes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import aiohttp

from kvreplay import clock
from kvreplay.evidence.vocab import COUNTER_NAMES, LOAD_GAUGES
from kvreplay.runner.backend import Snapshot

from ._http import fetch_json

__all__ = [
    "OCCUPANCY_GAUGES",
    "add_served_identity",
    "check_empty",
    "drain_blockers",
    "make_snapshot",
    "model_cards",
    "version_of",
]


def make_snapshot(raw: dict[str, Any], common: dict[str, float], started: float | None) -> Snapshot:
    """A Snapshot stamped with ``clock.now_ns()`` (call it as soon as the reply arrived)."""
    return Snapshot(taken_ns=clock.now_ns(), raw=raw, common=common, started=started)


def drain_blockers(a: Snapshot, b: Snapshot, load_gauges: Iterable[str] = LOAD_GAUGES) -> list[str]:
    """Why ``a -> b`` is not a drained pair; empty when it is.

    A pair is drained when every load gauge present reads 0 in both snapshots and
    every common counter is unchanged (present in neither, or equal in both).
    A gauge the server does not report cannot block a drain.

    Args:
        a: Earlier snapshot.
        b: Later snapshot, ``interval_s`` after ``a``.
        load_gauges: Common gauge names that must read zero.

    Returns:
        Reasons such as ``"running=1"`` or ``"hits moved 3 -> 4"``, in name order.
    """
    out: list[str] = []
    for g in load_gauges:
        for snap in (b, a):
            v = snap.common.get(g)
            if v is not None and v != 0:
                out.append(f"{g}={v:g}")
                break
    for name in COUNTER_NAMES:
        va, vb = a.common.get(name), b.common.get(name)
        if va != vb:
            out.append(
                f"{name} moved {va if va is None else format(va, 'g')} -> "
                f"{vb if vb is None else format(vb, 'g')}"
            )
    return out


async def model_cards(session: aiohttp.ClientSession, base_url: str) -> list[dict[str, Any]] | None:
    """The ``data`` list of ``GET /v1/models`` (OpenAI shape), or None when absent.

    Raises:
        BackendError: the server could not be reached.
    """
    doc = await fetch_json(session, base_url, "/v1/models")
    if isinstance(doc, dict) and isinstance(doc.get("data"), list):
        return [c for c in doc["data"] if isinstance(c, dict)]
    return None


async def version_of(session: aiohttp.ClientSession, base_url: str) -> Any | None:
    """``GET /version``: the ``version`` field of a JSON object, else the whole JSON, else None.

    Raises:
        BackendError: the server could not be reached.
    """
    doc = await fetch_json(session, base_url, "/version")
    if isinstance(doc, dict) and "version" in doc and len(doc) == 1:
        return doc["version"]
    return doc


async def add_served_identity(
    session: aiohttp.ClientSession, base_url: str, ident: dict[str, Any], *, version: bool = True
) -> list[dict[str, Any]] | None:
    """Add ``models`` (ids from ``/v1/models``) and, with ``version``, ``version`` to ``ident``.

    The identity part every OpenAI-compatible server shares; adapters add their own.

    Returns:
        The model cards, for adapters that read more from them (None when absent).

    Raises:
        BackendError: the server could not be reached.
    """
    cards = await model_cards(session, base_url)
    if cards is not None:
        ident["models"] = [c.get("id") for c in cards]
    if version:
        v = await version_of(session, base_url)
        if v is not None:
            ident["version"] = v
    return cards


OCCUPANCY_GAUGES = ("entries", "bytes", "host_bytes", "host_rows_used", "host_pages_used")
"""Common gauges that say how much the cache holds."""


def check_empty(snap: Snapshot) -> tuple[bool, str | None]:
    """Whether the cache is empty, from its occupancy gauges alone (not counters).

    This is what a ``reset_cache()`` can be verified with: vLLM's
    ``/reset_prefix_cache`` and the simulator's keep their counters, so the
    fresh check (counters at zero) cannot pass after them.

    Args:
        snap: A snapshot taken after the reset.

    Returns:
        ``(True, None)`` when every occupancy gauge the server reports is 0;
        ``(False, reason)`` when one is not, or when it reports none (vLLM,
        SGLang, llama.cpp: emptiness is then not observable).
    """
    present = {g: snap.common[g] for g in OCCUPANCY_GAUGES if g in snap.common}
    if not present:
        return False, "the server reports no cache occupancy gauge; emptiness cannot be checked"
    full = [f"{g}={v:g}" for g, v in present.items() if v != 0]
    return (False, "cache not empty: " + ", ".join(full)) if full else (True, None)
