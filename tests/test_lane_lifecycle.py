"""Sandbox-lane lifecycle: `osprey agent --sandbox` in a subprocess, real containers, loopback model server.

Each test starts the broker (`osprey agent --sandbox --yolo`) against the scripted model server and
watches its lanes through their `osprey.owner_pid` label: a session that completes, is interrupted,
or fails to start leaves no container and no socket dir; a broker killed outright leaves its lane,
which the next start reaps; a lane that dies mid-session is replaced and the session goes on.

Lane socket dirs go to a private XDG_RUNTIME_DIR per test, so "no socket dir left" is exact.
Every container a test's brokers made is removed afterwards, whatever happened.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from helpers import require_docker

from osprey.testing.model_server import ModelServer, Reply

pytestmark = pytest.mark.e2e

OSPREY = str(Path(sys.executable).with_name("osprey"))
RUN_TIMEOUT = 120  # seconds for one broker run on a loaded machine
CALC = "def add(a, b):\n    return a - b\n"


# --- docker helpers ------------------------------------------------------------------------------


def docker_api() -> Any:
    import docker

    return docker.from_env(timeout=120)


def lanes_of(pid: int) -> list[Any]:
    """Containers (running or not) whose owner is the broker `pid`."""
    api = docker_api()
    try:
        # A lane removed between the listing and its inspection is gone, not an error.
        return api.containers.list(all=True, filters={"label": f"osprey.owner_pid={pid}"}, ignore_removed=True)
    finally:
        api.close()


def running_lane_of(pid: int) -> Any:
    """The one lane of broker `pid`, once it runs (a session's lane comes up in the background,
    while its first model request is made)."""
    deadline = time.monotonic() + RUN_TIMEOUT
    while time.monotonic() < deadline:
        found = [lane for lane in lanes_of(pid) if lane.status == "running"]
        if found:
            [lane] = found
            return lane
        time.sleep(0.1)
    raise AssertionError(f"broker {pid} has no running lane after {RUN_TIMEOUT} s")


def lane_events(pid: int, since: float) -> list[tuple[str, str]]:
    """(action, container id) for the broker's lanes from `since` until now, oldest first."""
    api = docker_api()
    try:
        # Called once the broker is gone, so every event is in the past; `until` ends the stream.
        events = api.events(since=int(since) - 1, until=int(time.time()) + 1, decode=True,
                            filters={"type": "container", "label": f"osprey.owner_pid={pid}"})
        return [(e.get("Action") or e.get("status", ""), e.get("id", "")) for e in events]
    finally:
        api.close()


def remove_lanes_of(pid: int) -> None:
    import docker

    for c in lanes_of(pid):
        try:
            c.remove(force=True)
        except docker.errors.NotFound:
            pass


def wait_for(condition: Callable[[], Any], what: str, timeout: float = RUN_TIMEOUT) -> Any:
    deadline = time.monotonic() + timeout
    delay = 0.02
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


def _force_rmtree(path: str) -> None:
    def unseal(func: Any, p: str, _exc: Any) -> None:
        os.chmod(os.path.dirname(p), stat.S_IRWXU)
        func(p)

    shutil.rmtree(path, onerror=unseal)


# --- the broker ----------------------------------------------------------------------------------


@dataclass(repr=False)
class Run:
    rc: int
    stdout: str
    stderr: str

    @property
    def events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stdout.splitlines() if line.strip()]

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]

    def __repr__(self) -> str:  # shown when an assertion on a Run fails
        return f"exit {self.rc}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


