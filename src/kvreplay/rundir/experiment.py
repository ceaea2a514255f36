"""The experiment directory's own files: ``experiment.json``, each step's ``step.json``, ``result.json``.

Layout in ``kvreplay.rundir.names``. ``experiment.json`` (the frozen
experiment, ``kvreplay.experiments.window.frozen``) is written once, before
anything runs, and never over an existing one; each step's log ``step.json``
(``{"experiment_sha256", ...the step's result}``) when the step ends;
``result.json`` (``kvreplay.experiments.publish``) at the end. All JSON writes
are atomic and redact registered secrets (``safe_io.atomic_write_json``).

Crash safety (issue 27): ``experiment.toml`` is a copy of the experiment file's text,
written beside ``experiment.json`` (``--resume`` parses it, as if at the original
path); ``progress.json`` is rewritten atomically at the window's start and at each
step's start and end::

    {"experiment_sha256", "started" (UTC), "wall_anchor_ns" (Unix ns at the window's
     start: the deadlines of a resumed window count from it), "snapshot_identity",
     "snapshot_note", "identity" (the server's identity last known), "aborted",
     "resumed": [UTC, ...], "steps": {name: the step's result, "status": "running"
     while it runs}}

so that after kill -9 ``kvreplay report EXP_DIR`` can rebuild the publication and
``kvreplay experiment --resume EXP_DIR`` can go on. ``set_aside_step_dir`` keeps the
folder of a step cut by the kill under a new name before the step runs again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvreplay.errors import ConfigError
from kvreplay.redaction import redact
from kvreplay.rundir.jsonfile import read_object
from kvreplay.rundir.names import EXPERIMENT, PROGRESS, RESULT, SOURCE, STEP_LOG, WORKLOADS
from kvreplay.safe_io import atomic_write_bytes, atomic_write_json, atomic_write_text

__all__ = [
    "inside",
    "read_experiment",
    "read_progress",
    "read_source",
    "read_result",
    "read_step_log",
    "set_aside_step_dir",
    "write_experiment",
    "write_progress",
    "write_source",
    "write_result",
    "write_step_log",
    "write_workloads",
    "read_workloads",
]


def inside(out: Path, rel: Any, *, file: str, field: str) -> str:
    """``rel`` when it names a folder inside the experiment directory ``out``, else a refusal.

    A step's ``dir`` (experiment.json), ``run_dir`` (result.json, progress.json) is a
    relative path such as ``steps/00-A``; a tampered or foreign file could name
    ``../outside`` or ``/etc``, and ``report`` or ``--resume`` would then write there.
    Checked on the path as written and as resolved (symbolic links followed).

    Raises:
        ConfigError: not a string, absolute, with a ``..`` part, or resolving outside ``out``
            (``path`` = the file, ``field`` as given).
    """
    ok = isinstance(rel, str) and rel and not Path(rel).is_absolute() and ".." not in Path(rel).parts
    if ok:
        root = out.resolve()
        target = (out / rel).resolve()
        ok = target == root or root in target.parents
    if not ok:
        raise ConfigError(f"{str(rel)[:200]!r} is not a folder inside the experiment directory (a file changed "
                          "by hand or from elsewhere?); nothing is written outside it", path=out / file, field=field)
    return rel


def _checked_dirs(out: Path, doc: dict[str, Any] | None, file: str, key: str) -> dict[str, Any] | None:
    """``doc`` after ``inside`` of every step's ``key`` (a list of steps, or progress.json's name -> step)."""
    if doc is None:
        return None
    steps = doc.get("steps")
    items = (list(enumerate(steps)) if isinstance(steps, list)
             else list(steps.items()) if isinstance(steps, dict) else [])
    for i, st in items:
        if isinstance(st, dict) and st.get(key) is not None:
            inside(out, st[key], file=file, field=f"steps[{i if isinstance(i, int) else repr(i)}].{key}")
    return doc


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
    """``out/experiment.json`` as a dict; None when missing, unreadable or not a JSON object.

    Raises:
        ConfigError: a step's ``dir`` outside the directory (``inside``).
    """
    return _checked_dirs(out, read_object(out / EXPERIMENT), EXPERIMENT, "dir")


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
    """``out/result.json`` as a dict; None when missing, unreadable or not a JSON object.

    Raises:
        ConfigError: a step's ``run_dir`` outside the directory (``inside``).
    """
    return _checked_dirs(out, read_object(out / RESULT), RESULT, "run_dir")


def write_source(out: Path, text: str, raw: bytes | None = None) -> None:
    """Write ``out/experiment.toml``: the experiment file's exact bytes, as frozen (``--resume`` reads it).

    Args:
        out: The experiment directory.
        text: The file's text.
        raw: Its exact bytes (written as they are; None: ``text`` in UTF-8). A file holding a
            registered secret is written redacted instead (never the secret).

    Raises:
        OSError: it cannot be written.
    """
    if redact(text) != text or raw is None or raw.decode("utf-8", "replace") != text:
        atomic_write_text(out / SOURCE, text)
    else:
        atomic_write_bytes(out / SOURCE, raw)


def write_workloads(out: Path, workloads: list[tuple[list[str], Any]]) -> None:
    """Write ``out/workloads.json``: each workload of the experiment and the hash of every body.

    Args:
        out: The experiment directory.
        workloads: ``(used by, Workload)`` pairs; ``used by`` is ``["workload"]`` for the
            experiment's own and the names of the steps that name it for a step's own.

    The document::

        {"workloads": [{"used_by": [...], "path", "n_bodies", "sha256" (the workload's hash,
          as experiment.json), "bodies": [{"index", "source", "sha256", "bytes"}, ...]}]}

    Raises:
        OSError: it cannot be written.
    """
    atomic_write_json(out / WORKLOADS, {"workloads": [
        {"used_by": list(used), "path": str(wl.path), "n_bodies": len(wl.bodies), "sha256": wl.sha256,
         "bodies": [{"index": b.index, "source": b.source, "sha256": b.sha256, "bytes": len(b.raw)}
                    for b in wl.bodies]}
        for used, wl in workloads]})


def read_workloads(out: Path) -> dict[str, Any] | None:
    """``out/workloads.json`` as a dict; None when missing, unreadable or not a JSON object."""
    return read_object(out / WORKLOADS)


def read_source(out: Path) -> str | None:
    """``out/experiment.toml``'s text; None when missing or unreadable."""
    try:
        return (out / SOURCE).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def write_progress(out: Path, doc: dict[str, Any]) -> None:
    """Write ``out/progress.json`` atomically (the window's progress, module docstring).

    Raises:
        OSError: it cannot be written.
    """
    atomic_write_json(out / PROGRESS, doc)


