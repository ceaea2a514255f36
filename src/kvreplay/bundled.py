"""Files shipped inside the package (``kvreplay/data/``): the demo workload and example plans.

The wheel and the sdist carry them as package data, so ``kvreplay demo`` and the
examples work from any directory, without a clone. The project's ``fixtures/``
hold the same files for the tests (``tests/unit/test_bundled_data.py`` checks
they are identical).

Layout (relative to :data:`DATA`)::

    workloads/mtbench-52/   the demo workload (52 chat bodies, MT-Bench prompts)
    plans/                  example TOML plans
    experiments/            example experiment files (their workload paths are relative to the file)
    sim/                    example simulator configurations
"""

from pathlib import Path

__all__ = ["DATA", "DEMO_WORKLOAD", "PREFIX", "bundled", "resolve"]

DATA = Path(__file__).resolve().parent / "data"
"""The folder of the bundled files inside the installed package."""

DEMO_WORKLOAD = DATA / "workloads" / "mtbench-52"
"""The demo workload (``kvreplay demo``): a folder of 52 ``*.json`` request bodies."""


def bundled(relative: str) -> Path:
    """The path of a bundled file, e.g. ``bundled("experiments/probe-sizing.toml")``.

    Raises:
        FileNotFoundError: nothing by that name ships with the package.
    """
    path = DATA / relative
    if not path.exists():
        raise FileNotFoundError(f"no bundled file {relative!r} under {DATA}")
    return path


PREFIX = "bundled:"
"""A path given as ``bundled:NAME`` names a bundled file (``resolve``): ``kvreplay run bundled:mtbench-52``
works from any directory, without a clone's ``fixtures/``."""

_FOLDERS = ("", "workloads", "plans", "experiments", "sim")


def resolve(path: str | Path) -> str | Path:
    """``bundled:NAME`` -> the bundled file's path; any other path unchanged.

    NAME is looked up under :data:`DATA` as given, then under ``workloads/``, ``plans/``,
    ``experiments/`` and ``sim/`` (``bundled:mtbench-52`` is ``workloads/mtbench-52``,
    ``bundled:host-cache.toml`` is ``plans/host-cache.toml``).

    Raises:
        FileNotFoundError: no bundled file has that name (the message lists the workloads).
    """
    text = str(path)
    if not text.startswith(PREFIX):
        return path
    name = text[len(PREFIX):].strip("/")
    for folder in _FOLDERS:
        candidate = DATA / folder / name
        if name and ".." not in Path(name).parts and candidate.exists():
            return candidate
    workloads = ", ".join(sorted(p.name for p in (DATA / "workloads").iterdir() if not p.name.startswith(".")))
    raise FileNotFoundError(f"no bundled file {name!r} (bundled workloads: {workloads})")