@dataclass
class Brokers:
    """Starts `osprey agent --sandbox` runs and cleans up after all of them."""

    env: dict[str, str]
    workspace: Path
    model_server: ModelServer
    runtime: Path
    pids: list[int] = field(default_factory=list)
    procs: list[subprocess.Popen[str]] = field(default_factory=list)

    def start(self, *extra: str, prompt: str = "Fix the bug in calc.py.") -> subprocess.Popen[str]:
        args = [OSPREY, "agent", "--sandbox", "--yolo", "-C", str(self.workspace), "--provider", "openai",
                "--base-url", self.model_server.base_url, *extra, prompt]
        proc = subprocess.Popen(args, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        self.procs.append(proc)
        self.pids.append(proc.pid)
        return proc

    def run(self, *extra: str, **kw: Any) -> tuple[Run, int]:
        proc = self.start(*extra, **kw)
        return finish(proc), proc.pid

    def socket_dirs(self) -> list[str]:
        base = self.runtime / f"osprey-{os.geteuid()}"
        return sorted(p.name for p in base.iterdir()) if base.exists() else []

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        for pid in self.pids:
            remove_lanes_of(pid)


def finish(proc: subprocess.Popen[str], timeout: float = RUN_TIMEOUT) -> Run:
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        pytest.fail(f"the broker did not finish within {timeout} s\n{stdout}\n{stderr}")
    return Run(proc.returncode, stdout, stderr)


@pytest.fixture(scope="module")
def _lane_image() -> str:
    from osprey.toolservice.images import docker_client, ensure_image

    client = docker_client()
    try:
        return ensure_image(client)  # built once here, so no broker run pays for (or races on) a build
    finally:
        client.close()


@pytest.fixture
def brokers(workspace: Path, model_server: ModelServer, osprey_env: dict[str, str]) -> Iterator[Brokers]:
    require_docker()
    runtime = Path(tempfile.mkdtemp(prefix="osprt-"))  # short: unix socket paths are limited to 107 bytes
    env = {**osprey_env, "XDG_RUNTIME_DIR": str(runtime)}
    b = Brokers(env, workspace, model_server, runtime)
    try:
        yield b
    finally:
        try:
            b.close()
        finally:
            _force_rmtree(str(runtime))


@pytest.fixture
def lanes(request: pytest.FixtureRequest, brokers: Brokers) -> Brokers:
    """`brokers` with the lane image known to exist (require_docker runs first)."""
    request.getfixturevalue("_lane_image")
    (brokers.workspace / "calc.py").write_text(CALC)
    return brokers


def write_config(workspace: Path, text: str) -> None:
    path = workspace / ".osprey" / "config.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)


def orphan_a_lane(lanes: Brokers) -> tuple[int, Any, str]:
    """Start a broker, SIGKILL it while its lane runs a command; return (its pid, the lane, its socket dir)."""
    marker = lanes.workspace / f"orphan-{len(lanes.pids)}.started"
    lanes.model_server.add(Reply.tool_call("bash", {"command": f"touch {marker.name} && exec sleep 600"}))
    proc = lanes.start(prompt="Wait a long time.")
    wait_for(lambda: marker.exists() or proc.poll() is not None, "the orphan's command to start")
    assert proc.poll() is None, finish(proc, 5)
    [lane] = lanes_of(proc.pid)
    assert lane.status == "running"
    socket_dir = lane.labels["osprey.socket_dir"]
    assert os.path.isdir(socket_dir) and socket_dir.startswith(str(lanes.runtime))
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=RUN_TIMEOUT)
    assert proc.returncode == -signal.SIGKILL
    # Nobody was left to tear the lane down: it is still there, and still running.
    [left] = lanes_of(proc.pid)
    assert left.id == lane.id and left.status == "running"
    assert os.path.isdir(socket_dir)
    return proc.pid, lane, socket_dir


# --- a whole session ------------------------------------------------------------------------------


def test_a_completed_session_edits_in_the_lane_and_leaves_nothing(lanes: Brokers) -> None:
    require_docker()
    started = time.time()
    lanes.model_server.add(
        Reply.tool_call("edit_file", {"path": "calc.py", "old_string": "return a - b", "new_string": "return a + b"}),
        Reply.tool_call("bash", {"command": "python3 -c 'import calc; print(calc.add(2, 3))'; tr '\\0' ' ' < /proc/1/cmdline"}),
        Reply.text("Fixed."),
    )
    run, pid = lanes.run()
    assert run.rc == 0, run
    events = run.events
    assert events[0]["tool_service"] == "lane" and events[-1]["outcome"] == "Completed"
    assert [(e["name"], e["ok"]) for e in run.of("tool_result")] == [("edit_file", True), ("bash", True)]
    bash = run.of("tool_result")[1]["output"]
    assert "5" in bash and "osprey_sidecar" in bash, bash  # pid 1 is the sidecar's init: it ran in the lane
    assert (lanes.workspace / "calc.py").read_text() == CALC.replace("a - b", "a + b")
    assert os.stat(lanes.workspace / "calc.py").st_uid == os.stat(lanes.workspace).st_uid

    assert lanes_of(pid) == []
    assert lanes.socket_dirs() == []
    actions = lane_events(pid, started)
    created = {cid for action, cid in actions if action == "create"}
    destroyed = {cid for action, cid in actions if action == "destroy"}
    assert len(created) == 1 and created == destroyed, actions


