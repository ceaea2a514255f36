"""Every ```python block of README.md and docs/**/*.md type-checks under ``mypy --strict`` and runs.

The blocks are taken as written; what a block needs that the page does not show is said in
an HTML comment on the line just above its fence (invisible on the rendered page), as
``<!-- docs-test: DIRECTIVE; DIRECTIVE ... -->``:

- ``continue``: the block goes on from the page's previous block (one program; a program
  runs only if its first block does);
- ``check-only (why)``: type-checked, not run (it needs a server or a run directory, or
  takes long: with ``continue``, the program runs up to this block);
- ``async``: top-level ``await`` / ``async with``: checked and run inside an ``async def``;
- ``pytest``: a test function taking a fixture (checked with untyped definitions allowed,
  since a fixture's argument is written without its type; not run here: tests/plugin runs
  the plugin);
- ``given NAME: TYPE``: a name the text defines elsewhere, declared for the type checker
  (the block is then check-only).

Every generated program is checked in one mypy call (its cache beside the project's);
errors are reported as ``PAGE:LINE``. The runnable ones run in a fresh directory holding
the clone's ``fixtures/`` (a symlink), against the embedded simulator.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(?:<!-- docs-test: (?P<directives>.*?) -->\n)?```python\n(?P<body>.*?)^```", re.S | re.M)
DIRECTIVES = ("continue", "check-only", "async", "pytest", "given")


@dataclass
class Program:
    """One program of a page: a block and the blocks that continue it."""

    page: Path
    first_line: int
    lines: list[tuple[int, str]] = field(default_factory=list)  # (page line, text)
    check_only: bool = False
    is_async: bool = False
    pytest_style: bool = False
    given: list[str] = field(default_factory=list)
    run_lines: int | None = None  # lines that run (None: all); a check-only continuation stops there

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.first_line}"

    def source(self, *, run: bool = False) -> tuple[str, list[int | None]]:
        """The program's text and, per line of it, the page line it comes from (None: added here).

        With ``run``, only the lines that run (without a check-only continuation).
        """
        head = ["# mypy: allow-untyped-defs"] if self.pytest_style else []
        head += ["from __future__ import annotations", *self.given]
        body = list(self.lines if not run or self.run_lines is None else self.lines[:self.run_lines])
        if self.is_async:
            head += ["import asyncio", "async def _main() -> None:"]
            body = [(n, "    " + t if t.strip() else t) for n, t in body]
        tail = ["asyncio.run(_main())"] if self.is_async else []
        text = [*head, *(t for _, t in body), *tail]
        origin: list[int | None] = [None] * len(head) + [n for n, _ in body] + [None] * len(tail)
        return "\n".join(text) + "\n", origin


def programs() -> list[Program]:
    """Every program of every page, in page order."""
    out: list[Program] = []
    for page in PAGES:
        text = page.read_text()
        previous: Program | None = None
        for m in FENCE.finditer(text):
            directives = [d.strip() for d in (m.group("directives") or "").split(";") if d.strip()]
            unknown = [d for d in directives if d.split(" ")[0] not in DIRECTIVES]
            assert not unknown, f"{page}: unknown docs-test directive(s) {unknown}"
            body_line = text.count("\n", 0, m.start("body")) + 1
            lines = [(body_line + i, t) for i, t in enumerate(m.group("body").splitlines())]
            if "continue" in directives:
                assert previous is not None, f"{page}:{body_line}: 'continue' with no block before it"
                if any(d.startswith("check-only") for d in directives) and previous.run_lines is None:
                    previous.run_lines = len(previous.lines)
                previous.lines += lines
                continue
            prog = Program(page, body_line, lines)
            for d in directives:
                word, _, rest = d.partition(" ")
                if word == "check-only":
                    prog.check_only = True
                elif word == "async":
                    prog.is_async = True
                elif word == "pytest":
                    prog.pytest_style = prog.check_only = True
                elif word == "given":
                    prog.given.append(rest.strip())
                    prog.check_only = True
            out.append(prog)
            previous = prog
    return out


PROGRAMS = programs()


def test_the_extractor_finds_the_readme_blocks_and_their_directives():
    readme = [p for p in PROGRAMS if p.page.name == "README.md"]
    assert [(p.check_only, p.pytest_style) for p in readme] == [(False, False), (True, True)]
    assert readme[0].lines[0][1] == "import kvreplay"
    assert readme[1].lines[0][1].startswith("def test_prefix_cache(kvreplay):")
    tutorial = [p for p in PROGRAMS if p.page.name == "python-and-pytest.md"]
    assert [(len(p.lines), p.run_lines) for p in tutorial] == [(10 + 6, 10), (9, None)]  # 2nd continues 1st
    assert [(p.check_only, p.pytest_style) for p in tutorial] == [(False, False), (True, False)]


def test_every_python_block_type_checks_strictly(tmp_path):
    mypy_api = pytest.importorskip("mypy.api")
    origins: dict[str, tuple[Program, list[int | None]]] = {}
    files = []
    for i, prog in enumerate(PROGRAMS):
        path = tmp_path / f"block_{i}.py"
        text, origin = prog.source()
        path.write_text(text)
        origins[path.name] = (prog, origin)
        files.append(str(path))
    stdout, stderr, _ = mypy_api.run([
        "--strict", "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir",
        str(ROOT / ".mypy_cache" / "docs-strict"), "--no-error-summary", "--show-error-codes", *files,
    ])
    errors = []
    for line in stdout.splitlines():
        m = re.match(r"(?:.*/)?(block_\d+\.py):(\d+): (error|note): (.*)", line)
        if not m:
            continue  # an error inside kvreplay itself is `mypy src`'s business, not this page's
        prog, origin = origins[m.group(1)]
        page_line = origin[int(m.group(2)) - 1]
        where = f"{prog.page.relative_to(ROOT)}:{page_line}" if page_line else f"{prog.name} (added line)"
        if m.group(3) == "error":
            errors.append(f"{where}: {m.group(4)}")
    assert errors == [], "\n".join(errors) + ("\n" + stderr if stderr else "")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


@pytest.mark.parametrize("prog", [p for p in PROGRAMS if not p.check_only], ids=lambda p: p.name)
def test_every_runnable_python_block_runs(prog, tmp_path):
    (tmp_path / "fixtures").symlink_to(ROOT / "fixtures")
    script = tmp_path / "block.py"
    script.write_text(prog.source(run=True)[0])
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, f"{prog.name} failed:\n{proc.stderr[-3000:]}"


CALLS = textwrap.dedent("""\
    import kvreplay

    kvreplay.replay(kvreplay.DEMO_WORKLOAD, phases=["a:forward:c1"], read_timout=60.0)
    kvreplay.replay(kvreplay.DEMO_WORKLOAD, phases=["a:forward:c1"], read_timeout="60")
    kvreplay.replay(kvreplay.DEMO_WORKLOAD, phases=["a:forward:c1"], sim={"time_scal": 0})
    kvreplay.replay(kvreplay.DEMO_WORKLOAD, phases=["a:forward:c1"], sim={"time_scale": "0"})
    kvreplay.demo(history="alive")
    ok: float = kvreplay.replay(kvreplay.DEMO_WORKLOAD, read_timeout=60, sim={"replicas": 2}).phase("a").itl_ms.p99
""")


def test_a_misspelt_option_and_a_string_for_a_number_are_type_errors_naming_the_keyword(tmp_path):
    mypy_api = pytest.importorskip("mypy.api")
    script = tmp_path / "calls.py"
    script.write_text(CALLS)
    stdout, _, _ = mypy_api.run(["--strict", "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir",
                                 str(ROOT / ".mypy_cache" / "docs-strict"), "--no-error-summary", str(script)])
    errors = {int(m.group(1)): m.group(2) for m in re.finditer(r"calls\.py:(\d+): error: (.*)", stdout)}
    assert sorted(errors) == [3, 4, 5, 6, 7], stdout
    assert 'Unexpected keyword argument "read_timout"' in errors[3]
    assert 'Argument "read_timeout" to "replay" has incompatible type "str"; expected "float"' in errors[4]
    assert 'Extra key "time_scal" for TypedDict "SimOptions"' in errors[5]
    assert '"time_scale"' in errors[6] and '"str"' in errors[6]
    assert 'Argument "history" to "demo"' in errors[7]
