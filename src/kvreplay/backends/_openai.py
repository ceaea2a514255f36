"""Plain OpenAI-compatible servers: no counters, usage only.

Snapshots are empty (every common name absent, never 0), so per-request deltas
are empty and a drain passes trivially: the summary must treat cache figures for
this backend as "unknown", and a fresh check cannot pass (nothing to check).
"""

from __future__ import annotations

from typing import Any

import aiohttp

from kvreplay import clock
from kvreplay.errors import BackendError
from kvreplay.runner.backend import Snapshot

from ._common import add_served_identity
from ._family import BackendFamily

__all__ = ["FAMILY", "OpenAIBackend"]


class OpenAIBackend:
    """No native counters; identity is the served model ids (``/v1/models``)."""

    name = "openai"

    def __init__(
        self, base_url: str, session: aiohttp.ClientSession | None, profile: object = None
    ) -> None:
        self.base_url = base_url
        self.session = session
        self.units: dict[str, str] = {}
        self.load_gauges: tuple[str, ...] = ()

    def parse(self, text: str) -> tuple[dict[str, Any], dict[str, float], float | None]:
        """Nothing to parse: ``({}, {}, None)`` for any text."""
        return {}, {}, None

    def identity_from_text(self, text: str) -> dict[str, Any]:
        """No identity in a dump: ``{}``."""
        return {}

    async def snapshot(self) -> Snapshot:
        """An empty snapshot stamped now; sends nothing."""
        return Snapshot(taken_ns=clock.now_ns(), raw={}, common={})

    async def identity(self) -> dict[str, Any]:
        """Served model ids, where ``/v1/models`` answers.

        Raises:
            BackendError: the server could not be reached.
        """
        if self.session is None:
            raise BackendError("openai backend has no HTTP session")
        ident: dict[str, Any] = {"backend": self.name}
        await add_served_identity(self.session, self.base_url, ident, version=False)
        return ident

    def drained(self, a: Snapshot, b: Snapshot) -> bool:
        """Always True: nothing is observable."""
        return True

    async def reset_cache(self) -> bool:
        """No reset: False, nothing sent."""
        return False


FAMILY = BackendFamily(name="openai", adapter=OpenAIBackend, summary="no counters (usage only)", counters=False)
"""Plain OpenAI-compatible servers: ``detect``'s answer when no other family is recognised."""
