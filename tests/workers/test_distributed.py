"""Multi-GPU trials on the CPU: 2 and 4 gloo ranks through the real launcher (one process per
rank: forked by the pre-imported worker once it answers, fresh before), each way a rank can
fail, and the parallel knobs' support rules."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from autotuner.spec import NVLS_OFF_ENV, FailureClass, TrialConfig, TrialStatus, process_env
from tests.service import procs
from workers import distributed, launch_ranks, pidfile, preload_client, process
from workers.device import inactive_knobs
from workers.launch import run_trial_process

from .conftest import FAST, make_config, wait_for

CPU = torch.device("cpu")
# One intra-op thread per rank: 4 ranks share this machine's cores.
RANKS_FAST = FAST.model_copy(update={"cpu_threads": 1, "timeout_s": 120})


def _config(k: int = 2, fault: str = "none", fault_rank: int | None = None, **knobs):
    config = make_config(measure=knobs.pop("measure", RANKS_FAST), fault=fault, **knobs)
    config.num_gpus, config.fault_rank = k, fault_rank
    return config


def _trial_processes() -> list[int]:
    """Live rank processes launched from this test process (other sessions may run trials too:
    the launcher marks its children with its pid, and the mark survives re-parenting). Forked
    ranks carry the mark of the launcher that started their pre-imported worker; the worker
    itself, which outlives trials by design, is none of them."""
    return procs.launched_with_env(f"{process.PARENT_ENV}={os.getpid()}")


@pytest.fixture
def no_orphans():
    before = set(_trial_processes())
    yield
    left = set(_trial_processes()) - before
    assert not left, f"rank processes left behind: {left}"


def _ranks_env() -> dict[str, str]:
    """A 2-rank trial's rank 0 environment, as its launcher builds it here and now: it keys the
    ranks' pre-imported worker, their own (the NVLink-multicast switches are read at torch's
    import), owned by this test process or by the `owner` fixture's."""
    return launch_ranks.rank_env(_config(2), launch_ranks.Rendezvous(2), 0, 0, 60.0)


def _start_ranks_server() -> Path:
    """The ranks' pre-imported worker, started and answering; its socket."""
    path = preload_client.start_server(sys.executable, _ranks_env())
    # torch's import on a loaded 2-core machine: up to half a minute.
    return wait_for(lambda: path if path.exists() else None, 180, "the ranks' server")


def _server_of(owner: subprocess.Popen[bytes]) -> int:
    """The pid of the `owner` fixture's pre-imported worker (not one of its forked trials)."""
    servers = procs.preload_servers(f"{preload_client.OWNER_ENV}={owner.pid}")
    (server,) = [p for p in servers if not procs.forked(p)]
    return server


@pytest.fixture(scope="module")
def ranks_server() -> Path:
    """The module's ranks' server, owned by this test process: the module's trials fork."""
    return _start_ranks_server()


