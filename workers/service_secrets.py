"""The service's secrets, which a trial's processes never get in their environment.

A trial runs the model code the study names (a built-in family, or an operator-allowed
factory: docs/trust-model.md). None of it needs the service's token, the database's URL (its
password) or the Ray cluster's token, and a trial's error text goes back to whoever submitted
the study: a variable left in the environment is one `os.environ` away from them. So every
environment a launcher builds for a trial (one process, each rank, the pre-imported worker that
forks them) is filtered here, and the pre-imported worker filters what it is sent once more.

Not a sandbox: a trial runs as the same account as the Ray worker that launched it (on a local
cluster, as the service), so code that reads /proc/<pid>/environ of its parents can still find
them. What keeps hostile code out is that only the operator's code runs (the factory rule).
"""

from __future__ import annotations

from collections.abc import Mapping

# AUTOTUNER_TOKEN: the API's bearer token. AUTOTUNER_DATABASE_URL and PGPASSWORD: the database,
# password included (PGPASSFILE only names a file, which the trial's account can read anyway).
# RAY_AUTH_TOKEN: joins the cluster and submits work to it; a trial is a plain process, not a
# Ray client. AUTOTUNER_SERVER: where the token would be sent (harmless alone, but a trial has
# no business calling the API).
SECRET_VARS = frozenset(
    {
        "AUTOTUNER_TOKEN",
        "AUTOTUNER_DATABASE_URL",
        "PGPASSWORD",
        "RAY_AUTH_TOKEN",
        "AUTOTUNER_SERVER",
    }
)


def without_secrets(env: Mapping[str, str]) -> dict[str, str]:
    """`env` less the service's secrets."""
    return {k: v for k, v in env.items() if k not in SECRET_VARS}
