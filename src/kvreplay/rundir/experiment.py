"""The experiment directory's own files: ``experiment.json``, each step's ``step.json``, ``result.json``.

Layout in ``kvreplay.rundir.names``. ``experiment.json`` (the frozen
experiment, ``kvreplay.experiments.window.frozen``) is written once, before
anything runs, and never over an existing one; each step's log ``step.json``
(``{"experiment_sha256", ...the step's result}``) when the step ends;
``result.json`` (``kvreplay.experiments.publish``) at the end. All JSON writes
are atomic and redact registered secrets (``safe_io.atomic_write_json``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvreplay.errors import ConfigError
from kvreplay.rundir.jsonfile import read_object
from kvreplay.rundir.names import EXPERIMENT, RESULT, STEP_LOG
from kvreplay.safe_io import atomic_write_json

__all__ = [
    "read_experiment",
    "read_result",
    "read_step_log",
    "write_experiment",
    "write_result",
    "write_step_log",
]


def write_experiment(out: Path, doc: dict[str, Any]) -> Path:
    """Write ``out/experiment.json`` (the folder is created); refuses a folder that already holds one.

    Returns:
        The file's path.

    Raises:
        ConfigError: ``out`` already holds experiment.json (choose a new ``--out``).
        OSError: it cannot be written.
    """
    path = out / EXPERIMENT
    if path.exists():
        raise ConfigError(f"directory already holds {EXPERIMENT}; choose a new --out", path=out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, doc)
    return path


def read_experiment(out: Path) -> dict[str, Any] | None:
    """``out/experiment.json`` as a dict; None when missing, unreadable or not a JSON object."""
    return read_object(out / EXPERIMENT)


def write_step_log(out: Path, step_dir: str, doc: dict[str, Any]) -> None:
    """Write the step log ``out/<step_dir>/step.json`` (the folder is created).

    Args:
        out: The experiment directory.
        step_dir: The step's folder relative to it (``names.step_dir``: ``steps/NN-name``).
        doc: The log (``experiment_sha256`` and the step's result).

    Raises:
        OSError: it cannot be written.
    """
    d = out / step_dir
    d.mkdir(parents=True, exist_ok=True)
    atomic_write_json(d / STEP_LOG, doc)


def read_step_log(out: Path, step_dir: str) -> dict[str, Any] | None:
    """A step's ``step.json`` as a dict; None when missing, unreadable or not a JSON object."""
    return read_object(out / step_dir / STEP_LOG)


def write_result(out: Path, result: dict[str, Any]) -> None:
    """Write ``out/result.json``.

    Raises:
        OSError: it cannot be written.
    """
    atomic_write_json(out / RESULT, result)


def read_result(out: Path) -> dict[str, Any] | None:
    """``out/result.json`` as a dict; None when missing, unreadable or not a JSON object."""
    return read_object(out / RESULT)