@pytest.fixture(params=["forked", "fresh"])
def rank_start(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How the ranks start: forked by the module's server, or fresh (the switch off)."""
    if request.param == "fresh":
        monkeypatch.setenv(preload_client.ENABLE_ENV, "0")
    else:
        request.getfixturevalue("ranks_server")
    return request.param


def _assert_ok(result, k: int, parallel: str, tokens_per_step: int):
    assert result.status == TrialStatus.OK, result.error_message
    assert (result.num_ranks, result.parallel) == (k, parallel)
    # Every rank's tokens count; per GPU is the total over k.
    assert result.tokens_per_step == tokens_per_step
    assert result.tokens_per_s_per_gpu == pytest.approx(result.tokens_per_s / k)
    assert result.tokens_per_s_min <= result.tokens_per_s <= result.tokens_per_s_max
    assert result.peak_mem_gib > 0 and result.memory_kind == "cpu_rss"
    assert result.loss_last < result.loss_first


@pytest.mark.parametrize("parallel", ["ddp", "fsdp2", "fsdp2-no-reshard"])
def test_two_ranks_measure_all_ranks_tokens(parallel, ranks_server, no_orphans):
    result = run_trial_process(_config(2, parallel=parallel))
    _assert_ok(result, 2, parallel, tokens_per_step=2 * 64)
    assert result.process_start == "forked"
    # No rank imported torch: each was forked after its server had.
    assert result.phases_s is not None and result.phases_s["imports"] < 1.0


def test_ranks_start_fresh_until_their_pre_imported_worker_answers(
    owner: subprocess.Popen[bytes], no_orphans
) -> None:
    """A node's first multi-rank trial finds no server for the ranks' environment: its ranks
    run fresh (nothing half-forked), and the server it started forks the next trial's."""
    path = preload_client.server_path(sys.executable, _ranks_env())
    assert not path.exists()
    first = run_trial_process(_config(2))
    _assert_ok(first, 2, "ddp", tokens_per_step=2 * 64)
    assert first.process_start == "fresh" and first.phases_s["imports"] > 1.0
    wait_for(lambda: path.exists(), 180, "the server the first trial started")
    second = run_trial_process(_config(2))
    _assert_ok(second, 2, "ddp", tokens_per_step=2 * 64)
    assert second.process_start == "forked"
    # The server rank 0's launcher started is no rank: no rendezvous in its environment.
    environ = Path(f"/proc/{_server_of(owner)}/environ").read_bytes().split(b"\0")
    assert not [v for v in environ if v.startswith((b"RANK=", b"MASTER_PORT="))]
    owner.kill()
    wait_for(lambda: not path.exists(), 30, "the server to end with its owner")


@pytest.mark.slow
@pytest.mark.parametrize("parallel", ["ddp", "fsdp2"])
def test_four_ranks_with_grad_accumulation(parallel, no_orphans):
    result = run_trial_process(_config(4, parallel=parallel, micro_batch_size=2, grad_accum=3))
    _assert_ok(result, 4, parallel, tokens_per_step=2 * 64 * 3 * 4)


@pytest.mark.parametrize("compression", ["fp16", "powersgd"])
def test_ddp_comm_hooks_run(compression, no_orphans):
    result = run_trial_process(_config(2, grad_compression=compression))
    _assert_ok(result, 2, "ddp", tokens_per_step=2 * 64)


# A Llama whose every matrix is d_model x d_model (no GQA, d_ff = d_model, vocab = d_model): each
# rank's shards are all (64, 128), 8192 values, over torchao's 4096-value floor for 8-bit moments,
# and its norms (64,) keep fp32 moments. torchao compiles its step once per shard shape: two
# compiles per rank, where the tiny GPT-2's shards (8 shapes, 4 of them 8-bit) took eight.
SQUARE_LLAMA = dict(d_model=128, n_head=4, n_kv_head=4, d_ff=128, vocab_size=128)


@pytest.mark.slow  # torchao's 8-bit step compiles in each rank
def test_fsdp2_steps_8bit_moments_on_its_shards(ranks_server, no_orphans):
    """torchao's AdamW8bit keeps its 8-bit moments per DTensor shard: Llama 8B's other route
    to headroom, beside FSDP2 itself, and the two together."""
    pytest.importorskip("torchao.optim")
    # torchao compiles its 8-bit step on each rank: ~30 s alone on this 2-core machine, more
    # with the suite's 3 workers beside it (past RANKS_FAST's 120 s limit with eight compiles,
    # 2026-12-06). The limit is a safety net here, not what the test asserts. The ranks fork
    # from the module's ranks' server: started fresh, both would import torch beside the server
    # their launcher starts.
    measure = RANKS_FAST.model_copy(update={"timeout_s": 360})
    config = _config(
        2,
        parallel="fsdp2",
        optimizer="adamw-8bit",
        measure=measure,
        preset="llama-tiny",
        model=SQUARE_LLAMA,
    )
    _assert_ok(run_trial_process(config), 2, "fsdp2", tokens_per_step=2 * 64)


@pytest.mark.slow  # each rank compiles its blocks
def test_fsdp2_names_the_blocks_it_compiles_whatever_the_scope(ranks_server, no_orphans):
    # FSDP2 compiles each block before sharding it, so the trainer must compile per block to
    # run at the measured speed: the result says so, as a per-block compile on one GPU does.
    config = _config(2, parallel="fsdp2", compile_mode="default", compile_scope="model")
    result = run_trial_process(config)
    _assert_ok(result, 2, "fsdp2", tokens_per_step=2 * 64)
    n_layer = config.model.n_layer
    assert result.compiled_regions == f"{n_layer} Block blocks (FSDP2 shards each)"
    assert f"compile_scope block: {result.compiled_regions} compiled (default)" in result.notes


def test_fsdp2_reduces_in_bf16(no_orphans):
    config = _config(2, parallel="fsdp2", precision="bf16", fsdp_reduce_dtype="bf16")
    _assert_ok(run_trial_process(config), 2, "fsdp2", tokens_per_step=2 * 64)


def test_a_server_lost_between_two_ranks_forks_runs_every_rank_fresh(
    owner: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch, no_orphans
) -> None:
    """The ranks' server dies (kill -9) right after forking rank 0: rank 1 cannot be forked,
    so rank 0 is sent back and every rank runs fresh; nothing half-forked is left."""
    _start_ranks_server()
    server = _server_of(owner)
    forks: list[preload_client.ForkedProcess | None] = []
    real_fork = preload_client.fork_trial

    def fork_then_lose_the_server(*args, **kwargs):
        forks.append(real_fork(*args, **kwargs))
        if len(forks) == 1:
            os.kill(server, signal.SIGKILL)
            wait_for(lambda: not procs.alive(server), 10, "the server's end")
        return forks[-1]

    monkeypatch.setattr(preload_client, "fork_trial", fork_then_lose_the_server)
    result = run_trial_process(_config(2))
    _assert_ok(result, 2, "ddp", tokens_per_step=2 * 64)
    assert result.process_start == "fresh"
    assert forks[0] is not None and forks[1] is None
    assert forks[0].returncode is not None  # rank 0, forked first, is over


# --------------------------------------------------------------------------- in one rank


def test_grad_sync_skips_all_but_the_last_micro_step():
    """The wrappers' grad_sync (DDP no_sync) is entered once per micro-step, sync only last."""
    from workers.training import TrainStep

    seen = []

    class Batches:
        def next(self):
            return torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 4, dtype=torch.long)

    model = torch.nn.Sequential()
    model.forward = lambda x, y: (torch.ones(1, requires_grad=True) * 2).sum()
    p = torch.nn.Parameter(torch.ones(1))
    step = TrainStep(
        model,
        torch.optim.SGD([p]),
        Batches(),
        grad_accum=3,
        autocast=lambda: torch.autocast("cpu", enabled=False),
        scaler=None,
        cudagraphs=False,
        grad_sync=lambda last: seen.append(last) or torch.autocast("cpu", enabled=False),
    )
    step()
    assert seen == [False, False, True]


