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
