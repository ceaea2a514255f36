r"""A pytest plugin: assert a server's cache behaviour from your own test suite.

Installed with kvreplay (entry point ``pytest11``: ``kvreplay``), it adds the fixture
``kvreplay`` and two options:

``--kvreplay-target URL``
    replay against this server (its base URL, e.g. ``http://127.0.0.1:8000``);
``--kvreplay-sim``
    replay against the embedded simulator (time scale 0 unless a test passes ``sim=``).

Without either, a test that uses the fixture is skipped with the reason. Example::

    from kvreplay.pytest_plugin import KvreplayFixture

    def test_prefix_cache(kvreplay: KvreplayFixture) -> None:
        r = kvreplay.replay("fixtures/workloads/mtbench-52",
                            phases=["prime:forward:c1:first8", "replay:reverse:c1:first8"])
        assert r.phase("replay").cached_ratio >= 0.9

    $ pytest --kvreplay-target http://127.0.0.1:8000 --kvreplay-backend vllm

Against one shared server (``--kvreplay-target``), what an earlier test left in the
server's prefix cache is still there: a test that should fail can pass because another
warmed the cache first. ``kvreplay.replay(..., reset_cache=True)`` (or the phases of
``kvreplay.with_reset(phases)``) empties the server's prefix cache before the first phase
(the ``reset`` phase token: the backend's cache reset; a server that cannot reset marks
that phase invalid, never silently warm). ``--kvreplay-sim`` gives each test a fresh
simulator already.

A failing test's report gains a ``kvreplay`` section: each run's phase table and run
directory (runs are written under the test's ``tmp_path``, kept by pytest's usual
retention). ``--kvreplay-backend`` picks the counter adapter (default ``auto``).
This module imports only pytest at collection; kvreplay's API is imported when a
test first replays.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from typing import Unpack

    from kvreplay.api import PathLike, ReportMode, RunResult
    from kvreplay.options import RunOptions, SimOptions

    class FixtureOptions(RunOptions, total=False):
        """``kvreplay.replay``'s keywords the fixture passes on (``target`` defaults to the session's)."""

        target: str
        sim: SimOptions
        out: PathLike
        report: ReportMode
        quiet: bool
        plan: PathLike

__all__ = ["KvreplayFixture", "kvreplay"]

SKIP_REASON = "kvreplay: no target (give --kvreplay-target URL, or --kvreplay-sim for the embedded simulator)"
_RUNS = pytest.StashKey[list[tuple[str, str]]]()
"""Per test item: ``(run directory, phase table)`` of each run the fixture made."""


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--kvreplay-target``, ``--kvreplay-sim``, ``--kvreplay-backend``."""
    group = parser.getgroup("kvreplay", "kvreplay: replay workloads against a server")
    group.addoption("--kvreplay-target", default=None, metavar="URL",
                    help="base URL of the server the kvreplay fixture replays against")
    group.addoption("--kvreplay-sim", action="store_true", default=False,
                    help="replay against kvreplay's embedded simulator (time scale 0)")
    group.addoption("--kvreplay-backend", default="auto", metavar="NAME",
                    help="counter adapter for --kvreplay-target (auto, none, vllm, sglang, llamacpp...)")


def pytest_configure(config: pytest.Config) -> None:
    """Refuse options that contradict each other (issue 44): a run would silently ignore one of them.

    Raises:
        pytest.UsageError: ``--kvreplay-sim`` with ``--kvreplay-target`` (which one is meant is
            unknown), or a ``--kvreplay-backend`` that is no adapter (``auto``, ``none`` or a
            name of ``kvreplay.backends.backend_names``), with or without ``--kvreplay-sim``.
    """
    target = config.getoption("--kvreplay-target", None)
    if config.getoption("--kvreplay-sim", False) and target:
        raise pytest.UsageError("--kvreplay-sim and --kvreplay-target name two targets: give one of them")
    backend = config.getoption("--kvreplay-backend", "auto")
    if backend not in ("auto", "none"):
        from kvreplay.backends import backend_names

        if backend not in backend_names():
            raise pytest.UsageError(f"--kvreplay-backend {backend!r} is not a counter adapter: one of auto, none, "
                                    f"{', '.join(backend_names())}")