# --------------------------------------------------------------------------- failures


def test_a_rank_killed_mid_trial_is_a_crash_naming_it(rank_start, no_orphans):
    start = time.monotonic()
    result = run_trial_process(_config(2, fault="segfault", fault_rank=1))
    assert result.process_start == rank_start
    assert result.failure_class == FailureClass.CRASH, result.error_message
    assert result.failed_rank == 1 and result.num_ranks == 2
    assert "rank 1" in result.error_message and "SIGSEGV" in result.error_message
    assert time.monotonic() - start < 30  # rank 0 was not left waiting for the dead rank


def test_a_rank_exiting_without_result_is_a_crash_with_its_stderr(no_orphans):
    result = run_trial_process(_config(2, parallel="fsdp2", fault="exit", fault_rank=1))
    assert result.failure_class == FailureClass.CRASH and result.failed_rank == 1
    assert "status 3" in result.error_message and "fault=exit" in result.error_message


def test_a_hung_rank_ends_at_the_limit_as_timeout(rank_start, no_orphans):
    start = time.monotonic()
    result = run_trial_process(_config(2, fault="hang", fault_rank=1), timeout_s=15)
    assert result.process_start == rank_start
    assert result.failure_class == FailureClass.TIMEOUT, result.error_message
    assert time.monotonic() - start < 15 + process.KILL_GRACE_S + 5
    # Either the launcher's limit ends every rank, or, first, rank 0's process-group timeout
    # (0.8 x the limit) fires in the collective it waits in: both are the hung rank's timeout.
    message = result.error_message or ""
    assert "all 2 ranks were killed" in message or "another rank is hung" in message, message


