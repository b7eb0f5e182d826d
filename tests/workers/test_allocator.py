"""The `allocator` knob (Knobs.allocator): the CUDA caching allocator's mode reaches the trial's
process as the variable torch reads, the worker refuses to measure under the knob's name when
torch did not take it, it is inactive (and pruned) on the CPU, and the memory model learns its
fragmentation apart from the default allocator's."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from autotuner.executors.base import Target
from autotuner.search.costmodel import CostModel
from autotuner.search.costmodel.calibration import PRIOR_FRAGMENTATION
from autotuner.search.rules import incompatibility
from autotuner.spec import Knobs, ModelSpec, TrialResult, process_env
from tests.workers.conftest import make_config
from workers.device import inactive_knobs

REPO = Path(__file__).resolve().parents[2]
LLAMA_8B = ModelSpec.resolve({"preset": "llama-8b"})
H200 = 139.8


def test_the_knob_becomes_pytorch_cuda_alloc_conf_added_to_what_the_trial_env_says() -> None:
    assert "PYTORCH_CUDA_ALLOC_CONF" not in process_env(make_config())
    config = make_config(allocator="expandable")
    assert process_env(config)["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    config.env = {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512"}
    assert (
        process_env(config)["PYTORCH_CUDA_ALLOC_CONF"]
        == "max_split_size_mb:512,expandable_segments:True"
    )


def _check_in_a_fresh_process(read_before_set: bool) -> subprocess.CompletedProcess[str]:
    """torch imported first (as in a trial forked from the pre-imported worker), then the knob's
    variable set, then the worker's check; `read_before_set`: something read the allocator's
    settings before the variable was set."""
    code = textwrap.dedent(
        f"""
        import os, torch
        os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        if {read_before_set}:
            torch._C._accelerator_getAllocatorSettings()
        from tests.workers.conftest import make_config
        from workers.trial import _allocator_in_effect, apply_process_env
        apply_process_env(make_config(allocator="expandable"))
        print(_allocator_in_effect("expandable"))
        """
    )
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )


def test_torch_takes_the_allocator_setting_after_its_import() -> None:
    # What a forked trial does: torch is already imported when the trial sets the variable.
    done = _check_in_a_fresh_process(read_before_set=False)
    assert done.returncode == 0, done.stderr
    assert "CUDA allocator: expandable_segments:True" in done.stdout


def test_a_trial_whose_torch_read_the_allocator_settings_too_early_measures_nothing() -> None:
    done = _check_in_a_fresh_process(read_before_set=True)
    assert done.returncode != 0
    assert "_InfraError" in done.stderr and "was read before the trial set it" in done.stderr


def test_on_the_cpu_the_knob_is_inactive_and_pruned_before_launch() -> None:
    config = make_config(allocator="expandable")
    assert "allocator" in inactive_knobs(config, "cpu")
    assert "allocator" not in inactive_knobs(config, "cuda")
    cpu = Target("cpu", 1, "cpu", None, None)
    reason = incompatibility(Knobs(allocator="expandable", attention="math"), cpu)
    assert reason is not None and "CUDA caching allocator" in reason
    gpu = Target("cuda", 1, "H200", (9, 0), H200)
    assert incompatibility(Knobs(allocator="expandable"), gpu) is None


def _measured(peak: float, reserved: float) -> TrialResult:
    return TrialResult(
        status="ok",
        tokens_per_s=1.0e4,
        peak_mem_gib=peak,
        peak_reserved_gib=reserved,
        memory_kind="cuda",
        memory_limit_gib=H200,
    )


def test_fragmentation_is_learned_per_allocator_mode() -> None:
    """The H200's Llama 8B 8-bit trial reserved 121.5 GiB for 105.1 allocated (1.16). That is
    the default allocator's; it says nothing of expandable segments, whose prior stays until a
    trial runs with them."""
    cm = CostModel(LLAMA_8B, num_gpus=1, on_cuda=True, limit_gib=H200)
    eight_bit = {"micro_batch_size": 1, "grad_accum": 8, "optimizer": "adamw-8bit"}
    default = Knobs(**eight_bit, compile_mode="default", attention="flash")
    expandable = default.model_copy(update={"allocator": "expandable"})
    assert cm.predict(expandable).fragmentation == PRIOR_FRAGMENTATION["expandable"]
    cm.observe(default, _measured(105.1, 121.5))
    assert cm.calibration.fragmentation("default") == np.float64(121.5 / 105.1)
    assert cm.predict(default).fragmentation == cm.calibration.fragmentation("default")
    assert cm.predict(expandable).fragmentation == PRIOR_FRAGMENTATION["expandable"]
    # The same allocated peak, less reserved: the expandable prediction needs less.
    assert cm.predict(expandable).need_gib < cm.predict(default).need_gib - 10.0
    cm.observe(expandable, _measured(105.1, 107.0))
    assert abs(cm.calibration.fragmentation("expandable") - 107.0 / 105.1) < 1e-9
    # The batched prediction (the proposer's) agrees with the one-by-one, row by row.
    ests = [cm.estimate(k) for k in (default, expandable)]
    need, sd = cm.calibration.predict_many(
        np.array([e.vector() for e in ests]), [e.allocator for e in ests]
    )
    for i, est in enumerate(ests):
        one = cm.calibration.predict(est, H200)
        assert abs(need[i] - one.need_gib) < 1e-9 and abs(sd[i] - one.sd_gib) < 1e-9


def test_a_spread_of_fragmentation_widens_the_predicted_need() -> None:
    """Llama 8B's two trials on the H200 reserved 1.03x and 1.16x their allocated peaks with
    the default allocator: one median for both says nothing of that spread, and the 8-bit seed,
    predicted to need 104 GiB with no more doubt than its allocation's, reserved 122. The
    spread is part of the predicted need's sd, per allocator mode, from a prior until the
    study has its own ratios."""
    from autotuner.search.costmodel.calibration import PRIOR_FRAGMENTATION_SD

    cm = CostModel(LLAMA_8B, num_gpus=1, on_cuda=True, limit_gib=H200)
    cal = cm.calibration
    assert cal.fragmentation_sd("default") == PRIOR_FRAGMENTATION_SD["default"]
    assert cal.fragmentation_sd("expandable") == PRIOR_FRAGMENTATION_SD["expandable"]
    knobs = Knobs(micro_batch_size=1, grad_accum=8, optimizer="adamw-8bit", attention="flash")
    expert = Knobs(micro_batch_size=8, checkpointing="full", attention="flash")
    cm.observe(expert, _measured(121.7, 125.6))
    cm.observe(knobs, _measured(105.1, 121.5))
    spread = cal.fragmentation_sd("default")
    assert spread > PRIOR_FRAGMENTATION_SD["default"]  # 1.03 and 1.16: wider than the prior
    assert cal.fragmentation_sd("expandable") == PRIOR_FRAGMENTATION_SD["expandable"]
    pred = cm.predict(knobs)
    assert pred.sd_gib >= pred.allocated_gib * spread  # the spread alone is in it
    twin = cm.predict(knobs.model_copy(update={"allocator": "expandable"}))
    assert twin.sd_gib < pred.sd_gib
