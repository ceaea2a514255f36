"""Every tutorial runs as written: the ``$ kvreplay ...`` lines of the ``console`` blocks in docs/tutorials.

They run in order, page by page, against the embedded simulator, in a fresh directory that
has the clone's ``fixtures/`` (a symlink), as a reader in a clone's root would run them;
each must exit 0 (``kvreplay ab`` exits 0 with a verdict of any kind). A page without such a
block fails too: each tutorial has a part to try.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("*.md"))
CONSOLE = re.compile(r"^```console\n(.*?)^```", re.S | re.M)


def commands(page: Path) -> list[list[str]]:
    """The argv (without ``kvreplay``) of each ``$ kvreplay`` line in the page's console blocks."""
    out = []
    for block in CONSOLE.findall(page.read_text()):
        for line in block.splitlines():
            if line.startswith("$ kvreplay "):
                out.append(shlex.split(line[len("$ kvreplay "):]))
    return out


def test_every_tutorial_has_commands_to_try():
    assert len(TUTORIALS) >= 4
    assert all(commands(p) for p in TUTORIALS), [p.name for p in TUTORIALS if not commands(p)]
    # nothing that needs a real server or waits for Ctrl-C
    for page in TUTORIALS:
        for argv in commands(page):
            assert argv[0] not in ("record", "serve-sim"), (page.name, argv)
            assert "http://" not in " ".join(argv), (page.name, argv)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("page", TUTORIALS, ids=lambda p: p.stem)
def test_tutorial_commands_run_against_the_simulator(page, tmp_path):
    (tmp_path / "fixtures").symlink_to(ROOT / "fixtures")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CI")}
    for argv in commands(page):
        r = subprocess.run([sys.executable, "-m", "kvreplay", *argv], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=300, check=False)
        assert r.returncode == 0, f"{page.name}: kvreplay {shlex.join(argv)}: {r.returncode}\n{r.stderr[-2000:]}"
