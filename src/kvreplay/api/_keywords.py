"""A command's typed options built from Python keyword arguments (shared by the API's entry points).

``config_for(SweepConfig, values, sim)`` is what the command line would have parsed: the
dataclass's defaults (the flags' defaults: one declaration, ``kvreplay.options``), then
``values``, then the simulator options of ``sim``, each named as the command line names it
and, where a ``TypedDict`` of the keywords is given, checked for its type and through the
flag's own check (``read_timeout=-1`` is refused as ``--read-timeout -1`` is).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any, TypeVar

from kvreplay.errors import ConfigError

__all__ = ["SIM_DEFAULTS", "checked", "config_for"]

C = TypeVar("C")

SIM_DEFAULTS: dict[str, Any] = {"replicas": 1}
"""Simulator options the command line sets when not given (``--sim-replicas`` defaults to 1)."""


def config_for(cls: type[C], values: Mapping[str, Any], sim: Mapping[str, Any] | None = None, *,
               declared: type | None = None, sim_declared: type | None = None, fleet: bool = True) -> C:
    """An options dataclass (``RunConfig`` or a subclass, or a command's ``XxxConfig``) from keywords.

    Args:
        cls: The dataclass; its fields are the options by their ``dest`` name.
        values: Options by name (``read_timeout``, ``backend``...).
        sim: Simulator options without the ``sim_`` prefix (``time_scale``...); only for a
            class with a ``sim`` field.
        declared: The ``TypedDict`` typing ``values``: each key it declares is checked against its
            type, then through the field's declared check.
        sim_declared: Likewise for ``sim`` (``kvreplay.options.SimOptions``).
        fleet: Whether the command has the embedded fleet's options (``replicas``, ``router``:
            run and sweep; ``SIM_DEFAULTS`` then apply); without, they are unknown.

    Raises:
        ConfigError: an option the command does not have, or a value of the wrong type or out of
            range (field: the keyword; ``sim.NAME`` for a simulator option).
    """
    from kvreplay.options import check_value

    own = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
    kw: dict[str, Any] = {}
    for key, value in values.items():
        f = own.get(key)
        if f is None or key == "sim":
            raise ConfigError(f"unknown option {key!r}", field=key)
        if declared is not None and key in declared.__annotations__:
            check_value(key, value, declared)
            value = checked(f.metadata.get("check"), value, key, repeatable=f.metadata.get("action") == "append")
        kw[key] = value
    if "sim" in own:
        kw["sim"] = _sim(sim, sim_declared, fleet)
    elif sim:
        raise ConfigError("this command takes no simulator options", field="sim")
    return cls(**kw)


def _sim(sim: Mapping[str, Any] | None, sim_declared: type | None, fleet: bool) -> dict[str, Any]:
    from kvreplay.api.fleet import sim_option_check
    from kvreplay.options import SIM_KEYWORDS, check_value
    from kvreplay.options.run import SIM_FLEET_KEYWORDS

    if sim is not None and not isinstance(sim, Mapping):
        raise ConfigError(f"sim is a dict of simulator options, got {type(sim).__name__}", field="sim")
    known = SIM_KEYWORDS if fleet else SIM_KEYWORDS - SIM_FLEET_KEYWORDS
    out = dict(SIM_DEFAULTS) if fleet else {}
    for key, value in (sim or {}).items():
        name = key.replace("-", "_")
        if name not in known:
            raise ConfigError(f"unknown simulator option {key!r}", field=f"sim.{key}")
        if sim_declared is not None:
            check_value(name, value, sim_declared, field=f"sim.{key}")
            value = checked(sim_option_check(name), value, f"sim.{key}")
        if value is not None:
            out[name] = value
        else:
            out.pop(name, None)
    return out


def checked(check: Callable[[str], Any] | None, value: Any, field: str, *, repeatable: bool = True) -> Any:
    """``value`` (of the right Python type) through a flag's own ``type=`` check; the value to keep.

    Numbers keep their value (the check only refuses, e.g. a negative duration); text takes the
    parsed form the command line gives it (``"8k"`` tokens becomes 8192), and so does each item
    of a repeatable flag (``abort_if``'s ``"host_bytes>34e9"`` becomes ``("host_bytes", ">", 34e9)``);
    a list given to a flag that is not repeatable is checked as its comma-separated text
    (``sizes=[1024, 2048]`` as ``--sizes 1024,2048``).

    Raises:
        ConfigError: the check refused it (its message; field ``field``).
    """
    from kvreplay.argtypes import CheckError

    if value is None or check is None or check is str or not callable(check):
        return value
    try:
        if isinstance(value, list | tuple):
            if not repeatable:
                return check(",".join(str(v) for v in value))
            return [check(v) for v in value]
        if isinstance(value, str):
            return check(value)
        if isinstance(value, bool):
            return value
        if isinstance(value, float):
            text = repr(value) if "e" not in repr(value) else f"{value:.20f}"
            check(text)
        else:
            check(str(value))
    except (CheckError, ValueError, TypeError) as exc:
        raise ConfigError(str(exc) or f"invalid value {value!r}", field=field) from None
    return value
