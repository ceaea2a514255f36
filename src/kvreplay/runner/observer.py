"""What the runner tells a live display while it runs (the consumer owns the contract).

The runner calls these hooks from its event loop; they must return quickly (no
I/O that can block for long). ``PlainObserver`` prints one line per event to
stderr, which is what CI logs and non-terminals get.
"""

from __future__ import annotations

import sys
from typing import Any, Protocol

__all__ = ["NullObserver", "PlainObserver", "RunObserver"]


class RunObserver(Protocol):
    """Hooks the runner calls; every method is optional in practice (see ``NullObserver``)."""

    def on_run_start(self, plan: dict[str, Any], deadline_s: float | None) -> None:
        """The plan (as in plan.json) was written; ``deadline_s``: stop-new deadline (s), if any."""

    def on_phase_start(self, name: str, planned: int, concurrency: int) -> None:
        """A phase starts with ``planned`` requests at closed-loop concurrency ``concurrency``."""

    def on_request_start(self, phase: str, position: int) -> None:
        """A request of the frozen sequence is being sent."""

    def on_record(self, rec: dict[str, Any]) -> None:
        """A record was written (see the record keys in ``runner._runner``)."""

    def on_drain(self, phase: str, result: dict[str, Any]) -> None:
        """A drain check finished: ``{"passed", "waited_s", "reason"}``."""

    def on_phase_end(self, phase: dict[str, Any]) -> None:
        """A phase ended; ``phase`` is its summary.json entry."""

    def on_message(self, text: str) -> None:
        """A one-line notice (abort, counter read failure, ...)."""

    def on_run_end(self, summary: dict[str, Any]) -> None:
        """The run ended and summary.json was written."""


class NullObserver:
    """Does nothing (``--quiet``)."""

    def on_run_start(self, plan: dict[str, Any], deadline_s: float | None) -> None:  # noqa: D102
        pass

    def on_phase_start(self, name: str, planned: int, concurrency: int) -> None:  # noqa: D102
        pass

    def on_request_start(self, phase: str, position: int) -> None:  # noqa: D102
        pass

    def on_record(self, rec: dict[str, Any]) -> None:  # noqa: D102
        pass

    def on_drain(self, phase: str, result: dict[str, Any]) -> None:  # noqa: D102
        pass

    def on_phase_end(self, phase: dict[str, Any]) -> None:  # noqa: D102
        pass

    def on_message(self, text: str) -> None:  # noqa: D102
        pass

    def on_run_end(self, summary: dict[str, Any]) -> None:  # noqa: D102
        pass


class PlainObserver(NullObserver):
    """One line per phase start/end, drain and notice, on stderr."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream or sys.stderr

    def _p(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def on_phase_start(self, name: str, planned: int, concurrency: int) -> None:  # noqa: D102
        self._p(f"phase {name}: {planned} requests at C{concurrency}")

    def on_drain(self, phase: str, result: dict[str, Any]) -> None:  # noqa: D102
        state = "passed" if result["passed"] else f"FAILED ({result.get('reason')})"
        self._p(f"phase {phase}: drain {state} after {result['waited_s']} s")

    def on_phase_end(self, phase: dict[str, Any]) -> None:  # noqa: D102
        self._p(
            f"phase {phase['name']}: ok {phase['ok']}/{phase['planned']}, TTFT p50 {phase['ttft_ms']['p50']} ms, "
            f"cached {phase['tokens']['cached']}/{phase['tokens']['prompt']} tokens"
        )

    def on_message(self, text: str) -> None:  # noqa: D102
        self._p(text)
