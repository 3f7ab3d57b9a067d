"""The README is a short entry: at most 10,000 characters, the two commands, and links that lead somewhere."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.helpers import REPO

README = REPO / "README.md"
PAGES = [README, REPO / "ARCHITECTURE.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_readme_is_at_most_10000_characters() -> None:
    size = len(README.read_text())
    assert size <= 10_000, f"README.md is {size:,} characters; at most 10,000 (move the detail into docs/)"


def test_the_readme_gives_exactly_the_two_commands() -> None:
    text = README.read_text()
    section = text.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "the README's 'Two commands' section has no bash block"
    commands = [line.split("#", 1)[0].strip() for line in block.group(1).splitlines() if line.strip()]
    assert commands == ["./scripts/workbench", "./scripts/test"]
    for command in commands:
        script = REPO / command
        assert script.is_file() and os.access(script, os.X_OK), f"{command} is not an executable script"


def test_the_readme_links_the_manual_the_reference_the_contract_and_the_changelog() -> None:
    links = set(LINK.findall(README.read_text()))
    for page in ("docs/cli.md", "docs/cli_reference.md", "docs/design.md", "docs/benchmarks.md", "CHANGELOG.md",
                 "ARCHITECTURE.md"):
        assert page in links, f"README.md does not link {page}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_leads_to_a_file(page: Path) -> None:
    assert page.exists(), f"{page.relative_to(REPO)} is missing"
    missing = []
    for target in LINK.findall(page.read_text()):
        if "://" in target or target.startswith(("#", "mailto:")):
            continue
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if not path.exists():
            missing.append(target)
    assert not missing, f"{page.relative_to(REPO)} links to files that do not exist: {missing}"
