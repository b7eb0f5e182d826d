"""The search: what to try next and what not to try at all.

`space` (the knobs and their domains, loaded from YAML), `rules` (combinations that cannot run),
`costmodel/` (memory predicted before launch), `policy` (the one object the coordinator asks,
composing `screen` (what not to launch), `progress` (best value, noise, convergence),
`feedback` (what the sampler is told), `remeasure` (when to stop, what to re-measure) and
`evidence` (the recommendation's evidence)), `seeding` (where a study starts), `sampler` (Optuna
glue), `objective` (what a study maximises), `importance` (which knobs mattered). Nothing here
writes to the database.
"""
