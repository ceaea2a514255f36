"""``[gates]``: what every body of every workload must hold before anything is sent.

TOML (top level of an experiment file)::

    [gates]
    body = {max_tokens = 2048, temperature = 1, top_p = 0.95, reasoning_effort = "max"}
    fixed_bytes = true

``body``: field = value pairs every body of every workload of the experiment (the main
``workload`` and each step's own) must carry, checked when the experiment is frozen,
before anything is written or sent; a dotted field (``"reasoning.effort"``) reads a
nested object. Numbers compare by value (``1`` equals ``1.0``), ``true``/``false``
only equal themselves, strings exactly; a missing field differs. The first body that
differs is named with its file (and line, for ``.jsonl``), its index and the field
(``ConfigError``: exit 2).

``fixed_bytes``: just before each sending step, the step's workload is read again from
disk and its hash compared with the one frozen into ``experiment.json``; a step whose
bodies changed since the freeze is refused (``failed``, reason ``fixed_bytes: ...``)
and sends nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvreplay.errors import ConfigError, KvreplayError

__all__ = ["GateSpec", "body_gate_failure", "check_body_gates", "fixed_bytes_failure", "parse_gates"]


@dataclass(frozen=True, slots=True)
class GateSpec:
    """``[gates]`` (module docstring).

    Attributes:
        body: ``(field, value)`` pairs, in file order.
        fixed_bytes: Refuse a sending step whose workload's bytes changed since the freeze.
        line: Line of ``[gates]`` in the file (None if unknown).
    """

    body: tuple[tuple[str, Any], ...] = ()
    fixed_bytes: bool = False
    line: int | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        """JSON form (``experiment.json``'s ``gates``)."""
        return {"body": dict(self.body), "fixed_bytes": self.fixed_bytes}

    def describe(self) -> str:
        """One line for the dry-run: ``body max_tokens=2048, temperature=1; fixed_bytes``."""
        parts = []
        if self.body:
            parts.append("body " + ", ".join(f"{k}={v!r}" for k, v in self.body))
        if self.fixed_bytes:
            parts.append("fixed_bytes")
        return "; ".join(parts) or "none"


def parse_gates(data: Any, *, path: Path, line: int | None) -> GateSpec:
    """``[gates]`` of the file (None: no gates).

    Raises:
        ConfigError: not a table, an unknown key, ``body`` not a table of scalars, or
            ``fixed_bytes`` not a bool (naming ``gates.KEY``).
    """
    if data is None:
        return GateSpec()
    if not isinstance(data, dict):
        raise ConfigError("must be a table", path=path, line=line, field="gates")
    unknown = sorted(set(data) - {"body", "fixed_bytes"})
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r}", path=path, line=line, field=f"gates.{unknown[0]}")
    body = data.get("body", {})
    if not isinstance(body, dict):
        raise ConfigError("body is a table of FIELD = VALUE", path=path, line=line, field="gates.body")
    for k, v in body.items():
        if not isinstance(v, (str, int, float, bool)):
            raise ConfigError("a body gate is a string, number or true/false", path=path, line=line,
                              field=f"gates.body.{k}")
    fixed = data.get("fixed_bytes", False)
    if not isinstance(fixed, bool):
        raise ConfigError("must be true or false", path=path, line=line, field="gates.fixed_bytes")
    return GateSpec(tuple(body.items()), fixed, line)


_MISSING = object()


def _lookup(obj: Any, dotted: str) -> Any:
    if isinstance(obj, dict) and dotted in obj:
        return obj[dotted]
    for part in dotted.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return _MISSING
        obj = obj[part]
    return obj


def _same(want: Any, got: Any) -> bool:
    if isinstance(want, bool) or isinstance(got, bool):
        return isinstance(want, bool) and isinstance(got, bool) and want == got
    if isinstance(want, (int, float)):
        return isinstance(got, (int, float)) and float(got) == float(want)
    return isinstance(got, str) and got == want


def body_gate_failure(gates: GateSpec, workload: Any) -> tuple[Any, str, Any, Any] | None:
    """The first body of ``workload`` that breaks a body gate: ``(body, field, wanted, found)``.

    ``found`` is the string ``"missing"`` when the body has no such field. None when every body holds.
    """
    if not gates.body:
        return None
    for body in workload.bodies:
        data = body.decoded()
        for fld, want in gates.body:
            got = _lookup(data, fld)
            if got is _MISSING or not _same(want, got):
                return body, fld, want, "missing" if got is _MISSING else got
    return None


def check_body_gates(gates: GateSpec, workloads: list[tuple[str, Any]], path: Path) -> None:
    """Assert the body gates on every body of every workload, before anything is written or sent.

    Args:
        gates: ``[gates]``.
        workloads: ``(where it is named, Workload)`` pairs: ``"workload"`` for the main one,
            ``"step[3].workload"`` for a step's own.
        path: The experiment file (named in the message).

    Raises:
        ConfigError: the first body that differs, at its file (and line), field
            ``gates.body.FIELD``, the message naming the experiment file, the body and both values.
    """
    for where, wl in workloads:
        bad = body_gate_failure(gates, wl)
        if bad is None:
            continue
        body, fld, want, got = bad
        name, _, line = body.source.partition(":")
        base = Path(wl.path)
        file = base / name if base.is_dir() else base
        raise ConfigError(f"body {body.index} ({body.source}) of {where} {wl.path}: {fld} is "
                          f"{'missing' if got == 'missing' else repr(got)}, the gate in {path} wants {want!r}",
                          path=file, line=int(line) if line else None, field=f"gates.body.{fld}")


def fixed_bytes_failure(path: str, frozen_sha256: str, *, max_body_bytes: int) -> str | None:
    """``fixed_bytes``: why the workload at ``path`` no longer matches its frozen hash, else None.

    Reads the workload again from disk (``workload.load_workload``).
    """
    from kvreplay.workload import load_workload

    try:
        now = load_workload(path, max_body_bytes=max_body_bytes)
    except KvreplayError as exc:
        return f"fixed_bytes: the workload {path} no longer loads: {exc}"
    if now.sha256 != frozen_sha256:
        return (f"fixed_bytes: the workload {path} changed since the freeze (sha256 {frozen_sha256[:12]} frozen, "
                f"{now.sha256[:12]} now); the step sends nothing")
    return None
