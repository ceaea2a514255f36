"""The namespace a command would parse, built from Python keyword arguments (shared by the API's entry points)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import Any

from kvreplay.errors import ConfigError

PathLike = str | os.PathLike[str]


def namespace_for(add_arguments: Any, values: Mapping[str, Any], sim: Mapping[str, Any] | None) -> argparse.Namespace:
    """The namespace a command would parse: its declared defaults, then ``values``, then ``sim``.

    Args:
        add_arguments: The command's option declaration (``kvreplay.api.run.add_arguments``...).
        values: Options by their ``dest`` name (``read_timeout``, ``backend``...).
        sim: Simulator options without the ``sim_`` prefix (``time_scale``, ``cache_entries``...).

    Raises:
        ConfigError: an option the command does not have (field: its name).
    """
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    args = _defaults(parser)
    for key, value in values.items():
        if not hasattr(args, key):
            raise ConfigError(f"unknown option {key!r}", field=key)
        setattr(args, key, value)
    for key, value in (sim or {}).items():
        name = "sim_" + key.replace("-", "_")
        if not hasattr(args, name):
            raise ConfigError(f"unknown simulator option {key!r}", field=f"sim.{key}")
        setattr(args, name, value)
    return args


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
