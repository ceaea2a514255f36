"""The README: short, the two set-up commands first, every link to a page that exists."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_readme_is_short_and_starts_with_the_two_set_up_commands():
    assert len(README.splitlines()) <= 200
    first_block = README.split("```")[1].strip().splitlines()
    assert [line.split()[:2] for line in first_block] == [["make", "demo"], ["make", "test"]]
    assert README.index("```") < README.index("pip install")  # the wheel is the alternative, below


def test_readme_links_and_the_docs_navigation_point_at_pages_that_exist():
    links = re.findall(r"\]\(([^)#]+)\)", README)
    assert len(links) >= 15
    assert [link for link in links if not (ROOT / link).is_file()] == []
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    pages: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, str):
            pages.append(node)
        elif isinstance(node, list):
            for n in node:
                walk(n)
        elif isinstance(node, dict):
            for v in node.values():
                walk(v)

    walk(nav)
    assert len(pages) >= 10
    assert [p for p in pages if not (ROOT / "docs" / p).is_file()] == []
    # every page linked from the README is in the site's navigation
    assert sorted({link[len("docs/"):] for link in links if link.startswith("docs/")} - set(pages)) == []


def _header(text: str, first: str) -> list[str]:
    line = next(ln for ln in text.splitlines() if ln.startswith(first))
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_the_demo_table_in_the_readme_and_the_tutorial_has_the_columns_kvreplay_prints():
    """``make demo`` (sim time scale 0.02) prints latencies in model ms and a hit_tokens column;
    the README and docs/tutorials/diagnose-a-cache.md showed ``TTFT p50 ms`` and no hit_tokens."""
    from kvreplay.report.markdown import render_table

    phase = {"name": "prime", "concurrency": 1, "planned": 52, "ok": 52, "failed": {},
             "tokens": {"prompt": 190516, "cached": 175848},
             "counter_delta": {"hits": 51, "hit_tokens": 175848, "misses": 1, "stores": 53, "evictions": 45}}
    printed = _header(render_table({"phases": [phase]}, 0.02), "| phase")
    tutorial = (ROOT / "docs" / "tutorials" / "diagnose-a-cache.md").read_text()
    assert _header(tutorial, "| phase  |") == printed
    readme = _header(README, "| phase  |")  # "..." stands for the columns left out
    cut = readme.index("...")
    assert readme[:cut] == printed[:cut]
    assert readme[cut + 1:] == printed[len(printed) - len(readme) + cut + 1:]
