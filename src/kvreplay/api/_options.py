"""The namespace a command would parse, built from Python keyword arguments (shared by the API's entry points)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import Any

from kvreplay.errors import ConfigError

PathLike = str | os.PathLike[str]


def namespace_for(add_arguments: Any, values: Mapping[str, Any], sim: Mapping[str, Any] | None, *,
                  declared: type | None = None, sim_declared: type | None = None) -> argparse.Namespace:
    """The namespace a command would parse: its declared defaults, then ``values``, then ``sim``.

    Args:
        add_arguments: The command's option declaration (``kvreplay.api.run.add_arguments``...).
        values: Options by their ``dest`` name (``read_timeout``, ``backend``...).
        sim: Simulator options without the ``sim_`` prefix (``time_scale``, ``cache_entries``...).
        declared: The ``TypedDict`` typing ``values`` (``kvreplay.options.RunOptions``): each key it
            declares is checked against its type, then through the command line's own check of
            that flag (its range: ``read_timeout=-1`` is refused as ``--read-timeout -1`` is).
        sim_declared: Likewise for ``sim`` (``kvreplay.options.SimOptions``).

    Raises:
        ConfigError: an option the command does not have, or a value of the wrong type or out of
            range (field: the keyword; ``sim.NAME`` for a simulator option).
    """
    from kvreplay.options import check_value

    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    args = _defaults(parser)
    actions = {a.dest: a for a in parser._actions}  # argparse has no public view of its actions
    for key, value in values.items():
        if not hasattr(args, key):
            raise ConfigError(f"unknown option {key!r}", field=key)
        if declared is not None and key in declared.__annotations__:
            check_value(key, value, declared)
            value = _as_command_line_checks(actions[key], value, key)
        setattr(args, key, value)
    if sim is not None and not isinstance(sim, Mapping):
        raise ConfigError(f"sim is a dict of simulator options, got {type(sim).__name__}", field="sim")
    for key, value in (sim or {}).items():
        name = "sim_" + key.replace("-", "_")
        if not hasattr(args, name):
            raise ConfigError(f"unknown simulator option {key!r}", field=f"sim.{key}")
        if sim_declared is not None:
            check_value(key.replace("-", "_"), value, sim_declared, field=f"sim.{key}")
            value = _as_command_line_checks(actions[name], value, f"sim.{key}")
        setattr(args, name, value)
    return args


def _as_command_line_checks(action: argparse.Action, value: Any, field: str) -> Any:
    """``value`` (of the right Python type) through the flag's own ``type=`` check; the value to keep.

    Numbers keep their value (the check only refuses, e.g. a negative duration); each item of
    a repeatable flag takes the parsed form the command line gives it (``abort_if``'s
    ``"host_bytes>34e9"`` becomes ``("host_bytes", ">", 34e9)``).

    Raises:
        ConfigError: the flag's check refused it (its message; field ``field``).
    """
    check = action.type
    if value is None or check is None or check is str or not callable(check):
        return value
    try:
        if isinstance(value, list | tuple):
            return [check(v) for v in value]
        if isinstance(value, bool):
            return value
        if isinstance(value, float):
            text = repr(value) if "e" not in repr(value) else f"{value:.20f}"
            check(text)
        else:
            check(str(value))
    except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
        raise ConfigError(str(exc) or f"invalid value {value!r}", field=field) from None
    return value


def fspath(value: PathLike | None) -> str | None:
    """``os.fspath`` of a path given, None kept."""
    return None if value is None else os.fspath(value)


def _defaults(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The declared defaults of every option, as ``parse_args([])`` would set them, required ones included.

    String defaults go through the option's ``type`` as argparse does.
    """
    args = argparse.Namespace()
    for action in parser._actions:  # argparse has no public view of its actions
        if action.dest is not argparse.SUPPRESS and action.default is not argparse.SUPPRESS:
            default = action.default
            if isinstance(default, str) and action.type is not None and callable(action.type):
                default = action.type(default)  # argparse converts string defaults the same way
            setattr(args, action.dest, default)
    return args
