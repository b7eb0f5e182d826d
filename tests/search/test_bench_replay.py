"""The replay benchmark end to end, through the CLI, on a small fake landscape."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from autotuner.cli import app
from bench.replay_lib.report import acceptance
from tests.search.conftest import GPT2, gpt2_landscape


def test_bench_replay_reports_every_strategy(tmp_path: Path) -> None:
    knobs = {
        "micro_batch_size": [16, 64, 256],
        "precision": ["bf16", "fp32"],
        "attention": ["flash", "math"],
        "compile_mode": ["none", "default"],
    }
    landscape = gpt2_landscape(knobs)
    landscape.meta = {"model": GPT2.preset}
    path = tmp_path / "landscape_fake.json"
    landscape.dump(path)
    result = CliRunner().invoke(
        app,
        ["bench", "replay", "--landscape", str(path), "--seeds", "2", "--out", str(tmp_path)],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "replay_fake.json").read_text())
    assert (tmp_path / "replay_fake.md").read_text().startswith("# Replay benchmark")
    assert set(doc["strategies"]) == {"ours", "ours-noseed", "tpe", "random", "grid"}
    assert doc["universe_size"] == 24 and doc["grid_size"] == 24
    ours = doc["strategies"]["ours"]
    assert ours["runs"] == 2 and ours["impossible_launched_total"] == 0
    assert ours["hit_rate"] == 1.0
    for name, s in doc["strategies"].items():
        assert s["trials_to_2pct"]["median"] is None or s["trials_to_2pct"]["median"] >= 1, name
    assert doc["strategies"]["tpe"]["impossible_launched_total"] > 0  # fp32 + flash proposed
    assert {"uncalibrated", "leave_one_out"} <= set(doc["cost_model_offline"])
    assert "trials median" in result.output
    # Random search's GPU-seconds without the noise of 2 runs: the median of drawn orders.
    orders = doc["random_orders"]
    assert orders["draws"] == 20_000 and orders["configs"] == doc["universe_size"]
    assert orders["median_of_2_p10"] <= orders["median_gpu_s"] <= orders["median_of_2_p90"]
    (line,) = [n for n in doc["notes"] if n.startswith("Random search's median over 20,000")]
    ours = doc["strategies"]["ours"]["gpu_s_to_2pct"]["median"]
    assert f"of which ours is {ours / orders['median_gpu_s']:.2f}" in line


def test_bench_replay_rejects_an_unknown_strategy(tmp_path: Path) -> None:
    path = tmp_path / "l.json"
    path.write_text("[]")
    result = CliRunner().invoke(
        app, ["bench", "replay", "--landscape", str(path), "--strategies", "ours,annealing"]
    )
    assert result.exit_code == 2


def test_a_sparse_recording_is_the_universe_every_strategy_searches(tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import replay as bench  # bench/replay.py

    from autotuner.executors.replay import Landscape

    knobs = {
        "micro_batch_size": [8, 16, 32, 64, 128, 256],
        "precision": ["bf16", "fp32"],
        "attention": ["flash", "efficient", "math"],
        "compile_mode": ["none", "default"],
    }
    dense = gpt2_landscape(knobs)
    # Sweeps around a base config, as bench/gpu_validation.py records them: one knob at a time.
    base = {
        "micro_batch_size": 16,
        "precision": "bf16",
        "attention": "flash",
        "compile_mode": "none",
    }
    kept = [
        (p, r)
        for p, r in dense.entries
        if sum(p[k] != base[k] for k in base) <= 1 or p["micro_batch_size"] in (16, 64)
    ]
    sparse = Landscape(kept, {"model": GPT2.preset})
    path = tmp_path / "landscape_sparse.json"
    sparse.dump(path)
    doc = bench.run_benchmark(str(path), seeds=2, strategies=["ours", "random", "tpe"])
    assert doc["universe_size"] == len(kept) < doc["grid_size"]
    for run in doc["runs"]:
        assert run["pruned_not_recorded"] == 0, run  # every proposal snapped to a recording
        assert run["trials_to_2pct"] is not None


def _bench():
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import replay as bench  # bench/replay.py

    return bench


def test_every_strategy_can_search_every_recorded_config_of_a_small_landscape(
    tmp_path: Path,
) -> None:
    # A study keeps part of its trial budget for the end (headroom check, re-measurements,
    # numerics parity): with max_trials = the 6 recorded configs, random search saw only 5.
    _bench()
    from autotuner.storage.session import dispose_engines, upgrade_database
    from bench.replay_lib.run import run_once
    from bench.replay_lib.universe import auto_space, universe

    landscape = gpt2_landscape({"micro_batch_size": [16, 64, 256], "attention": ["flash", "math"]})
    space = auto_space(landscape)
    table = universe(landscape, space)
    template = tmp_path / "template.db"
    upgrade_database(f"sqlite:///{template}")
    dispose_engines()
    for strategy in ("random", "grid"):
        trace: list[dict] = []
        run_once(
            template,
            tmp_path,
            strategy=strategy,
            seed=0,
            landscape=landscape,
            table=table,
            space=space,
            model=GPT2,
            target=landscape.target(),
            budget=len(table),
            best=max(r.tokens_per_s or 0 for r in table.values()),
            trace=trace,
        )
        searched = {
            json.dumps(t["params"], sort_keys=True) for t in trace if t["purpose"] == "search"
        }
        assert len(searched) == len(table) == 6, (strategy, trace)
        assert any(t["purpose"] == "headroom" for t in trace)  # the end still ran


def test_mixed_global_batches_are_said_or_held(tmp_path: Path) -> None:
    from autotuner.executors.replay import Landscape

    bench = _bench()
    knobs = {
        "micro_batch_size": [8, 16, 32],
        "grad_accum": [1, 2, 4],
        "attention": ["flash", "math"],
    }
    dense = gpt2_landscape(knobs)
    entries = []
    for p, r in dense.entries:
        gb = p["micro_batch_size"] * p["grad_accum"] * GPT2.seq_len
        entries.append(({**p, "global_batch_tokens": gb}, r))
    path = tmp_path / "landscape_mixed.json"
    Landscape(entries, {"model": GPT2.preset}).dump(path)

    mixed = bench.run_benchmark(str(path), seeds=1, strategies=["random"])
    assert len(mixed["global_batches"]) == 5  # 8k .. 128k tokens
    assert any("different global batches" in n for n in mixed["notes"])

    held = 32 * GPT2.seq_len
    doc = bench.run_benchmark(
        str(path), seeds=2, strategies=["ours", "random"], global_batch=held, out_dir=tmp_path
    )
    assert doc["global_batches"] == {str(held): 6}  # (8,4) (16,2) (32,1) x 2 attentions
    assert doc["universe_size"] == 6
    assert "grad_accum" not in doc["space"]["knobs"]
    assert doc["space"]["global_batch_tokens"] == held
    assert any(f"held at {held:,}" in n for n in doc["notes"])
    for run in doc["runs"]:
        assert run["pruned_not_recorded"] == 0 and run["trials_to_2pct"] is not None, run
    assert (tmp_path / f"replay_mixed_gb{held}.json").exists()

    result = CliRunner().invoke(
        app, ["bench", "replay", "--landscape", str(path), "--seeds", "1", "--global-batch", "7"]
    )
    assert result.exit_code != 0 and "global batch of 7" in str(result.exception)


def test_a_landscape_of_one_config_is_refused_plainly(tmp_path: Path) -> None:
    bench = _bench()
    landscape = gpt2_landscape({"micro_batch_size": [16]})
    landscape.meta = {"model": GPT2.preset}
    path = tmp_path / "landscape_one.json"
    landscape.dump(path)
    import pytest

    with pytest.raises(SystemExit, match="nothing to search"):
        bench.run_benchmark(str(path), seeds=1, strategies=["random"])


def _doc(ours_trials: float, ours_gpu_s: float, random_gpu_s: float) -> dict:
    def strategy(trials: float, gpu_s: float) -> dict:
        return {
            "trials_to_2pct": {"median": trials},
            "gpu_s_to_2pct": {"median": gpu_s},
            "impossible_launched_total": 0,
        }

    return {
        "strategies": {
            "ours": strategy(ours_trials, ours_gpu_s),
            "random": strategy(28.5, random_gpu_s),
        },
        "universe_size": 60,
    }


def test_the_acceptance_is_issue_10s_six_trials_and_a_quarter_of_random() -> None:
    passed = dict(acceptance(_doc(6, 100.0, 400.0)))
    assert all(passed.values()), passed
    # The GPT-2 landscape with its best removed: 5 trials but 0.27 of random's GPU-seconds
    # (bench/results/replay_gpt2_124m_h200_dropbest1.md), which a 1/3 target called a pass.
    checks = acceptance(_doc(5, 115.0, 422.0))
    gpu = next((text, ok) for text, ok in checks if "GPU-s" in text)
    assert gpu == ("ours: median GPU-s 115 vs random 422, 0.27 of it (target <= 0.25)", False)
    # Llama 3B at 32,768 tokens (2026-12-04): 245 of 963 is 0.2547, no pass, so not "0.25".
    checks = acceptance(_doc(2, 245.3, 963.2))
    gpu = next((text, ok) for text, ok in checks if "GPU-s" in text)
    assert gpu == ("ours: median GPU-s 245 vs random 963, 0.255 of it (target <= 0.25)", False)
    trials = next((text, ok) for text, ok in acceptance(_doc(7, 50.0, 400.0)) if "trials" in text)
    assert trials == ("ours: median trials to within 2% = 7 (target <= 6)", False)


def _sparse_universe() -> tuple[dict, object]:
    """Four recorded configs of a 24-config grid, every one two knobs from a proposal of
    (mb 64, fp32, math, compile none): a tie for `Snapper.nearest`."""
    from autotuner.search.space import parse_space
    from autotuner.spec import FailureClass, TrialResult, canonical_params

    space = parse_space(
        {
            "name": "t",
            "knobs": {
                "micro_batch_size": [16, 64, 256],
                "precision": ["bf16", "fp32"],
                "attention": ["flash", "math"],
                "compile_mode": ["none", "default"],
            },
        }
    )
    recorded = [
        {"micro_batch_size": 64, "precision": "bf16", "attention": "flash", "compile_mode": "none"},
        {
            "micro_batch_size": 64,
            "precision": "bf16",
            "attention": "math",
            "compile_mode": "default",
        },
        {
            "micro_batch_size": 64,
            "precision": "fp32",
            "attention": "flash",
            "compile_mode": "default",
        },
        {"micro_batch_size": 16, "precision": "fp32", "attention": "math", "compile_mode": "none"},
    ]
    # Only the keys matter to the snapping; the results are never read here.
    unread = TrialResult.failure(FailureClass.OOM, "not read")
    return {canonical_params(p): unread for p in recorded}, space


def test_ties_and_random_search_do_not_favour_the_landscapes_first_entry() -> None:
    """By the landscape's order, ties went to its first entry and random search snapped onto
    whichever configs had most of the space nearest them: on Llama 1B with its best dropped,
    random search "found" the new best (the first entry) in a median of 2 trials of 17."""
    import optuna

    from bench.replay_lib.universe import Snapper, UniverseSampler

    table, space = _sparse_universe()
    tie = {"micro_batch_size": 64, "precision": "fp32", "attention": "math", "compile_mode": "none"}
    snaps = [Snapper(table, space, seed=seed) for seed in range(40)]
    dists = {snaps[0].distance(tie, c) for c in snaps[0].recorded[:3]}
    assert dists == {2.0} or dists == {1.0}, dists  # the first three tie
    chosen = {json.dumps(s.nearest(tie), sort_keys=True) for s in snaps}
    assert len(chosen) >= 2, "ties always went one way"

    # Random search: each config first about equally often, and none measured twice.
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    firsts: dict[str, int] = {}
    for seed, snap in enumerate(snaps):
        sampler = UniverseSampler(optuna.samplers.RandomSampler(seed=seed), snap, uniform=True)
        study = optuna.create_study(sampler=sampler, direction="maximize")
        seen = []
        for _ in range(4):
            trial = study.ask()
            params = {n: trial.suggest_categorical(n, space.knobs[n]) for n in space.knobs}
            seen.append(json.dumps(params, sort_keys=True))
            study.tell(trial, 1.0)
        assert len(set(seen)) == 4, seen
        firsts[seen[0]] = firsts.get(seen[0], 0) + 1
    assert len(firsts) == 4 and min(firsts.values()) >= 4, firsts  # 10 each expected of 40


def test_the_floor_is_the_cheapest_config_within_two_percent_of_the_best() -> None:
    """No search reaches the best for less than one trial of the cheapest config within 2% of
    it: on the Llama 3B landscape that trial alone (214 s, fp8 with CUDA graphs) is 0.22 of
    random search's median, so the 1/4 target leaves a search almost nothing to spend."""
    from autotuner.spec import TrialResult
    from bench.replay_lib.report import floor, notes

    def ok(tokens_per_s: float, wall_s: float) -> TrialResult:
        return TrialResult(status="ok", tokens_per_s=tokens_per_s, wall_s=wall_s)

    table = {"a": ok(100.0, 300.0), "b": ok(98.5, 120.0), "c": ok(97.0, 10.0), "d": ok(99.0, 200.0)}
    assert floor(table, 100.0) == {"gpu_s": 120.0, "configs_within": 3}
    doc = {**_doc(6, 100.0, 400.0), "floor": floor(table, 100.0), "grid_size": 60}
    (line,) = [n for n in notes(doc, table) if n.startswith("Floor")]
    assert "3 config(s) within 2%" in line and "120 GPU-s" in line and "0.30 of random" in line


