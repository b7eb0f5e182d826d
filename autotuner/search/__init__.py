"""The search: what to try next and what not to try at all.

`space` (the knobs and their domains, loaded from YAML), `rules` (combinations that cannot run),
`costmodel` (memory predicted before launch), `policy` (screening, learning, re-measure planning,
evidence), `seeding` (where a study starts), `sampler` (Optuna glue), `objective` (what a study
maximises), `importance` (which knobs mattered). Nothing here writes to the database.
"""
