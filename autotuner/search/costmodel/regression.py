"""Bayesian least squares on relative errors, shrunk toward a physical prior, robust to outliers.

Both per-study models (memory, `calibration.py`; throughput, `throughput.py`) predict a
measured quantity as a weighted sum of physically estimated components, `y ~ x . beta`, with one
multiplier per component. A study has a handful of points, so each fit:

- shrinks beta toward the prior (1.0 for "the physics was right") with a per-component prior
  sd: a few trials move a multiplier only where they carry information about it;
- weighs points by relative error (a 10% miss on a small config counts like one on a big one);
- down-weights outliers (iteratively reweighted, Cauchy-style beyond 3 MADs): one odd
  measurement (a throttled GPU, a memory pool the peak did not see) must not drag every
  prediction;
- estimates the model's own relative error from the residuals, never below `min_rel_sd`, with
  the prior's value standing in while points are few (n/(n+3) weighting).

`extra_rows` lets a caller add points that depend on the current fit (the memory model's
censored OOMs: only those the fit predicts below their bound pull on it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

ExtraRows = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class Fit:
    beta: np.ndarray
    cov: np.ndarray
    rel_sd: float


def _no_extra(beta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((0, beta.size)), np.zeros(0)


def fit_relative(
    X: np.ndarray,
    y: np.ndarray,
    *,
    prior_mean: np.ndarray,
    prior_sd: np.ndarray,
    y_floor: float,
    abs_sd: float,
    prior_rel_sd: float,
    min_rel_sd: float,
    beta_floor: float,
    start_rel_sd: float | None = None,
    extra_rows: ExtraRows = _no_extra,
    iterations: int = 4,
) -> Fit:
    """Fit beta (one multiplier per column of X) to y; see the module docstring.

    A point's sd is rel_sd * max(y, y_floor) + abs_sd; beta is kept >= beta_floor (a component
    cannot be free, nor negative). `start_rel_sd`: the previous fit's, to weigh the first pass."""
    k = prior_mean.size
    prior_prec = np.diag(1.0 / prior_sd**2)
    beta, cov = prior_mean.astype(float), np.diag(prior_sd**2)
    rel_sd = max(min_rel_sd, prior_rel_sd if start_rel_sd is None else start_rel_sd)
    robust = np.ones(len(y))
    X = X.reshape(len(y), k)
    for _ in range(iterations):
        Xe, ye = extra_rows(beta)
        Xa = np.vstack([X, Xe]) if len(ye) else X
        ya = np.concatenate([y, ye]) if len(ye) else y
        if not len(ya):
            break
        w = 1.0 / (rel_sd * np.maximum(ya, y_floor) + abs_sd) ** 2
        w[: len(y)] *= robust
        A = Xa.T @ (Xa * w[:, None]) + prior_prec
        cov = np.linalg.inv(A)
        beta = np.maximum(cov @ (Xa.T @ (w * ya) + prior_prec @ prior_mean), beta_floor)
        if len(y):
            resid = np.abs(X @ beta - y) / np.maximum(y, y_floor)
            scale = max(min_rel_sd, 1.4826 * float(np.median(resid)))
            robust = 1.0 / (1.0 + (resid / (3.0 * scale)) ** 2)
            n = len(y)
            inliers = resid[resid <= 3.0 * scale]
            rms = float(np.sqrt(np.mean(inliers**2))) if inliers.size else scale
            rel_sd = max(min_rel_sd, (n * rms + 3 * prior_rel_sd) / (n + 3))
    return Fit(beta, cov, rel_sd)
