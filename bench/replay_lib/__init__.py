"""The replay benchmark's parts; `bench/replay.py` is the entry point (see its docstring).

- `universe`: the landscape as the searched universe (space, model, recorded configs, snapping)
- `run`: one strategy, one seed: the real coordinator on a `ReplayExecutor`
- `stats`: statistics over the runs, and the cost model checked offline
- `report`: acceptance checks, notes and the Markdown report
"""
