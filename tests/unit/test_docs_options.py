"""docs/search-spaces.md's table of study options says what StudyOptions does: every option is
in it, with its default (the table once said 12 for a patience of 24)."""

from __future__ import annotations

import re
from pathlib import Path

from autotuner.options import StudyOptions

DOC = Path(__file__).resolve().parents[2] / "docs/search-spaces.md"


def _documented() -> dict[str, str]:
    text = DOC.read_text()
    section = text.split("## Study options that change the search", 1)[1].split("\n## ", 1)[0]
    out = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        names = re.findall(r"`(\w+)`", cells[0]) if len(cells) >= 3 else []
        if not names or cells[0] == "option":
            continue
        defaults = [d.strip() for d in cells[1].split(",")]
        for i, name in enumerate(names):
            out[name] = defaults[i] if len(defaults) == len(names) else defaults[0]
    return out


def test_every_option_is_documented_with_its_default() -> None:
    documented = _documented()
    for name, field in StudyOptions.model_fields.items():
        assert name in documented, f"docs/search-spaces.md does not list the option {name}"
        default = field.default
        shown = "none" if default is None else str(default).lower()
        assert documented[name] == shown, (name, documented[name], shown)
    assert set(documented) <= set(StudyOptions.model_fields), set(documented) - set(
        StudyOptions.model_fields
    )
