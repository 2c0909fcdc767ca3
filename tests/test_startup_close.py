"""How a run ends and what its start-up leaves out: a local dispatcher no call ever reached is
killed and reaped at once (nothing of it outlives the close), one that served calls is still
stopped in order, no process of a real `osprey agent` run outlives it, and Osprey's own process
scans no installed package for pydantic plugins while the commands it runs see the environment
as it was."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from osprey.testing.model_server import ModelServer, Reply
from osprey.toolservice.homes import LocalDispatcher


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    (path / "a.txt").write_text("alpha\n")
    return path


async def test_a_dispatcher_no_call_reached_is_killed_and_reaped_at_once(workspace: Path) -> None:
    home = LocalDispatcher([str(workspace)])
    await home.start()
    proc, directory = home.proc, home.dir
    assert proc is not None and directory is not None and proc.returncode is None
    started = time.monotonic()
    await home.close()
    took = time.monotonic() - started
    # SIGKILL, not the in-order stop (SIGTERM, then the dispatcher's own exit with status 0).
    assert proc.returncode == -signal.SIGKILL
    assert not os.path.exists(f"/proc/{proc.pid}")  # reaped: not even a zombie is left
    assert not os.path.exists(directory)
    assert took < 1.0


async def test_a_dispatcher_that_served_a_call_is_stopped_in_order(workspace: Path) -> None:
    home = LocalDispatcher([str(workspace)])
    await home.start()
    proc = home.proc
    assert proc is not None
    result = await home.client.bash("echo served")
    assert "served" in result.output
    await home.close()
    # SIGTERM: the dispatcher stopped its server (and with it its commands' process groups), then exited.
    assert proc.returncode == 0
    assert not os.path.exists(f"/proc/{proc.pid}")


# Runs `osprey agent` as a child of a process that adopts orphans (PR_SET_CHILD_SUBREAPER): anything
# the run left running, or left unreaped, becomes this process's child once the run has exited, and
# is reported (its command line; a process that had already exited, adopted only to be reaped, apart)
# before it is killed.
SUBREAPER = """
import ctypes, json, os, signal, subprocess, sys, time
PR_SET_CHILD_SUBREAPER = 36
assert ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
run = subprocess.run([sys.executable, "-m", "osprey", *sys.argv[1:]], capture_output=True, text=True, timeout=120)
time.sleep(0.3)  # an orphan is adopted when its parent exits; give a straggler's exit time to show
left, dead = [], []
for task in os.listdir("/proc/self/task"):
    with open(f"/proc/self/task/{task}/children") as fh:
        for pid in fh.read().split():
            try:
                with open(f"/proc/{pid}/stat") as fh_stat:
                    stat = fh_stat.read()
                name, state = stat.split("(", 1)[1].rsplit(")", 1)[0], stat.rsplit(")", 1)[1].split()[0]
                with open(f"/proc/{pid}/cmdline", "rb") as cmd:
                    command = cmd.read().replace(b"\\0", b" ").decode(errors="replace").strip()
            except OSError:
                continue
            (dead if state == "Z" else left).append(command or name)
            try:
                os.kill(int(pid), signal.SIGKILL)
                os.waitpid(int(pid), 0)
            except OSError:
                pass
print(json.dumps({"status": run.returncode, "stdout": run.stdout, "stderr": run.stderr, "left": left, "dead": dead}))
"""


def run_adopting_orphans(workspace: Path, server: ModelServer, home: Path, prompt: str, *flags: str) -> dict[str, object]:
    env = dict(os.environ, OSPREY_HOME=str(home), OPENAI_API_KEY="test-key")
    env.pop("PYDANTIC_DISABLE_PLUGINS", None)
    args = ["agent", "-C", str(workspace), "--provider", "openai", "--model", "test-model", "--base-url", server.base_url, *flags, prompt]
    proc = subprocess.run([sys.executable, "-c", SUBREAPER, *args], env=env, capture_output=True, text=True, timeout=180, check=True)
    report: dict[str, object] = json.loads(proc.stdout.splitlines()[-1])
    return report


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_CHILD_SUBREAPER is Linux's")
def test_no_process_of_a_one_turn_run_outlives_it(workspace: Path, tmp_path: Path) -> None:
    with ModelServer([Reply.text("done")]) as server:
        report = run_adopting_orphans(workspace, server, tmp_path / "home", "Say done.")
        server.assert_clean()
    assert report["status"] == 0, report["stderr"]
    assert report["left"] == [] and report["dead"] == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_CHILD_SUBREAPER is Linux's")
def test_the_commands_of_a_run_see_no_pydantic_setting_and_none_outlives_it(workspace: Path, tmp_path: Path) -> None:
    command = "env | grep -c PYDANTIC_ || true; (sleep 37 &) ; echo started"
    with ModelServer([Reply.tool_call("bash", {"command": command}), Reply.text("done")]) as server:
        report = run_adopting_orphans(workspace, server, tmp_path / "home", "Run it.", "--yolo")
        server.assert_clean()
    assert report["status"] == 0, report["stderr"]
    stdout = report["stdout"]
    assert isinstance(stdout, str)
    results = [json.loads(line) for line in stdout.splitlines() if '"tool_result"' in line]
    assert [r["ok"] for r in results] == [True], results
    assert results[0]["output"].split()[:2] == ["0", "started"], results  # no PYDANTIC_ variable reached the command
    # The dispatcher served a call, so it was stopped in order and took its commands' groups with it
    # (the detached `sleep`, killed with its group, may be adopted here only to be reaped).
    assert report["left"] == [], report["dead"]
    assert set(report["dead"]) <= {"sleep"}  # type: ignore[arg-type]


def test_osprey_s_process_loads_no_pydantic_plugin_and_scans_no_entry_point(tmp_path: Path) -> None:
    code = (
        "import sys; from osprey.cli import use_no_pydantic_plugins; use_no_pydantic_plugins(); from pydantic import BaseModel\n"
        "class M(BaseModel):\n    x: int\n"
        "assert M(x='1').x == 1\n"
        "print('importlib.metadata' in sys.modules, sys.modules['pydantic.plugin._loader'].get_plugins() == ())\n"
    )
    env = dict(os.environ)
    env.pop("PYDANTIC_DISABLE_PLUGINS", None)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert proc.stdout.split() == ["False", "True"]
