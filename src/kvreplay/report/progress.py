"""The live progress display of ``kvreplay run`` (a ``runner.observer.RunObserver``).

On a terminal (stdout and stderr both TTYs) a rich ``Live`` panel on stderr,
redrawn 4 times a second, shows: the current phase and the position reached in
its frozen sequence, requests done / planned (whole run), requests in flight,
errors by class, the running TTFT p50 of the phase, cached tokens so far (usage),
the last drain's result, and the time left before the stop-new deadline when
the runner gives one. Elsewhere (CI logs, pipes) ``PlainObserver`` prints one
line per phase, drain and notice. ``--quiet`` uses neither (``commands/run.py``).

The hooks only update counters in memory; rendering happens on rich's refresh
thread from a snapshot of them, so the runner's event loop never waits on the
terminal.
"""

from __future__ import annotations

import bisect
import sys
import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from kvreplay.runner.observer import PlainObserver, RunObserver, model_ms_text, phase_end_line, plan_time_scale

__all__ = ["LiveObserver", "ProgressState", "make_live_observer"]


class ProgressState:
    """What the display shows, updated by the observer hooks (no I/O).

    Attributes:
        phase: Current phase name (None before the first).
        concurrency: Its closed-loop concurrency.
        phase_planned: Its planned requests.
        position: Highest position of its frozen sequence sent so far (-1 before any).
        phase_done: Its requests recorded so far.
        planned: Requests planned in the whole run.
        done: Requests recorded in the whole run (sent or not).
        in_flight: Requests sent and not yet recorded.
        errors: Failed requests by class (whole run).
        cached_tokens: Sum of usage cached_tokens (whole run).
        last_drain: ``(phase, result)`` of the last drain check.
        deadline_s: Stop-new deadline (s from run start), None when none.
        started_s: ``time.monotonic()`` at run start (s).
        messages: The last few notices.
        scale: The simulator time scale of the plan (``plan_time_scale``): TTFT is
            then shown in model ms (measured / scale); None for real time.
    """

    def __init__(self) -> None:
        self.phase: str | None = None
        self.concurrency = 0
        self.phase_planned = 0
        self.position = -1
        self.phase_done = 0
        self.planned = 0
        self.done = 0
        self.in_flight = 0
        self.errors: dict[str, int] = {}
        self.cached_tokens = 0
        self.last_drain: tuple[str, dict[str, Any]] | None = None
        self.deadline_s: float | None = None
        self.started_s = time.monotonic()
        self.messages: list[str] = []
        self.scale: float | None = None
        self._ttft_ms: list[float] = []

    def ttft_p50_ms(self) -> float | None:
        """Median TTFT of the current phase's ok requests so far (ms), None before the first."""
        n = len(self._ttft_ms)
        return self._ttft_ms[(n - 1) // 2] if n else None

    def time_left_s(self) -> float | None:
        """Seconds before the stop-new deadline (never below 0), None without one."""
        if self.deadline_s is None:
            return None
        return max(0.0, self.deadline_s - (time.monotonic() - self.started_s))

    # Hooks' state changes, kept here so they can be tested without a terminal.
    def run_start(self, plan: dict[str, Any], deadline_s: float | None) -> None:  # noqa: D102
        self.planned = sum(len(p.get("sequence") or []) for p in plan.get("phases") or [])
        if deadline_s is not None:  # else keep one given at construction (``--stop-new-after``)
            self.deadline_s = deadline_s
        self.started_s = time.monotonic()
        self.scale = plan_time_scale(plan)

    def phase_start(self, name: str, planned: int, concurrency: int) -> None:  # noqa: D102
        self.phase, self.phase_planned, self.concurrency = name, planned, concurrency
        self.position, self.phase_done = -1, 0
        self._ttft_ms = []

    def request_start(self, position: int) -> None:  # noqa: D102
        self.in_flight += 1
        self.position = max(self.position, position)

    def record(self, rec: dict[str, Any]) -> None:  # noqa: D102
        self.done += 1
        self.phase_done += 1
        if rec.get("sent", True):
            self.in_flight = max(0, self.in_flight - 1)
        status = rec.get("status")
        if status == "ok":
            if rec.get("ttft_ns") is not None:
                bisect.insort(self._ttft_ms, rec["ttft_ns"] / 1e6)
            self.cached_tokens += (rec.get("usage") or {}).get("cached_tokens") or 0
        elif status:
            self.errors[status] = self.errors.get(status, 0) + 1

    def message(self, text: str) -> None:  # noqa: D102
        self.messages = (self.messages + [text])[-3:]

    def lines(self) -> list[tuple[str, str]]:
        """The display's rows as ``(label, value)`` text (what the panel and tests read)."""
        p50 = self.ttft_p50_ms()
        left = self.time_left_s()
        errs = ", ".join(f"{k} {v}" for k, v in sorted(self.errors.items())) or "none"
        drain = "none yet"
        if self.last_drain:
            ph, r = self.last_drain
            drain = (
                f"{ph}: {'passed' if r.get('passed') else 'FAILED'} after {r.get('waited_s')} s"
                + (f" ({r['reason']})" if r.get("reason") else "")
            )
        pos = f"{self.position + 1}/{self.phase_planned}" if self.phase else "-"
        return [
            ("phase", f"{self.phase or '-'} (C{self.concurrency})" if self.phase else "-"),
            ("position in frozen sequence", pos),
            ("done / planned", f"{self.done}/{self.planned}"),
            ("in flight", str(self.in_flight)),
            ("errors", errs),
            ("TTFT p50 (phase)", _ttft_text(p50, self.scale)),
            ("cached tokens so far", str(self.cached_tokens)),
            ("last drain", drain),
            (
                "time left",
                f"{left:.0f} s before no new requests" if left is not None else "no deadline",
            ),
        ]


def _ttft_text(p50: float | None, scale: float | None) -> str:
    """The panel's TTFT p50 (ms), in model ms with the scale stated against the simulator."""
    if p50 is None:
        return "-"
    if scale:
        return model_ms_text(p50, scale)
    return f"{p50:.1f} ms"


class LiveObserver:
    """A rich Live panel driven by ``ProgressState`` (see module docstring)."""

    def __init__(
        self,
        console: Console | None = None,
        refresh_per_second: float = 4.0,
        deadline_s: float | None = None,
    ) -> None:
        self.state = ProgressState()
        self.state.deadline_s = deadline_s
        self.console = console or Console(stderr=True)
        self._live = Live(
            get_renderable=self._render,
            console=self.console,
            refresh_per_second=refresh_per_second,
            transient=False,
        )
        self._started = False

    def _render(self) -> Group:
        t = Table.grid(padding=(0, 2))
        t.add_column(style="bold")
        t.add_column()
        for k, v in self.state.lines():
            t.add_row(k, v)
        msgs = [Text(m, style="yellow") for m in self.state.messages]
        return Group(t, *msgs)

    def on_run_start(self, plan: dict[str, Any], deadline_s: float | None) -> None:  # noqa: D102
        self.state.run_start(plan, deadline_s)
        if not self._started:
            self._live.start()
            self._started = True

    def on_phase_start(self, name: str, planned: int, concurrency: int) -> None:  # noqa: D102
        self.state.phase_start(name, planned, concurrency)

    def on_request_start(self, phase: str, position: int) -> None:  # noqa: D102
        self.state.request_start(position)

    def on_record(self, rec: dict[str, Any]) -> None:  # noqa: D102
        self.state.record(rec)

    def on_drain(self, phase: str, result: dict[str, Any]) -> None:  # noqa: D102
        self.state.last_drain = (phase, result)

    def on_phase_end(self, phase: dict[str, Any]) -> None:  # noqa: D102
        self.console.print(phase_end_line(phase, self.state.scale), highlight=False)

    def on_message(self, text: str) -> None:  # noqa: D102
        self.state.message(text)

    def on_run_end(self, summary: dict[str, Any]) -> None:  # noqa: D102
        if self._started:
            self._live.stop()
            self._started = False


def make_live_observer(
    *, stdout: Any = None, stderr: Any = None, deadline_s: float | None = None
) -> RunObserver:
    """The observer ``kvreplay run`` uses: ``LiveObserver`` on a terminal, else ``PlainObserver``.

    Args:
        stdout: Stream to test for a terminal (default ``sys.stdout``).
        stderr: Likewise (default ``sys.stderr``); the panel is drawn there.
        deadline_s: Stop-new deadline (s from the run start) for "time left", when
            the runner's ``on_run_start`` does not give one.
    """
    out, err = stdout or sys.stdout, stderr or sys.stderr
    try:
        tty = out.isatty() and err.isatty()
    except (AttributeError, ValueError):
        tty = False
    if tty:
        return LiveObserver(Console(file=err), deadline_s=deadline_s)
    return PlainObserver(err)