class KvreplayFixture:
    """What the ``kvreplay`` fixture gives a test: ``replay`` and ``probe`` bound to the chosen target.

    Attributes:
        target: ``"sim"`` or the server's base URL.
        backend: The counter adapter name.
    """

    def __init__(self, target: str, backend: str, out_root: Path, root: Path, runs: list[tuple[str, str]]) -> None:
        self.target = target
        self.backend = backend
        self._out_root = out_root
        self._root = root
        self._runs = runs

    def _workload(self, workload: str | os.PathLike[str]) -> str:
        """A relative workload path from the working directory, else from pytest's rootdir."""
        if str(workload).startswith("bundled:"):
            return str(workload)
        path = Path(workload)
        if not path.is_absolute() and not path.exists() and (self._root / path).exists():
            path = self._root / path
        return os.fspath(path)

    def _next_out(self, kind: str) -> Path:
        return self._out_root / f"{kind}{len(self._runs) + 1}"

    def _kwargs(self, options: dict[str, Any]) -> dict[str, Any]:
        options.setdefault("target", self.target)
        if options["target"] == "sim":
            options["sim"] = {"time_scale": 0, **(options.get("sim") or {})}
        else:
            options.setdefault("backend", self.backend)
        return options

    @staticmethod
    def with_reset(phases: Sequence[str]) -> list[str]:
        """The phases with the server's prefix cache emptied before the first one (its ``reset`` token).

        A baseline independent of what earlier tests left in a shared server's cache.

        Example:
            >>> KvreplayFixture.with_reset(["prime:forward:c1", "replay:reverse:c1"])
            ['prime:forward:c1:reset', 'replay:reverse:c1']
        """
        out = list(phases)
        if out and "reset" not in out[0].split(":"):
            out[0] = f"{out[0]}:reset"
        return out

    def replay(self, workload: str | os.PathLike[str], phases: Sequence[str], *, reset_cache: bool = False,
               **options: Unpack[FixtureOptions]) -> RunResult:
        """``kvreplay.replay`` against the session's target, into a fresh directory under ``tmp_path``.

        Args:
            workload: A workload folder or .jsonl file (relative: to the working directory, else
                to pytest's rootdir), or ``bundled:NAME``.
            phases: ``--phase`` strings, e.g. ``["prime:forward:c1:first8", "replay:reverse:c1:first8"]``.
            reset_cache: Empty the server's prefix cache before the first phase (``with_reset``).
            **options: Any other ``kvreplay.replay`` argument (``sim={...}``, ``read_timeout=...``), typed.

        Returns:
            The ``kvreplay.RunResult``.
        """
        from kvreplay.api import replay

        kw: dict[str, Any] = dict(options)
        out = kw.pop("out", None) or self._next_out("run")
        result = replay(self._workload(workload), phases=self.with_reset(phases) if reset_cache else list(phases),
                        out=out, **self._kwargs(kw))
        self._runs.append((str(result.run_dir), result.table()))
        return result

    async def replay_async(self, workload: str | os.PathLike[str], phases: Sequence[str], *,
                           reset_cache: bool = False, **options: Unpack[FixtureOptions]) -> RunResult:
        """``replay`` for async tests (``kvreplay.replay_async`` in the running loop)."""
        from kvreplay.api import replay_async

        kw: dict[str, Any] = dict(options)
        out = kw.pop("out", None) or self._next_out("run")
        result = await replay_async(self._workload(workload),
                                    phases=self.with_reset(phases) if reset_cache else list(phases), out=out,
                                    **self._kwargs(kw))
        self._runs.append((str(result.run_dir), result.table()))
        return result

    def probe(self, **options: Any) -> dict[str, Any]:
        """``kvreplay.probe`` against the session's target; the verdict (``verdict["out"]``: its directory)."""
        from kvreplay.api import probe

        out = options.pop("out", None) or self._next_out("probe")
        kw = self._kwargs(options)
        verdict = probe(kw.pop("target"), out=out, **kw)
        self._runs.append((str(verdict["out"]), str(verdict.get("plain", ""))))
        return verdict


@pytest.fixture
def kvreplay(request: pytest.FixtureRequest, tmp_path: Path) -> KvreplayFixture:
    """Replay workloads against ``--kvreplay-target`` (or the simulator with ``--kvreplay-sim``).

    Skipped with a reason when neither option is given.
    """
    config = request.config
    target = config.getoption("--kvreplay-target")
    if config.getoption("--kvreplay-sim"):
        target = target or "sim"
    if not target:
        pytest.skip(SKIP_REASON)
    runs: list[tuple[str, str]] = []
    request.node.stash[_RUNS] = runs
    return KvreplayFixture(target, config.getoption("--kvreplay-backend"), tmp_path / "kvreplay",
                           Path(config.rootpath), runs)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """On a failure, add a ``kvreplay`` section: every run's directory and phase table."""
    report = yield
    runs = item.stash.get(_RUNS, None)
    if runs and report.failed:
        text = "\n\n".join(f"run directory: {d}\n{table}" for d, table in runs)
        report.sections.append(("kvreplay runs", text))
    return report