def test_on_the_llama_3b_landscape_the_fp8_seed_is_within_2pct_of_the_best() -> None:
    """The committed H200 landscape at 32,768 tokens a step. On Hopper the fp8 seed takes the
    kernel the prior expects fastest (cuDNN: 33,609 tok/s, 98.2% of the best, fp8-tensorwise
    with CUDA graphs and flex attention at micro-batch 16: 34,214), and since 2026-12-06 it
    runs before the expert default (the prior expects it 1.27x: seeding.FIRST_IF_FASTER), so
    one trial reaches 2%, with the best dropped too. With the expert's flash, the seed ran
    31,777 and a real 10-minute study had no time for a third trial
    (bench/results/h200_session_20261204f); the replay needed 3 trials (4 with the best
    dropped), and 2 with the expert default first."""
    from bench.replay import run_benchmark

    landscape = str(
        Path(__file__).resolve().parents[2] / "bench/results/landscape_llama_3b_h200.json"
    )
    trials = {}
    for drop in (0, 1):
        doc = run_benchmark(
            landscape,
            seeds=1,
            strategies=["ours", "ours-allseeds"],
            global_batch=32768,
            drop_best=drop,
        )
        trials[drop] = {
            s: doc["strategies"][s]["trials_to_2pct"]["median"] for s in doc["strategies"]
        }
        if drop == 0:
            assert doc["best"]["params"]["compile_mode"] == "reduce-overhead"
            assert doc["best"]["params"]["micro_batch_size"] == 16
    assert trials == {0: {"ours": 1, "ours-allseeds": 1}, 1: {"ours": 1, "ours-allseeds": 1}}, (
        trials
    )


