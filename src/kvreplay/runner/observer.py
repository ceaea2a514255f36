"""What the runner tells a live display while it runs (the consumer owns the contract).

The runner calls these hooks from its event loop; they must return quickly (no
I/O that can block for long). ``PlainObserver`` prints one line per event to
stderr, which is what CI logs and non-terminals get.
"""

from __future__ import annotations

import sys
from typing import Any, Protocol

from kvreplay.clock import model_time_scale

__all__ = [
    "CallbackObserver",
    "ForwardingObserver",
    "NullObserver",
    "PlainObserver",
    "RunObserver",
    "model_ms_text",
    "phase_end_line",
    "plan_time_scale",
    "replay_events",
    "slim_record",
]


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


def plan_time_scale(plan: dict[str, Any] | None) -> float | None:
    """The simulator time scale of a plan (``plan.json`` ``run.sim_time_scale``), or None.

    ``kvreplay.clock.model_time_scale`` of the plan's key: None for a real
    server and for a scale of 0 or 1.
    """
    return model_time_scale(((plan or {}).get("run") or {}).get("sim_time_scale"))


def model_ms_text(ms: float, scale: float) -> str:
    """A measured latency (ms) as the terminal shows it in model time, the scale stated.

    ``model_ms_text(5.9, 0.02)`` -> ``"295.0 ms (model ms, sim time scale 0.02)"``
    (measured / scale, one decimal); ``scale`` is a ``plan_time_scale``.
    """
    return f"{float(ms) / scale:.1f} ms (model ms, sim time scale {scale:g})"


def phase_end_line(phase: dict[str, Any], scale: float | None = None) -> str:
    """The terminal line for a finished phase (a summary phase dict); never a raw ``None``.

    ``phase replay: ok 52/52, TTFT p50 3.7 ms, cached 175848/190516 tokens``; a
    figure with no value reads ``n/a`` (``TTFT p50 n/a``). A phase that sent
    nothing because the run stopped first (``deferred``) reads ``phase replay:
    not run (identity_mismatch)``, the reason from the key ``not_run`` the
    runner adds for its observer (``aborted`` when absent). With ``scale``, a
    simulator time scale (``plan_time_scale``), the TTFT is in model ms
    (measured / scale), as in report.html, and the line says so:
    ``TTFT p50 295.0 ms (model ms, sim time scale 0.02)``. A phase in which a task on
    the host waited for a CPU 10% of the time or more ends with ``; host_busy (a task on
    the host waited for a CPU 61% of the phase)`` (``metrics.selfmeasure.host_busy_text``,
    the words of ``kvreplay compare``).
    """
    from kvreplay.metrics.selfmeasure import host_busy_text

    name = phase.get("name")
    if phase.get("deferred") and not phase.get("sent"):
        return f"phase {name}: not run ({phase.get('not_run') or 'aborted'})"
    p50 = (phase.get("ttft_ms") or {}).get("p50")
    tok = phase.get("tokens") or {}
    cached, prompt = (("n/a" if tok.get(k) is None else tok[k]) for k in ("cached", "prompt"))
    if p50 is None:
        ttft = "n/a"
    elif scale:
        ttft = model_ms_text(p50, scale)
    else:
        ttft = f"{p50} ms"
    client = phase.get("client")
    busy = host_busy_text(client if isinstance(client, dict) else None, load=False)
    return (
        f"phase {name}: ok {phase.get('ok')}/{phase.get('planned')},"
        f" TTFT p50 {ttft}, cached {cached}/{prompt} tokens" + (f"; {busy}" if busy else "")
    )


