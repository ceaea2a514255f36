"""Fault injection specs: ``KIND[@N][:key=value,...]``.

``@N`` fires on the N-th generation request the simulator receives (1-based,
counted across restarts); without it a fault fires on every request, and with
``p=P,seed=S`` it fires at random with probability ``P`` from its own
``random.Random(S)`` (one draw per request, so a run is repeatable).

Kinds and their keys (durations are real seconds, not scaled by ``time_scale``):

=============  ============================================================
``http401``    reply HTTP 401 with an OpenAI-style authentication error
``http403``    reply HTTP 403 (permission denied)
``oom500``     reply HTTP 500 whose message names CUDA out of memory
``error-event`` after ``chunks=k`` content chunks (default 1) send
               ``data: {"error": {...}}`` then ``data: [DONE]`` (vLLM shape)
``cut``        after ``chunks=k`` content chunks (default 1) drop the connection
``stall``      sleep ``s`` seconds (default 1.0) ``at=first`` (before the first
               token, the default) or ``at=between`` (after ``chunks=k`` chunks)
``malformed``  after ``chunks=k`` chunks (default 1) send a ``data:`` line that
               is not JSON, then carry on
``restart``    before the request: counters to zero, new ``_created`` and
               ``process_start_time_seconds``, cache emptied; the request is
               then served by the restarted server
``identity``   before the request: ``what=build`` (default) changes the build
               string of ``/version``; ``what=model`` changes the model id
``busy-gauge`` hold ``vllm:num_requests_running`` one above the truth for
               ``s`` seconds (default 1.0) from the request's arrival
``die``        the server dies at the request: its connection is dropped
               before any response byte and the server stops listening
               (every later connection is refused), as a killed process
=============  ============================================================

Every kind also takes ``p`` and ``seed``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from kvreplay.errors import ConfigError

__all__ = ["FAULT_KINDS", "FaultSpec", "FaultValue", "Faults", "parse_fault"]

FaultValue = int | float | str
"""The type of a parsed fault parameter (each key's type is in ``FAULT_KINDS``)."""

FAULT_KINDS: dict[str, dict[str, type[int] | type[float] | type[str]]] = {
    "http401": {},
    "http403": {},
    "oom500": {},
    "error-event": {"chunks": int},
    "cut": {"chunks": int},
    "stall": {"s": float, "at": str, "chunks": int},
    "malformed": {"chunks": int},
    "restart": {},
    "identity": {"what": str},
    "busy-gauge": {"s": float},
    "die": {},
}
"""Kind -> its own keys and their types (``p`` and ``seed`` are common)."""

_CHOICES = {"at": ("first", "between"), "what": ("build", "model")}


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultSpec:
    """One parsed ``--fault`` value.

    Attributes:
        kind: One of ``FAULT_KINDS``.
        at_request: Fire only on this request (1-based), or None.
        p: Probability per request when random, else None.
        seed: Seed of the random draws (default 0).
        params: The kind's own keys (e.g. ``chunks``, ``s``, ``at``).
        text: The spec as written.
    """

    kind: str
    at_request: int | None = None
    p: float | None = None
    seed: int = 0
    params: dict[str, FaultValue] = field(default_factory=dict)
    text: str = ""

    def get(self, key: str, default: FaultValue) -> FaultValue:
        """A parameter, or ``default`` when the spec does not set it."""
        return self.params.get(key, default)


def parse_fault(text: str) -> FaultSpec:
    """Parse ``KIND[@N][:key=value,...]``.

    Args:
        text: The spec, e.g. ``"cut@3:chunks=2"`` or ``"oom500:p=0.1,seed=7"``.

    Returns:
        The parsed spec.

    Raises:
        ConfigError: Unknown kind or key, bad number, ``@N`` < 1, ``p`` outside
            0..1, or both ``@N`` and ``p``.
    """
    head, _, tail = text.strip().partition(":")
    kind, _, at = head.partition("@")
    kind = kind.strip()
    if kind not in FAULT_KINDS:
        raise ConfigError(f"unknown fault kind {kind!r} (known: {', '.join(FAULT_KINDS)})", field="fault")
    at_request = None
    if at:
        try:
            at_request = int(at)
        except ValueError:
            raise ConfigError(f"fault {text!r}: @N must be an integer", field="fault") from None
        if at_request < 1:
            raise ConfigError(f"fault {text!r}: @N is 1-based", field="fault")
    types: dict[str, type[int] | type[float] | type[str]] = dict(FAULT_KINDS[kind], p=float, seed=int)
    params: dict[str, FaultValue] = {}
    for item in filter(None, (x.strip() for x in tail.split(","))):
        key, eq, raw = item.partition("=")
        key = key.strip()
        if not eq or key not in types:
            raise ConfigError(
                f"fault {text!r}: bad key {key!r} (keys of {kind}: {', '.join(types)})", field="fault"
            )
        try:
            value = types[key](raw.strip())
        except ValueError:
            raise ConfigError(f"fault {text!r}: {key}={raw!r} is not a {types[key].__name__}", field="fault") from None
        if key in _CHOICES and value not in _CHOICES[key]:
            raise ConfigError(f"fault {text!r}: {key} must be one of {_CHOICES[key]}", field="fault")
        if isinstance(value, (int, float)) and key != "seed" and value < 0:
            raise ConfigError(f"fault {text!r}: {key} must be >= 0", field="fault")
        params[key] = value
    p_value = params.pop("p", None)
    p = None if p_value is None else float(p_value)
    seed = int(params.pop("seed", 0))
    if p is not None and not 0.0 <= p <= 1.0:
        raise ConfigError(f"fault {text!r}: p must be within 0..1", field="fault")
    if p is not None and at_request is not None:
        raise ConfigError(f"fault {text!r}: give @N or p, not both", field="fault")
    return FaultSpec(kind=kind, at_request=at_request, p=p, seed=seed, params=params, text=text.strip())


class Faults:
    """Decides which faults fire on each request.

    Args:
        specs: The parsed specs, in the order given.
    """

    def __init__(self, specs: tuple[FaultSpec, ...] | list[FaultSpec]) -> None:
        self.specs = tuple(specs)
        self._rngs = [random.Random(s.seed) if s.p is not None else None for s in self.specs]

    def firing(self, request_no: int) -> list[FaultSpec]:
        """The faults that fire on request ``request_no`` (1-based).

        Call once per request, in request order: random faults draw once per call.
        """
        out = []
        for spec, rng in zip(self.specs, self._rngs, strict=True):
            if rng is not None:
                if rng.random() < float(spec.p or 0.0):
                    out.append(spec)
            elif spec.at_request is None or spec.at_request == request_no:
                out.append(spec)
        return out