def test_the_launcher_dying_kills_its_forked_ranks(ranks_server, no_orphans) -> None:
    """The launcher (a Ray task) is killed mid-trial: its server kills every forked rank, as
    the parent-death signal kills fresh ones."""
    script = (
        "from tests.workers.test_distributed import _config\n"
        "from workers.launch import run_trial_process\n"
        "config = _config(2, fault='hang')\n"
        "config.study_id = 'st-ranks-death'\n"
        "run_trial_process(config)\n"
    )
    # Owned by this pytest process, as the module's server is: that server forks its ranks.
    env = {**os.environ, preload_client.OWNER_ENV: str(os.getpid())}
    repo = Path(__file__).resolve().parents[2]
    launcher = subprocess.Popen([sys.executable, "-c", script], cwd=repo, env=env)

    def ranks() -> dict[int | None, int]:
        """Local rank -> pid, found by the ranks' pid files."""
        return {t.rank: t.pid for t in pidfile.running() if t.study_id == "st-ranks-death"}

    try:
        found = wait_for(lambda: len(r := ranks()) == 2 and r, 60, "its 2 ranks' pid files")
        assert set(found) == {0, 1} and all(procs.forked(p) for p in found.values())
    finally:
        launcher.kill()
        launcher.wait()
    wait_for(lambda: not any(map(procs.alive, found.values())), 10, "the orphaned ranks' end")


def test_one_rank_refusing_is_unsupported_without_hanging(no_orphans):
    start = time.monotonic()
    result = run_trial_process(_config(2, fault="unsupported", fault_rank=1))
    assert result.failure_class == FailureClass.UNSUPPORTED, result.error_message
    assert result.failed_rank == 1 and "fault=unsupported" in result.error_message
    assert time.monotonic() - start < 30


def test_nan_on_one_rank_is_numerics_for_the_trial(no_orphans):
    result = run_trial_process(_config(2, fault="nan_loss", fault_rank=1))
    assert result.failure_class == FailureClass.NUMERICS, result.error_message


# --------------------------------------------------------------------------- rules


@pytest.mark.parametrize(
    "knobs, blamed",
    [
        ({"parallel": "hsdp"}, {"parallel": "hsdp"}),
        (
            {"compile_mode": "reduce-overhead"},
            {"parallel": "ddp", "compile_mode": "reduce-overhead"},
        ),
        (
            {"parallel": "fsdp2", "grad_compression": "bf16"},
            {"parallel": "fsdp2", "grad_compression": "bf16"},
        ),
        (
            {"parallel": "fsdp2-no-reshard", "grad_compression": "powersgd"},
            {"parallel": "fsdp2-no-reshard", "grad_compression": "powersgd"},
        ),
        ({"parallel": "fsdp2", "precision": "fp16"}, {"parallel": "fsdp2", "precision": "fp16"}),
        ({"grad_compression": "bf16"}, {"grad_compression": "bf16"}),  # gloo has no bf16 hook
    ],
)
def test_unsupported_parallel_combinations_name_the_knobs(knobs, blamed):
    refusal = distributed.check(_config(2, **knobs), CPU)
    assert refusal is not None and refusal.knobs == blamed
    assert " use " in str(refusal)  # a remedy


