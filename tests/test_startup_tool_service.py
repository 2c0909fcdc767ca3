"""The local dispatcher is ready once its socket accepts connections, and its gRPC connection (with
gRPC and protobuf, tens of milliseconds of imports) is made at the first tool call: a run without
tool calls never loads them, even when the dispatcher came up long before the turn ended."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from osprey.errors import DispatcherError
from osprey.toolservice.client import Connection
from osprey.toolservice.homes import LocalDispatcher

# Runs the real CLI in a process of its own, against a model server whose answer is held until the
# local dispatcher has come up; then writes to stderr, as one JSON line, whether the dispatcher
# came up and which modules of gRPC and protobuf were executed (gRPC's name alone is bound lazily
# at import, so `grpc` itself is in sys.modules either way).
RUNNER = """
import json, sys, threading
from osprey.cli import main
from osprey.testing.model_server import ModelServer, Reply
from osprey.toolservice import homes

came_up = []
with ModelServer([Reply.hold(0, Reply.text("done"))]) as server:
    come_up = homes.LocalDispatcher._come_up

    def release_when_held():
        server.wait_held(1, timeout=60)  # the request may not have reached the server yet
        server.release()

    async def watched(self):
        try:
            await come_up(self)
            came_up.append(True)
        finally:
            threading.Thread(target=release_when_held, daemon=True).start()

    homes.LocalDispatcher._come_up = watched
    try:
        main([*sys.argv[1:], "--base-url", server.base_url, "Say done."], prog_name="osprey")
    except SystemExit as exc:
        status = exc.code
loaded = sorted(name for name in sys.modules if name.startswith(("grpc.", "google.protobuf")))
sys.stderr.write("STATE " + json.dumps({"came_up": came_up, "loaded": loaded}) + "\\n")
sys.exit(status)
"""


def test_a_one_turn_run_whose_dispatcher_came_up_never_loads_grpc(tmp_path: Path) -> None:
    home, workspace = tmp_path / "home", tmp_path / "ws"
    home.mkdir()
    workspace.mkdir()
    env = dict(os.environ, OSPREY_HOME=str(home), OPENAI_API_KEY="test-key")
    proc = subprocess.run([sys.executable, "-c", RUNNER, "agent", "-C", str(workspace), "--provider", "openai", "--model", "test-model"],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    end = json.loads(proc.stdout.splitlines()[-1])
    assert end["type"] == "session_end" and end["final_text"] == "done"
    [state] = [json.loads(line.partition(" ")[2]) for line in proc.stderr.splitlines() if line.startswith("STATE ")]
    assert state["came_up"] == [True]  # the dispatcher was up while the model was still answering
    assert state["loaded"] == []


async def test_the_dispatchers_grpc_connection_is_made_at_the_first_call(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha\n")
    home = LocalDispatcher([str(tmp_path)])
    try:
        await home.start()
        assert isinstance(home.connection, Connection) and home.client.connection is home.connection
        assert not home.connection.channel_made
        assert home.dir is not None and not os.path.exists(os.path.join(home.dir, "token"))  # read by the child before it listened
        assert (await home.client.read_file("a.txt")).content.endswith("alpha")
        assert home.connection.channel_made
        assert await home.client.healthy()
    finally:
        await home.close()
    assert home.proc is None and home.dir is None


async def test_a_connection_closed_before_its_first_call_never_makes_a_channel(tmp_path: Path) -> None:
    home = LocalDispatcher([str(tmp_path)])
    try:
        await home.start()
        connection = home.connection
        assert isinstance(connection, Connection)
        await connection.close()
        assert not connection.channel_made
        assert not await connection.healthy()
    finally:
        await home.close()


async def test_a_dispatcher_that_exits_before_listening_fails_its_start_with_its_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # An "interpreter" that says why it cannot serve, and exits.
    failing = tmp_path / "python"
    failing.write_text("#!/bin/sh\necho 'cannot serve: test' >&2\nexit 3\n")
    failing.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(failing))
    home = LocalDispatcher([str(tmp_path)])
    try:
        with pytest.raises(DispatcherError, match="did not start serving") as info:
            await home.start()
        assert "cannot serve: test" in str(info.value)
    finally:
        await home.close()
    assert home.proc is None and home.dir is None