def read_progress(out: Path) -> dict[str, Any] | None:
    """``out/progress.json`` as a dict; None when missing, unreadable or not a JSON object.

    Raises:
        ConfigError: the file is there but is not a JSON object (truncated, or changed by
            hand): which steps ran cannot be told, and reading it as missing would hide the
            records on disk; a step's ``run_dir`` outside the directory (``inside``).
    """
    doc = read_object(out / PROGRESS)
    if doc is None and (out / PROGRESS).exists():
        raise ConfigError("not a readable JSON object (truncated, or changed by hand): which steps ran cannot be "
                          "told from it, so nothing is rebuilt or resumed; the step folders under steps/ keep "
                          "their records (kvreplay report DIR on each)", path=out / PROGRESS)
    return _checked_dirs(out, doc, PROGRESS, "run_dir")


def set_aside_step_dir(out: Path, step_dir: str) -> str | None:
    """Rename a step's folder to ``<step_dir>.interrupted`` (``-2``, ``-3``, ... when taken).

    Returns:
        The new folder relative to ``out``; None when the step has no folder.

    Raises:
        OSError: it cannot be renamed.
    """
    src = out / inside(out, step_dir, file=EXPERIMENT, field="dir")
    if not src.exists():
        return None
    n = 1
    while True:
        name = f"{step_dir}.interrupted" + ("" if n == 1 else f"-{n}")
        if not (out / name).exists():
            break
        n += 1
    src.rename(out / name)
    return name