class PlainObserver(NullObserver):
    """One line per phase start/end, drain and notice, on stderr."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream or sys.stderr
        self.scale: float | None = None

    def on_run_start(self, plan: dict[str, Any], deadline_s: float | None) -> None:  # noqa: D102
        self.scale = plan_time_scale(plan)

    def _p(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def on_phase_start(self, name: str, planned: int, concurrency: int) -> None:  # noqa: D102
        self._p(f"phase {name}: {planned} requests at C{concurrency}")

    def on_drain(self, phase: str, result: dict[str, Any]) -> None:  # noqa: D102
        state = "passed" if result["passed"] else f"FAILED ({result.get('reason')})"
        self._p(f"phase {phase}: drain {state} after {result['waited_s']} s")

    def on_phase_end(self, phase: dict[str, Any]) -> None:  # noqa: D102
        self._p(phase_end_line(phase, self.scale))

    def on_message(self, text: str) -> None:  # noqa: D102
        self._p(text)


class CallbackObserver(PlainObserver):
    """``PlainObserver``'s lines handed to a callback (``kvreplay ab``'s progress inside a block).

    ``scale``: the simulator time scale when the plan does not state one (ab
    starts its own simulator); TTFT is then shown in model ms, as ``run`` does.
    """

    def __init__(self, say: Any, scale: float | None = None) -> None:
        super().__init__()
        self.say = say
        self.fixed_scale = model_time_scale(scale)

    def on_run_start(self, plan: dict[str, Any], deadline_s: float | None) -> None:  # noqa: D102
        super().on_run_start(plan, deadline_s)
        self.scale = self.scale or self.fixed_scale  # ab's sim: the plan does not carry its scale

    def _p(self, text: str) -> None:
        self.say(text)


_SLIM_KEYS = ("phase", "position", "sent", "status", "ttft_ns", "error", "worker")


def slim_record(rec: dict[str, Any]) -> dict[str, Any]:
    """The record keys a live display reads (``ProgressState.record``), for sending between processes."""
    out = {k: rec.get(k) for k in _SLIM_KEYS}
    out["usage"] = {"cached_tokens": (rec.get("usage") or {}).get("cached_tokens")}
    return out


class ForwardingObserver(NullObserver):
    """A worker's observer (``--workers``, ``--ray``): queues its events for the coordinator's display.

    Events are tuples: ``("phase", name, planned, concurrency)``, ``("start", phase,
    position)``, ``("rec", slim_record)``, ``("drain", phase, result)``, ``("msg", text)``.
    ``flush()`` hands the queued list to ``send`` (the worker calls it every 0.25 s and at
    each phase end), so a worker pays one message per interval, not one per request.

    Args:
        send: Called with a non-empty list of events.
    """

    def __init__(self, send: Any) -> None:
        self.send = send
        self.events: list[tuple] = []

    def flush(self) -> None:
        """Send the queued events, if any."""
        if self.events:
            events, self.events = self.events, []
            self.send(events)

    def on_phase_start(self, name: str, planned: int, concurrency: int) -> None:  # noqa: D102
        self.events.append(("phase", name, planned, concurrency))

    def on_request_start(self, phase: str, position: int) -> None:  # noqa: D102
        self.events.append(("start", phase, position))

    def on_record(self, rec: dict[str, Any]) -> None:  # noqa: D102
        self.events.append(("rec", slim_record(rec)))

    def on_drain(self, phase: str, result: dict[str, Any]) -> None:  # noqa: D102
        self.events.append(("drain", phase, result))

    def on_message(self, text: str) -> None:  # noqa: D102
        self.events.append(("msg", text))

    def on_phase_end(self, phase: dict[str, Any]) -> None:  # noqa: D102
        self.flush()

    def on_run_end(self, summary: dict[str, Any]) -> None:  # noqa: D102
        self.flush()


def replay_events(events: list[tuple], obs: RunObserver, phases_seen: set[str]) -> None:
    """Hand a worker's forwarded events to the coordinator's observer.

    A phase start is told once (the first worker to report it); phase ends come from
    the merge, where the phase's figures are known.
    """
    for ev in events:
        kind = ev[0]
        if kind == "phase":
            if ev[1] not in phases_seen:
                phases_seen.add(ev[1])
                obs.on_phase_start(ev[1], ev[2], ev[3])
        elif kind == "start":
            obs.on_request_start(ev[1], ev[2])
        elif kind == "rec":
            obs.on_record(ev[1])
        elif kind == "drain":
            obs.on_drain(ev[1], ev[2])
        elif kind == "msg":
            obs.on_message(ev[1])
