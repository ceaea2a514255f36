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

__all__ = ["DATA", "DEMO_WORKLOAD", "bundled"]

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
