"""Signals end a session in order: SIGINT, SIGTERM and SIGHUP cancel the turn, write session_end,
stop the model's commands and remove the dispatcher's socket dir or the lane; SIGKILL leaves
nothing running, and the next start reaps what it left on disk.

Each test runs the real `osprey agent` in a subprocess against the loopback model server, with
TMPDIR pointed at a private directory so what a run leaves behind can be seen.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from test_e2e_agent import OSPREY, RUN_TIMEOUT, Run, alive, check_stream

from osprey.testing.model_server import ModelServer, Reply

pytestmark = pytest.mark.e2e

SLOW = "echo $$ > pid.tmp && mv pid.tmp pid && exec sleep 300"


@pytest.fixture
def private_tmp(tmp_path: Path, osprey_env: dict[str, str]) -> Path:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    osprey_env["TMPDIR"] = str(tmp)
    return tmp


def start_slow_bash(project: Path, server: ModelServer, env: dict[str, str], *extra: str) -> tuple[subprocess.Popen[str], int]:
    """`osprey agent` running a bash call that sleeps; returns the process and the command's pid."""
    server.add(Reply.tool_call("bash", {"command": SLOW}), Reply.text("never"))
    args = [OSPREY, "agent", "-C", str(project), "--base-url", server.base_url, "--yolo", *extra, "Run the slow thing."]
    proc = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid_file = project / "pid"
    deadline = time.monotonic() + RUN_TIMEOUT
    while not pid_file.exists():
        if proc.poll() is not None:
            pytest.fail(f"osprey ended early: {proc.communicate()}")
        assert time.monotonic() < deadline, "the bash command never started"
        time.sleep(0.02)
    return proc, int(pid_file.read_text())


def finish(proc: subprocess.Popen[str]) -> Run:
    try:
        stdout, stderr = proc.communicate(timeout=RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return Run(proc.returncode, stdout, stderr, 0.0)


def wait_dead(pid: int, what: str) -> None:
    deadline = time.monotonic() + 30
    while alive(pid):
        assert time.monotonic() < deadline, f"{what} (pid {pid}) outlived the session"
        time.sleep(0.02)


def dispatcher_dirs(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("osprey-tools-*"))


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)], ids=["TERM", "HUP", "INT"])
def test_a_signal_ends_the_session_in_order(signum: int, status: int, workspace: Path, model_server: ModelServer, osprey_env: dict[str, str], private_tmp: Path) -> None:
    proc, pid = start_slow_bash(workspace, model_server, osprey_env)
    assert dispatcher_dirs(private_tmp), "the local dispatcher's socket dir should exist while the run goes on"
    proc.send_signal(signum)
    run = finish(proc)
    assert run.rc == status, run
    end = check_stream(run)[-1]
    assert (end["type"], end["outcome"], end["exit_status"]) == ("session_end", "Cancelled", status), end
    assert "Traceback" not in run.stderr, run.stderr
    wait_dead(pid, "the model's command")
    assert dispatcher_dirs(private_tmp) == [], "the dispatcher's socket dir was left behind"


def test_a_second_ctrl_c_exits_130_at_once(workspace: Path, model_server: ModelServer, osprey_env: dict[str, str], private_tmp: Path) -> None:
    # A background process (the `process` tool) lives in a session of its own: it must die too.
    model_server.add(Reply.tool_call("process", {"action": "start", "command": "echo $$ > bg.tmp && mv bg.tmp bg && exec sleep 300"}))
    proc, pid = start_slow_bash(workspace, model_server, osprey_env)
    deadline = time.monotonic() + RUN_TIMEOUT
    while not (workspace / "bg").exists():
        assert time.monotonic() < deadline, "the background process never started"
        time.sleep(0.02)
    background = int((workspace / "bg").read_text())
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGINT)
    run = finish(proc)
    assert run.rc == 130, run
    assert "Traceback" not in run.stderr and "KeyboardInterrupt" not in run.stderr, run.stderr
    wait_dead(pid, "the model's command")
    wait_dead(background, "the background process")


def test_sigkill_leaves_no_process_and_the_next_start_reaps_the_socket_dir(workspace: Path, model_server: ModelServer, osprey_env: dict[str, str], private_tmp: Path) -> None:
    proc, pid = start_slow_bash(workspace, model_server, osprey_env)
    proc.kill()
    proc.communicate(timeout=RUN_TIMEOUT)
    # The dispatcher learns of its parent's death (PR_SET_PDEATHSIG) and stops its commands.
    wait_dead(pid, "the model's command")
    left = dispatcher_dirs(private_tmp)
    assert left, "a killed broker cannot remove its socket dir; the next start must"
    model_server.add(Reply.text("Nothing to do."))
    run = finish(subprocess.Popen([OSPREY, "agent", "-C", str(workspace), "--base-url", model_server.base_url, "Say hi."],
                                  env=osprey_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    assert run.rc == 0, run
    assert dispatcher_dirs(private_tmp) == [], "the stale socket dir was not reaped"


def test_a_socket_dir_of_a_live_broker_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from osprey.owners import boot_id, pid_namespace
    from osprey.toolservice.homes import OWNER_FILE, reap_stale_dispatcher_dirs

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    live = tmp_path / "osprey-tools-live"
    dead = tmp_path / "osprey-tools-dead"
    old_boot = tmp_path / "osprey-tools-oldboot"
    foreign = tmp_path / "osprey-tools-foreign"  # no owner file: not one of ours, or not set up yet
    elsewhere = tmp_path / "osprey-tools-elsewhere"  # a broker in another pid namespace: its pid means nothing here
    fifo = tmp_path / "osprey-tools-fifo"  # a FIFO planted as the owner file must not block the start
    for d in (live, dead, old_boot, foreign, elsewhere, fifo):
        d.mkdir(mode=0o700)
    here = pid_namespace()
    (live / OWNER_FILE).write_text(f"{os.getpid()} {boot_id()} {here}\n")
    (dead / OWNER_FILE).write_text(f"999999999 {boot_id()} {here}\n")
    (old_boot / OWNER_FILE).write_text(f"{os.getpid()} another-boot {here}\n")
    (elsewhere / OWNER_FILE).write_text(f"999999999 {boot_id()} pid:[1]\n")
    os.mkfifo(fifo / OWNER_FILE)
    removed = reap_stale_dispatcher_dirs()
    assert sorted(removed) == sorted([str(dead), str(old_boot)])
    assert live.exists() and foreign.exists() and elsewhere.exists() and fifo.exists()


def test_sigterm_removes_the_lane(workspace: Path, model_server: ModelServer, osprey_env: dict[str, str]) -> None:
    from helpers import require_docker

    require_docker()
    from osprey.toolservice.images import docker_client
    from osprey.toolservice.lanes import LABEL

    proc, _ = start_slow_bash(workspace, model_server, osprey_env, "--sandbox")
    client = docker_client()

    def lanes() -> list[object]:
        return [c for c in client.containers.list(all=True, filters={"label": LABEL}, ignore_removed=True) if c.labels.get("osprey.owner_pid") == str(proc.pid)]

    assert lanes(), "the run should have a lane"
    proc.send_signal(signal.SIGTERM)
    run = finish(proc)
    assert run.rc == 143, run
    assert json.loads(run.stdout.splitlines()[-1])["exit_status"] == 143
    assert lanes() == [], "SIGTERM left the lane running"
