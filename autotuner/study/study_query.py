"""Which studies the studies list shows: filters by status, text, model family and device kind.

The dashboard's list filters on the server, in the same SQL statement that reads the page of
studies (no extra statement, however many filters), so a filtered view is a URL that can be
bookmarked. `parse_study_query` checks the query parameters (a bad value is an `InvalidQuery`
that lists the allowed ones, as the trials table's filters do) and `conditions` turns them
into the conditions storage.reads.study_page's select adds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import or_
from sqlalchemy.sql.elements import ColumnElement

from autotuner.spec import ModelFamily
from autotuner.status import StudyStatus
from autotuner.storage.tables import studies
from autotuner.study.trial_query import InvalidQuery

Study = studies.c  # the columns the conditions are on (the page's select is Core)

STATUSES = tuple(s.value for s in StudyStatus)
FAMILIES = tuple(f.value for f in ModelFamily)
DEVICES = ("cuda", "cpu")  # Target.device_type: what the trials run on
FILTERS = ("status", "q", "family", "device")
MAX_TEXT = 200  # a study name is at most 200 characters: a longer text matches nothing
# Where the text filter looks: the name and what names the model (preset, factory, family).
_MODEL_NAMES = ("preset", "factory", "family")


@dataclass(frozen=True)
class StudyQuery:
    statuses: tuple[str, ...] = ()
    text: str = ""
    family: str | None = None
    device: str | None = None

    @property
    def filtered(self) -> bool:
        return self != StudyQuery()

    def params(self) -> dict[str, str]:
        """The filters as query parameters (what the filter bar shows and links carry)."""
        out = {"status": ",".join(self.statuses), "q": self.text}
        out.update(family=self.family or "", device=self.device or "")
        return {k: v for k, v in out.items() if v}


def _one_of(key: str, value: str, allowed: tuple[str, ...]) -> str | None:
    if value and value not in allowed:
        raise InvalidQuery(f"{key}={value!r}: choose one of {', '.join(allowed)}")
    return value or None


def parse_study_query(
    params: Iterable[tuple[str, str]], *, ignore: Iterable[str] = ()
) -> StudyQuery:
    """A StudyQuery from query parameters: `status` (repeat it, or comma-separate, for
    several), `q` (text in the name or the model's name, any case), `family`, `device`.
    Parameters named in `ignore` are the page's own (format=json)."""
    statuses: list[str] = []
    text, family, device = "", None, None
    skip = set(ignore)
    for key, value in params:
        if key == "status":
            for status in filter(None, (s.strip() for s in value.split(","))):
                _one_of("status", status, STATUSES)
                statuses.append(status)
        elif key == "q":
            text = value.strip()
            if len(text) > MAX_TEXT:
                raise InvalidQuery(f"q: {len(text)} characters; search with at most {MAX_TEXT}")
        elif key == "family":
            family = _one_of("family", value, FAMILIES)
        elif key == "device":
            device = _one_of("device", value, DEVICES)
        elif key not in skip:
            raise InvalidQuery(
                f"{key}: not a filter of the studies list; filter with "
                f"status ({', '.join(STATUSES)}), q (text in the name or model), "
                f"family ({', '.join(FAMILIES)}) or device ({', '.join(DEVICES)})"
            )
    return StudyQuery(tuple(dict.fromkeys(statuses)), text, family, device)


def conditions(q: StudyQuery) -> list[ColumnElement[bool]]:
    """The filters of `q` as conditions on the studies, for storage.reads.study_page."""
    out: list[ColumnElement[bool]] = []
    if q.statuses:
        out.append(Study.status.in_(q.statuses))
    if q.text:
        # icontains: lower() on both sides, the user's % and _ escaped (they match themselves).
        names = [Study.model_spec[key].as_string() for key in _MODEL_NAMES]
        out.append(or_(*(c.icontains(q.text, autoescape=True) for c in [Study.name, *names])))
    if q.family:
        out.append(Study.model_spec["family"].as_string() == q.family)
    if q.device:
        out.append(Study.device_type == q.device)
    return out
