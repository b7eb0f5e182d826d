"""The autotuner service: a FastAPI app (`app.py`, `routes.py`, `schemas.py`) and the coordinator
that runs every study in the background over one shared executor (`scheduler.py`).

Importing this package is cheap: `schemas` needs only pydantic, so the CLI validates requests
for a local database with the same models the API uses.
"""