def test_ctrl_c_exits_130_and_removes_the_lane(lanes: Brokers) -> None:
    require_docker()
    lanes.model_server.add(Reply.tool_call("bash", {"command": "echo in the lane"}),
                           Reply.hold(1, then=Reply.text("never finished")))
    proc = lanes.start()
    try:
        assert lanes.model_server.wait_held(1, timeout=RUN_TIMEOUT), f"the second model request never arrived\n{finish(proc, 5)}"
        [lane] = lanes_of(proc.pid)
        assert lane.status == "running"
        proc.send_signal(signal.SIGINT)
        run = finish(proc)
    finally:
        lanes.model_server.release()
    assert run.rc == 130, run
    assert run.events[-1]["outcome"] == "Cancelled"
    assert "Traceback" not in run.stderr
    assert lanes_of(proc.pid) == []
    assert lanes.socket_dirs() == []


# --- orphans --------------------------------------------------------------------------------------


def test_a_killed_brokers_lane_is_reaped_by_the_next_start(lanes: Brokers) -> None:
    require_docker()
    dead_pid, lane, socket_dir = orphan_a_lane(lanes)
    lanes.model_server.add(Reply.hold(1, then=Reply.tool_call("bash", {"command": "echo next"})), Reply.text("ok"))
    proc = lanes.start(prompt="Say ok.")
    try:
        # The next broker asks the model while its own lane comes up; once that lane runs, the
        # orphan is gone.
        assert lanes.model_server.wait_held(1, timeout=RUN_TIMEOUT), f"the next broker never asked the model\n{finish(proc, 5)}"
        running_lane_of(proc.pid)
        # The lane may have been started ahead of the session (`osprey agent --sandbox` prepares it
        # as soon as its settings resolve): the session's start reaps while it takes the lane over.
        deadline = time.monotonic() + RUN_TIMEOUT
        while (lanes_of(dead_pid) or os.path.exists(socket_dir)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert lanes_of(dead_pid) == [], "the next start did not reap the orphaned lane"
        assert not os.path.exists(socket_dir)
    finally:
        lanes.model_server.release()
    run = finish(proc)
    assert run.rc == 0, run
    assert [e["ok"] for e in run.of("tool_result")] == [True]
    assert lanes_of(proc.pid) == []
    assert lanes.socket_dirs() == []


def test_sandbox_prune_reaps_a_killed_brokers_lane_and_spares_a_live_one(lanes: Brokers) -> None:
    require_docker()
    help_run = subprocess.run([OSPREY, "--help"], env=lanes.env, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert help_run.returncode == 0 and "Commands:" in help_run.stdout, help_run
    # A regression that drops the command must fail here, not read as a skip.
    assert "sandbox" in help_run.stdout.split("Commands:", 1)[1], f"`osprey sandbox` is missing from `osprey --help`:\n{help_run.stdout}"
    lanes.model_server.add(Reply.hold(1, then=Reply.text("still here")))
    live = lanes.start(prompt="Say still here.")
    try:
        assert lanes.model_server.wait_held(1, timeout=RUN_TIMEOUT), f"the live broker never asked the model\n{finish(live, 5)}"
        live_lane = running_lane_of(live.pid)  # it comes up while the model is asked
        dead_pid, orphan, socket_dir = orphan_a_lane(lanes)
        prune = subprocess.run([OSPREY, "sandbox", "prune"], env=lanes.env, capture_output=True, text=True, timeout=RUN_TIMEOUT)
        assert prune.returncode == 0, prune
        assert lanes_of(dead_pid) == [], f"`osprey sandbox prune` left the orphaned lane\n{prune.stdout}\n{prune.stderr}"
        assert orphan.name in prune.stdout, prune.stdout
        assert not os.path.exists(socket_dir)
        [still] = lanes_of(live.pid)
        assert still.id == live_lane.id and still.status == "running", "prune removed a lane whose owner is alive"
        assert live_lane.name not in prune.stdout
    finally:
        lanes.model_server.release()
    run = finish(live)
    assert run.rc == 0, run
    assert run.events[-1]["final_text"] == "still here"
    assert lanes_of(live.pid) == []


# --- a lane that dies -----------------------------------------------------------------------------


def test_a_lane_that_dies_mid_session_is_replaced(lanes: Brokers) -> None:
    require_docker()
    started = time.time()
    lanes.model_server.add(
        Reply.tool_call("bash", {"command": "echo before > before.txt; cat /etc/hostname"}),
        Reply.hold(1, then=Reply.tool_call("bash", {"command": "cat before.txt"})),
        Reply.tool_call("bash", {"command": "cat before.txt; cat /etc/hostname"}),
        Reply.text("Done despite the crash."),
    )
    proc = lanes.start(prompt="Do the thing.")
    try:
        assert lanes.model_server.wait_held(1, timeout=RUN_TIMEOUT), f"the second model request never arrived\n{finish(proc, 5)}"
        [lane] = lanes_of(proc.pid)
        lane.kill()  # SIGKILL to the lane's init: everything in it dies

        def stopped() -> bool:
            lane.reload()
            return lane.status in ("exited", "dead")

        wait_for(stopped, "the killed lane to stop")
    finally:
        lanes.model_server.release()
    run = finish(proc)
    assert run.rc == 0, run
    first, second, third = run.of("tool_result")
    assert first["ok"], first
    assert (second["ok"], second["error_category"]) == (False, "tool_service_unavailable"), second
    assert "stopped" in second["output"] and "a new lane started" in second["output"], second["output"]
    assert third["ok"] and third["output"].startswith("before"), third
    old_host, new_host = first["output"].split()[0], third["output"].split()[1]
    assert old_host != new_host, "the call after the crash must run in a new lane"
    assert lane.id.startswith(old_host)
    assert run.events[-1]["outcome"] == "Completed"

    assert lanes_of(proc.pid) == []
    assert lanes.socket_dirs() == []
    actions = lane_events(proc.pid, started)
    created = {cid for action, cid in actions if action == "create"}
    destroyed = {cid for action, cid in actions if action == "destroy"}
    assert len(created) == 2 and created == destroyed, actions


# --- a lane that never starts ---------------------------------------------------------------------


@pytest.mark.parametrize(("config", "message"), [
    # 1% of a CPU: the sidecar cannot even import grpc before the deadline.
    ("[sandbox]\ncpus = 0.01\nready_timeout = 1\n", "did not answer within 1 s"),
    # 8 MiB: the sidecar is killed by the OOM killer while it starts.
    ("[sandbox]\nmemory_limit = \"8m\"\n", "exited during start-up"),
], ids=["never-answers", "dies-starting"])
def test_a_lane_that_fails_to_start_leaves_nothing(config: str, message: str, lanes: Brokers) -> None:
    require_docker()
    started = time.time()
    write_config(lanes.workspace, config)
    # The model is asked while the lane comes up; its tool call waits for the lane, whose failure
    # then ends the task with the lane's error, and the model is not asked again.
    lanes.model_server.add(Reply.tool_call("bash", {"command": "echo never run"}), Reply.text("never asked"))
    run, pid = lanes.run()
    assert run.rc == 1, run
    assert message in run.stderr and "Traceback" not in run.stderr, run
    assert lanes.model_server.request_count == 1
    assert (run.events[-1]["outcome"], run.events[-1]["exit_status"]) == ("Error", 1)
    assert message in run.events[-1]["error"]
    assert [(r["ok"], r["error_category"]) for r in run.of("tool_result")] == [(False, "cancelled")]
    assert lanes_of(pid) == []
    assert lanes.socket_dirs() == []
    actions = lane_events(pid, started)
    created = {cid for action, cid in actions if action == "create"}
    destroyed = {cid for action, cid in actions if action == "destroy"}
    assert len(created) == 1 and created == destroyed, actions
