"""Earlier studies' winners as seeds: the recommendations of completed studies of the same model
family on the same GPU (device type, name and compute capability), same preset first, newest
first within."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autotuner.storage.models import StudyStatus
from autotuner.storage.study_repo import StudyRepo

if TYPE_CHECKING:
    from autotuner.executors.base import Target
    from autotuner.spec import ModelSpec
    from autotuner.storage.session import Database

STUDIES_READ = 200  # the newest completed studies looked at


def earlier_winners(
    db: Database, model: ModelSpec, target: Target, limit: int
) -> list[dict[str, Any]]:
    """The knobs of at most `limit` earlier winners for `model` on `target`."""
    with db.session() as s:
        studies = StudyRepo(s).list(status=StudyStatus.COMPLETED, limit=STUDIES_READ)
        found = []
        for st in studies:
            rec = st.recommendation or {}
            fp = rec.get("fingerprint") or {}
            if not rec.get("knobs") or (st.model_spec or {}).get("family") != model.family:
                continue
            if not same_gpu(fp, target):
                continue
            same_preset = (st.model_spec or {}).get("preset") == model.preset
            found.append((not same_preset, rec["knobs"]))
    found.sort(key=lambda f: f[0])  # same preset first, newest first within (a stable sort)
    return [knobs for _, knobs in found[:limit]]


def same_gpu(fp: dict[str, Any], target: Target) -> bool:
    """A result's fingerprint `fp` was measured on the kind of GPU `target` is."""
    if not fp or fp.get("device_type") != target.device_type:
        return False
    if target.device_name and fp.get("device_name") != target.device_name:
        return False
    cc = target.compute_capability
    return not (cc and fp.get("compute_capability") not in (None, f"{cc[0]}.{cc[1]}"))