def test_supported_combinations_pass():
    for knobs in (
        {},
        {"parallel": "fsdp2", "fsdp_reduce_dtype": "bf16"},
        {"grad_compression": "fp16"},
    ):
        assert distributed.check(_config(2, **knobs), CPU) is None


def test_in_one_process_several_gpus_are_refused():
    from workers.trial import run_trial

    result = run_trial(_config(2))
    assert result.failure_class == FailureClass.UNSUPPORTED and "num_gpus" in result.error_message


def test_inactive_knobs_follow_the_parallel_mode():
    ddp_only = {"ddp_bucket_cap_mb", "ddp_grad_as_bucket_view", "ddp_static_graph"}
    ddp_only.add("grad_compression")
    nccl = {"nccl_algo", "nccl_proto", "nccl_min_channels", "nccl_max_channels", "nccl_buffsize"}
    one = set(inactive_knobs(_config(1), "cuda"))
    assert ddp_only | nccl | {"parallel", "fsdp_reduce_dtype"} <= one
    ddp = set(inactive_knobs(_config(2, parallel="ddp"), "cuda"))
    assert "fsdp_reduce_dtype" in ddp and not (ddp & (ddp_only | nccl | {"parallel"}))
    fsdp = set(inactive_knobs(_config(2, parallel="fsdp2"), "cuda"))
    assert ddp_only <= fsdp and "fsdp_reduce_dtype" not in fsdp and not fsdp & nccl
    assert nccl <= set(inactive_knobs(_config(2), "cpu"))  # gloo reads no NCCL variable


# --------------------------------------------------------------------------- environment


def test_rank_environment_has_rendezvous_nccl_and_nvls_settings():
    config = _config(2, nccl_algo="Tree", nccl_max_channels=4, nccl_buffsize=1 << 22)
    rdv = launch_ranks.Rendezvous(nproc_per_node=2, nnodes=2, node_rank=1, master_addr="10.0.0.1")
    env = launch_ranks.rank_env(config, rdv, local_rank=1, port=29500, limit_s=60)
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"]) == ("3", "1", "4")
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("10.0.0.1", "29500")
    assert (env["NCCL_ALGO"], env["NCCL_MAX_NCHANNELS"]) == ("Tree", "4")
    assert env["NCCL_BUFFSIZE"] == str(1 << 22) and "NCCL_PROTO" not in process_env(config)
    assert all(env[name] == value for name, value in NVLS_OFF_ENV.items())


def test_nvls_settings_are_a_documented_switch():
    off = _config(2, measure=RANKS_FAST.model_copy(update={"disable_nvls_multicast": False}))
    assert not set(NVLS_OFF_ENV) & set(process_env(off))
    assert not set(NVLS_OFF_ENV) & set(process_env(_config(1)))  # one GPU: no collectives


def test_old_records_load_with_the_new_fields_defaulted():
    old = make_config().model_dump(mode="json")
    for name in ("parallel", "fsdp_reduce_dtype", "nccl_max_channels", "nccl_buffsize"):
        old["knobs"].pop(name)
    old.pop("fault_rank")
    old["measure"].pop("disable_nvls_multicast")
    config = TrialConfig.model_validate(old)
    assert config.knobs.parallel == "ddp" and config.measure.disable_nvls_multicast


@pytest.mark.parametrize("parallel", ["ddp", "fsdp2"])
def test_the_headroom_check_runs_on_every_rank(parallel: str, no_orphans) -> None:
    """An evaluation pass and a checkpoint save (FSDP2: each rank's shards) in every rank; the
    largest rank's peak with them is reported."""
    measure = RANKS_FAST.model_copy(update={"headroom_check": True})
    result = run_trial_process(_config(2, parallel=parallel, measure=measure))
    _assert_ok(result, 2, parallel, tokens_per_step=2 * 64)
    assert result.peak_mem_with_eval_ckpt_gib >= result.peak_mem_gib
    assert any(n.startswith("headroom check") for n in result.notes)
