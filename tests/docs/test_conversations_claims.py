"""docs/tutorials/conversations.md: its claim, reproduced by its own commands (issue 45 item 4).

"cached tokens climb with the turn" (0, 80, 176 with the radix cache) "and faster with
--history live" (0, 128, 208): the page's two ``kvreplay run`` lines, run as written (in
process, at time scale 0), and the by-turn cached tokens compared with the page's figures.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from kvreplay.cli import main
from kvreplay.rundir import read_json_checked

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "tutorials" / "conversations.md"


def commands(page: Path) -> list[list[str]]:
    """The page's ``$ kvreplay`` lines (as tests/docs/test_tutorials.py reads them), without ``kvreplay``."""
    return [shlex.split(ln[len("$ kvreplay "):]) for block in re.findall(r"^```console\n(.*?)^```", page.read_text(),
                                                                         re.S | re.M)
            for ln in block.splitlines() if ln.startswith("$ kvreplay ")]


def test_the_conversations_tutorial_claims_what_its_commands_give(tmp_path, monkeypatch):
    (tmp_path / "fixtures").symlink_to(ROOT / "fixtures")
    monkeypatch.chdir(tmp_path)
    runs = [argv for argv in commands(PAGE) if argv[0] == "run"]
    assert len(runs) == 2 and all("radix" in argv for argv in runs)
    got = []
    for argv in runs:
        assert main([*argv, "--quiet"]) == 0
        out = argv[argv.index("--out") + 1]
        by_turn = read_json_checked(tmp_path / out / "summary.json")["phases"][0]["by_turn"]
        got.append([t["cached_tokens"] for t in by_turn])
    text = PAGE.read_text()
    assert got == [[0, 80, 176], [0, 128, 208]]
    assert "0, 80 and 176 tokens at turns 0, 1 and 2" in text and "climb faster: 0, 128 and 208" in text
    assert re.search(r"`--sim-cache radix`", text)
