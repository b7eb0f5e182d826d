"""The pre-imported worker (workers/preload.py), for real: trials forked from a server that
imported torch keep a fresh process's guarantees (a crash, a kill -9, a hang, the launcher's
death) and skip torch's import; a forked trial is found by its pid file; the server ends with
its owner, even while it is still importing torch."""

from __future__ import annotations

import os
import resource
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from autotuner.spec import FailureClass, TrialStatus
from workers import pidfile, preload, preload_client
from workers.launch import prestart_preload, run_trial_process
from workers.process import trial_env, trial_workdir

from .conftest import make_config, start_preload_server, wait_for

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server() -> Path:
    return start_preload_server()


def _server_pid(path: Path) -> int:
    """The server's pid. Its forked trials share its command line: they are told apart by the
    name a trial gives itself (preload.TRIAL_NAME), whichever /proc lists first."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            name = Path(f"/proc/{pid}/comm").read_bytes().strip()
        except OSError:
            continue
        if name == preload.TRIAL_NAME:
            continue
        if str(path).encode() in cmdline and b"workers.preload" in cmdline:
            return int(pid)
    raise AssertionError(f"no server process for {path}")


def _trials_of(server_pid: int) -> list[int]:
    """The forked trials running under the server now."""
    out = []
    for pid in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except (OSError, ValueError):
            continue
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
        if name == preload.TRIAL_NAME.decode() and int(rest.split()[1]) == server_pid:
            out.append(int(pid))
    return out


def test_a_forked_trial_measures_without_importing_torch_again(server: Path) -> None:
    result = run_trial_process(make_config())
    assert result.status == TrialStatus.OK, result.error_message
    assert result.process_start == "forked"
    assert result.phases_s is not None and result.phases_s["imports"] < 1.0  # seconds fresh
    assert result.overhead_s is not None and result.overhead_s < result.wall_s


def test_a_crash_of_a_forked_trial_names_its_signal(server: Path) -> None:
    result = run_trial_process(make_config(fault="segfault"))
    assert result.process_start == "forked"
    assert result.failure_class == FailureClass.CRASH and "SIGSEGV" in result.error_message


def test_kill_9_of_a_forked_trial_is_a_crash_and_the_server_lives_on(server: Path) -> None:
    server_pid = _server_pid(server)
    results = []
    launcher = threading.Thread(
        target=lambda: results.append(run_trial_process(make_config(fault="hang"))), daemon=True
    )
    launcher.start()
    (pid,) = wait_for(lambda: _trials_of(server_pid), 60, "the forked trial")
    os.kill(pid, signal.SIGKILL)
    launcher.join(60)
    (result,) = results
    assert result.failure_class == FailureClass.CRASH and "SIGKILL" in result.error_message
    assert result.process_start == "forked"
    # The next trial is forked by the same server, unharmed.
    after = run_trial_process(make_config())
    assert after.status == TrialStatus.OK and after.process_start == "forked"
    assert _server_pid(server) == server_pid


def test_a_hang_is_killed_at_the_limit(server: Path) -> None:
    result = run_trial_process(make_config(fault="hang"), timeout_s=6)
    assert result.process_start == "forked"
    assert result.failure_class == FailureClass.TIMEOUT and "sleeping forever" in (
        result.error_message or ""
    )
    assert not _trials_of(_server_pid(server))  # its group was killed


def test_the_launcher_dying_kills_its_forked_trial(server: Path, tmp_path: Path) -> None:
    server_pid = _server_pid(server)
    script = (
        "from tests.workers.conftest import make_config\n"
        "from workers.launch import run_trial_process\n"
        "run_trial_process(make_config(fault='hang'))\n"
    )
    # Owned by this pytest process, as the module's server is: that server forks its trial.
    env = {**os.environ, preload_client.OWNER_ENV: str(os.getpid())}
    launcher = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, env=env)
    try:
        (pid,) = wait_for(lambda: _trials_of(server_pid), 60, "the forked trial")
    finally:
        launcher.kill()
        launcher.wait()
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), 10, "the orphaned trial to die")


def test_import_time_environment_picks_another_server() -> None:
    env = {"PYTHONPATH": "/x", "OMP_NUM_THREADS": "1", "NCCL_ALGO": "Ring"}
    key = preload_client.server_key("/usr/bin/python3", env)
    # Read at first use, per trial: the same server.
    same = {
        **env,
        "NCCL_ALGO": "Tree",
        "TORCHINDUCTOR_CACHE_DIR": "/c",
        "CUDA_VISIBLE_DEVICES": "3",
    }
    assert preload_client.server_key("/usr/bin/python3", same) == key
    # Read when torch is imported: another server.
    assert preload_client.server_key("/usr/bin/python3", {**env, "OMP_NUM_THREADS": "2"}) != key
    assert preload_client.server_key("/usr/bin/python3", {**env, "TORCH_LOGS": "+dynamo"}) != key
    assert preload_client.server_key("/other/python", env) != key


def test_off_switch_runs_fresh(monkeypatch: pytest.MonkeyPatch, server: Path) -> None:
    monkeypatch.setenv(preload_client.ENABLE_ENV, "0")
    result = run_trial_process(make_config())
    assert result.status == TrialStatus.OK and result.process_start == "fresh"
    assert result.phases_s is not None and result.phases_s["imports"] > 1.0  # torch, again


def test_a_forked_trial_is_found_by_its_pid_file(server: Path) -> None:
    """A forked trial has its server's command line; its pid file says which trial it is."""
    config = make_config(fault="hang").model_copy(
        update={"study_id": "st-pidfile", "trial_number": 7}
    )
    results = []
    launcher = threading.Thread(
        target=lambda: results.append(run_trial_process(config, timeout_s=60)), daemon=True
    )
    launcher.start()

    def found() -> list[pidfile.TrialProcess]:
        return [p for p in pidfile.running() if p.study_id == "st-pidfile"]

    (trial,) = wait_for(found, 60, "the forked trial's pid file")
    assert trial.trial_number == 7
    assert trial.pid in _trials_of(_server_pid(server))  # the forked child itself
    assert b"workers.trial" not in Path(f"/proc/{trial.pid}/cmdline").read_bytes()
    os.kill(trial.pid, signal.SIGKILL)
    launcher.join(60)
    (result,) = results
    assert result.process_start == "forked" and "SIGKILL" in (result.error_message or "")
    assert not found()  # over: its file went with its temp dir


