"""Every committed screenshot is referenced from a document and made by the one script that
regenerates them (bench/dashboard_screenshots.py), and every screenshot a document names
exists. Issue 42: 21 of 31 files under docs/screenshots were referenced by nothing, and some
showed an older UI."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "docs/screenshots"


def _documents() -> str:
    paths = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return "\n".join(p.read_text() for p in paths)


def test_each_screenshot_is_referenced_and_regenerated() -> None:
    committed = {p.name for p in FOLDER.glob("*.png")}
    assert committed, "docs/screenshots holds the dashboard's screenshots"
    documents = _documents()
    script = (ROOT / "bench/dashboard_screenshots.py").read_text()
    assert sorted(n for n in committed if f"docs/screenshots/{n}" not in documents) == []
    assert sorted(n for n in committed if f'"{n}"' not in script) == []


def test_each_screenshot_named_exists() -> None:
    named = set(re.findall(r"docs/screenshots/([\w.-]+\.png)", _documents()))
    assert sorted(named - {p.name for p in FOLDER.glob("*.png")}) == []