def test_landscapes_recorded_before_the_newer_knobs_replay_as_their_defaults() -> None:
    """The recorded landscapes have no compile_scope, kernels (nor, GPT-2's, allocator): their
    trials ran the whole model under one compile with the unfused loss and the default
    allocator. A space that searches those knobs finds every recorded config at those values,
    and the replay answers them, as the same space without the knobs does."""
    from autotuner.executors.replay import Landscape, ReplayExecutor
    from autotuner.search.space import load_space, parse_space
    from autotuner.spec import Kernels, Knobs, ModelSpec, TrialConfig, TrialResult
    from bench.replay_lib.universe import universe

    root = Path(__file__).resolve().parents[2] / "bench" / "results"
    landscape = Landscape.load(root / "landscape_llama_1b_h200.json")
    assert not any("kernels" in p or "compile_scope" in p for p, _ in landscape.entries)
    # single-gpu's knobs (its fixed loader settings are not the recording's).
    knobs = load_space("single-gpu").knobs
    assert knobs["kernels"] and knobs["compile_scope"]
    space = parse_space({"name": "newer", "knobs": knobs})
    older = {k: v for k, v in knobs.items() if k not in ("kernels", "compile_scope")}
    without = parse_space({"name": "older", "knobs": older})
    table, before = universe(landscape, space), universe(landscape, without)
    assert len(table) == len(before) > 0
    assert {json.loads(k)["kernels"] for k in table} == {"none"}
    assert {json.loads(k)["compile_scope"] for k in table} == {"model"}
    # The executor keys on the searched knobs, the new ones included.
    executor = ReplayExecutor(landscape, list(space.knobs))
    params, recorded = next((p, r) for p, r in landscape.entries if r.tokens_per_s)
    ran = Knobs.model_validate({k: v for k, v in params.items() if k in Knobs.model_fields})

    def answer(knobs: Knobs) -> TrialResult:
        model = ModelSpec.resolve({"preset": "llama-1b"})
        return executor._answer(TrialConfig(model=model, knobs=knobs))

    assert answer(ran).tokens_per_s == recorded.tokens_per_s
    fused = answer(ran.model_copy(update={"kernels": Kernels.FUSED_CE}))
    assert "not in the recorded landscape" in (fused.error_message or "")