@pytest.mark.parametrize("forked", [True, False], ids=["forked", "fresh"])
def test_every_trial_runs_in_the_nodes_stable_directory(
    forked: bool, monkeypatch: pytest.MonkeyPatch, server: Path
) -> None:
    """Not in its own temporary directory: cuDNN's run-time compiled kernels are cached per
    working directory, and a new one per trial paid their compile in every trial. A crash
    leaves no core file in that shared directory, whatever the launcher's core limit."""
    monkeypatch.setenv(preload_client.ENABLE_ENV, "1" if forked else "0")
    # Cores allowed here: a fresh trial inherits this limit, and must lower it itself.
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    if hard == resource.RLIM_INFINITY or hard >= 1 << 20:
        resource.setrlimit(resource.RLIMIT_CORE, (1 << 20, hard))
    study = f"st-cwd-{forked}"
    config = make_config(fault="hang").model_copy(update={"study_id": study})
    results = []
    try:
        launcher = threading.Thread(
            target=lambda: results.append(run_trial_process(config, timeout_s=60)), daemon=True
        )
        launcher.start()
        (trial,) = wait_for(
            lambda: [p for p in pidfile.running() if p.study_id == study],
            60,
            "the trial's pid file",
        )

        def core_limit() -> str:
            limits = Path(f"/proc/{trial.pid}/limits").read_text().splitlines()
            (line,) = [x for x in limits if x.startswith("Max core file size")]
            return line.split()[4]

        # The trial lowers it first thing in main(), after its interpreter's imports: a fresh
        # one's pid file is written at spawn, seconds before that on a loaded machine.
        try:
            wait_for(lambda: core_limit() == "0", 60, "the trial to lower its core limit")
            core = "0"
        except AssertionError:
            core = core_limit()
        # Read once the trial is in main(): a forked trial's pid file is written when its server
        # has forked it, a moment before the child changes to the working directory (it read
        # the server's /tmp in one run on a loaded machine).
        cwd = Path(os.readlink(f"/proc/{trial.pid}/cwd"))
        os.kill(trial.pid, signal.SIGKILL)
        launcher.join(60)
    finally:
        resource.setrlimit(resource.RLIMIT_CORE, (soft, hard))
    assert results[0].process_start == ("forked" if forked else "fresh")
    assert cwd == trial_workdir() and cwd.is_dir()
    assert not (cwd / "config.json").exists()  # the trial's own files stay in its temp dir
    # A crash leaves no core file there (nothing would remove it): core size limit 0.
    assert core == "0", f"the trial's core file size limit stayed {core}"


def _live_servers(path: Path) -> list[int]:
    """The server for `path` once detached (not the short-lived parent that forks it)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if str(path).encode() in cmdline and ppid != os.getpid():
            out.append(int(pid))
    return out


def test_the_server_exits_with_its_owner_and_takes_its_trials(
    owner: subprocess.Popen[bytes],
) -> None:
    path = preload_client.start_server(sys.executable, trial_env(make_config()))
    assert f"-{owner.pid}-" in path.name  # its own server, not the module's
    wait_for(lambda: path.exists(), 180, "the owned server's socket")
    (server_pid,) = _live_servers(path)
    results = []
    config = make_config(fault="hang").model_copy(update={"study_id": "st-owner"})
    launcher = threading.Thread(
        target=lambda: results.append(run_trial_process(config, timeout_s=120)), daemon=True
    )
    launcher.start()
    (trial,) = wait_for(
        lambda: [p for p in pidfile.running() if p.study_id == "st-owner"], 60, "the trial"
    )
    assert trial.pid in _trials_of(server_pid)
    owner.kill()
    owner.wait()
    wait_for(lambda: not pidfile._stat(server_pid), 5, "the server to exit with its owner")
    wait_for(lambda: not pidfile._stat(trial.pid), 5, "its trial to die with it")
    assert not path.exists()
    launcher.join(30)
    (result,) = results
    assert result.failure_class == FailureClass.CRASH and "SIGKILL" in result.error_message


@pytest.mark.timing  # gone within seconds of its owner
def test_a_server_still_importing_torch_exits_with_its_owner(
    owner: subprocess.Popen[bytes],
) -> None:
    path = preload_client.start_server(sys.executable, trial_env(make_config()))
    (server_pid,) = wait_for(lambda: _live_servers(path), 30, "the server process")
    owner.kill()
    owner.wait()
    # torch's import alone takes ~9 s here; the server goes well before it could finish. Its
    # watcher is a thread, which waits for the GIL while the import runs a long C call: 1.8 s
    # and, once on a loaded CI machine, over 2 s; 5 s is still long before the import ends.
    importing = not path.exists()
    wait_for(lambda: not pidfile._stat(server_pid), 5, "the server to exit mid-import")
    assert not path.exists() and not path.with_suffix(".starting").exists()
    assert importing, "the server answered before its owner was killed: nothing was tested"


def test_a_prestarted_server_forks_the_first_trial(owner: subprocess.Popen[bytes]) -> None:
    """The GPU probe's prestart: the next trial waits for the importing server and is forked,
    rather than importing torch a second time beside it."""
    config = make_config()
    # The server trials look for is the one prestarted (config.env is not part of it here).
    key = preload_client.server_path(sys.executable, trial_env(None))
    assert key == preload_client.server_path(sys.executable, trial_env(config))
    prestart_preload()
    assert not key.exists()  # still importing torch when the trial is launched
    result = run_trial_process(config)
    assert result.status == TrialStatus.OK, result.error_message
    assert result.process_start == "forked"
    assert result.phases_s is not None and result.phases_s["imports"] < 0.5


def test_a_launcher_does_not_wait_for_a_failed_or_stale_start(tmp_path: Path) -> None:
    path = tmp_path / "server.sock"
    lock = path.with_suffix(".starting")
    assert not preload_client._wait_for_start(path)  # none starting
    lock.write_bytes(preload_client.FAILED_MARK)
    start = time.monotonic()
    assert not preload_client._wait_for_start(path)  # its import failed
    lock.write_bytes(b"")
    old = time.time() - preload_client.START_WAIT_S - 1
    os.utime(lock, (old, old))
    assert not preload_client._wait_for_start(path)  # started too long ago: presumed stuck
    assert time.monotonic() - start < 1.0
    os.utime(lock)  # a fresh start: waited for until it answers
    threading.Timer(0.5, lambda: (path.touch(), lock.unlink())).start()
    assert preload_client._wait_for_start(path)
    assert time.monotonic() - start >= 0.5


def test_each_owner_gets_its_own_server(monkeypatch: pytest.MonkeyPatch) -> None:
    env = trial_env(make_config())
    assert preload_client.owner_pid({}) == os.getpid()  # no Ray, no owner named: the launcher
    assert (
        preload_client.owner_pid({preload_client.RAYLET_ENV: "4321"}) == 4321
    )  # a Ray worker: its node
    assert (
        preload_client.owner_pid(
            {preload_client.RAYLET_ENV: "4321", preload_client.OWNER_ENV: "99"}
        )
        == 99
    )
    ray_a = preload_client.server_path(sys.executable, {**env, preload_client.RAYLET_ENV: "4321"})
    ray_b = preload_client.server_path(sys.executable, {**env, preload_client.RAYLET_ENV: "4322"})
    assert ray_a != ray_b and ray_a.parent == ray_b.parent


@pytest.mark.timing
def test_the_launcher_hears_of_a_forked_trials_exit_at_once(server: Path, tmp_path: Path) -> None:
    """The server wakes when a trial exits (a pidfd in its select set), not on its next
    OWNER_POLL_S tick: with the tick, every trial's wall_s was rounded up to a 0.2 s step (the
    H200 studies' wall_s values sit at x.x2-x.x4 s), half a tick a trial on average."""
    config = make_config(fault="hang")
    cfg_path = tmp_path / "config.json"
    cfg_path.write_text(config.model_dump_json())
    argv = ["--config", str(cfg_path), "--result", str(tmp_path / "result.json")]
    env = trial_env(config, tmp_path)
    waits, teardowns = [], []
    for i in range(7):
        stderr = tmp_path / f"stderr-{i}.log"
        proc = preload_client.fork_trial(
            sys.executable, argv, env, str(tmp_path), tmp_path / "stdout.log", stderr
        )
        assert proc is not None, "the module's server should have forked the trial"
        wait_for(lambda f=stderr: f.exists() and "sleeping" in f.read_text(), 60, "its build")
        exited = os.pidfd_open(proc.pid)  # readable once the kernel has torn the trial down
        time.sleep(0.03 * i)  # the kill lands anywhere in the server's tick
        killed_at = time.monotonic()
        os.kill(proc.pid, signal.SIGKILL)
        assert select.select([exited], [], [], 10)[0], "the killed trial did not exit"
        exited_at = time.monotonic()
        os.close(exited)
        assert proc.wait(timeout=10) == -signal.SIGKILL
        waits.append(time.monotonic() - exited_at)
        teardowns.append(exited_at - killed_at)
    # Timed from the trial's exit, not from the kill: tearing down a process that imported
    # torch takes the kernel 10-50 ms, more on a slower machine, and that is no part of what
    # the server does. With the tick, waits spread over 0-0.2 s (median ~0.1); with the pidfd,
    # a few milliseconds.
    report = f"waits after the exit: {[round(w, 3) for w in waits]}; "
    report += f"teardowns: {[round(t, 3) for t in teardowns]}"
    assert sorted(waits)[3] < 0.02, report
