"""`osprey agent` imports only what its run needs: a real headless session against the loopback
model server, in a subprocess, reports the modules it loaded, and the heavy ones it has no use
for must not be among them (start-up time is mostly imports). Nor does it start its local
dispatcher while it is busy starting: the process is made once the session waits."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from osprey.testing.model_server import ModelServer, Reply
from osprey.toolservice.homes import LocalDispatcher, start_when_quiet, until_quiet

# Runs the real CLI entry point, then writes the loaded modules (not the blocked ones) to stderr as one JSON line,
# and, for each local dispatcher's background start of a session, whether its process was made by the time
# `begin` returned (the watch itself imports the home's modules: not for --help).
RUNNER = """
import json, sys
from osprey.cli import main
begun = []
if "--help" not in sys.argv:
    from osprey.toolservice import homes
    begin = homes.LocalDispatcher.begin
    async def watched(self):
        started = await begin(self)
        begun.append(self.proc is not None)
        return started
    homes.LocalDispatcher.begin = watched
try:
    main(sys.argv[1:], prog_name="osprey")
except SystemExit as exc:
    status = exc.code
sys.stderr.write("MODULES " + json.dumps(sorted(m for m, v in sys.modules.items() if v is not None)) + "\\n")
sys.stderr.write("BEGUN " + json.dumps(begun) + "\\n")
sys.exit(status)
"""

# Never wanted by a headless run: the TUI, and the httpx command-line client's rich and pygments.
NEVER = ("textual", "osprey.tui", "rich", "pygments")
# Only with --sandbox (docker), a tool manifest (jsonschema), a bash call the floor parses (tree_sitter),
# or a hooks file (the hooks machinery).
NOT_FOR_A_PLAIN_SESSION = ("docker", "osprey.toolservice.lanes", "osprey.toolservice.images", "jsonschema", "tree_sitter", "tree_sitter_bash",
                           "osprey.extensions.hooks")
# pydantic's plugin loader and what it scans installed packages with: Osprey's process uses no
# pydantic plugin (`osprey.cli` gives pydantic a loader that finds none).
PLUGIN_SCAN = ("importlib.metadata", "importlib_metadata")
# Only when there is something to read or check with them: saved or `--allow` rules (the rule
# parser), a TOML file of trust, tool descriptions or toolsets (tomli), a sandbox lane (the lane
# backend's types).
ONLY_WHEN_USED = ("osprey.policy.rules", "tomli", "osprey.toolservice.backend")
# Only for a model server spoken to over TLS: an `http://` one gets the plain-http transport (asyncio
# and h11), without httpcore, its anyio backend, or h2 and its parts.
NOT_FOR_PLAIN_HTTP = ("httpcore", "anyio", "sniffio", "h2", "hpack", "hyperframe")


def loaded(env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    proc = subprocess.run([sys.executable, "-c", RUNNER, *args], env=env, capture_output=True, text=True, timeout=120, check=False)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("MODULES ")]
    assert lines, proc.stderr
    return proc, set(json.loads(lines[-1][len("MODULES "):]))


def begun(proc: subprocess.CompletedProcess[str]) -> list[bool]:
    """For each local dispatcher's background start in the run: whether `begin` made its process."""
    [line] = [line for line in proc.stderr.splitlines() if line.startswith("BEGUN ")]
    return list(json.loads(line[len("BEGUN "):]))


def imported(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    return dict(os.environ, OSPREY_HOME=str(home), OPENAI_API_KEY="test-key")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    (path / "notes.txt").write_text("one\ntwo\n")
    return path


def agent(server: ModelServer, workspace: Path, prompt: str) -> list[str]:
    return ["agent", "-C", str(workspace), "--provider", "openai", "--model", "test-model", "--base-url", server.base_url, prompt]


def test_a_one_turn_session_loads_no_heavy_module_it_does_not_use(env: dict[str, str], workspace: Path) -> None:
    with ModelServer([Reply.text("done")]) as server:
        proc, modules = loaded(env, *agent(server, workspace, "Say done."))
        server.assert_clean()
    assert proc.returncode == 0, proc.stderr
    end = json.loads(proc.stdout.splitlines()[-1])
    assert end["type"] == "session_end" and end["final_text"] == "done"
    # It did the real work: a provider, the journal. gRPC and protobuf load at the first tool call
    # (gRPC's name alone is bound at import), and personas only when one is named.
    assert {"httpx", "sqlite3", "osprey.session.core", "osprey.toolservice.client"} <= modules
    assert imported(modules, ("grpc._cython", "google.protobuf", "osprey.personas")) == []
    assert imported(modules, NEVER) == []
    assert imported(modules, NOT_FOR_A_PLAIN_SESSION) == []
    assert imported(modules, PLUGIN_SCAN) == []
    assert imported(modules, ONLY_WHEN_USED) == []
    assert "h11" in modules and imported(modules, NOT_FOR_PLAIN_HTTP) == []
    # The model catalog gives the context window, looked up at the first compaction check: a
    # session of one turn never makes one.
    assert imported(modules, ("osprey.catalog",)) == []
    # Its local dispatcher's start was held: no process was made while the session was starting.
    assert begun(proc) == [False]
    # The extension pins (the trust pins of custom tools and hooks) load with the first manifest or
    # hooks file: a workspace without them never needs them.
    assert imported(modules, ("osprey.extensions.pins",)) == []


# Loaded only when there is something to do with them: the input models of the control, memory,
# process, session search and skill tools with the first call of one (their schemas are stored),
# the sidecar's path rules with the first background process, the parsers of a toolsets.toml and
# a tool-descriptions.toml with such a file.
ONLY_WITH_THEIR_WORK = ("osprey_sidecar.paths", "osprey.extensions.toolsets", "osprey.extensions.descriptions", "osprey.tools.inputs")


def test_a_one_turn_session_loads_no_process_rules_and_no_parser_of_a_file_it_lacks(env: dict[str, str], workspace: Path) -> None:
    with ModelServer([Reply.text("done")]) as server:
        proc, modules = loaded(env, *agent(server, workspace, "Say done."))
    assert proc.returncode == 0, proc.stderr
    assert "process" in json.loads(proc.stdout.splitlines()[0])["tools"]  # the tool is offered all the same
    assert "osprey.tools.process" in modules and imported(modules, ONLY_WITH_THEIR_WORK) == []
    # With the files, the parsers load and do their work.
    layer = workspace / ".osprey"
    layer.mkdir()
    (layer / "toolsets.toml").write_text('[toolsets.reading]\ntools = ["read_file"]\n')
    (layer / "tool-descriptions.toml").write_text('read_file = "Read one file."\n')
    with ModelServer([Reply.text("done")]) as server:
        proc, modules = loaded(env, *agent(server, workspace, "Say done."), "--toolset", "reading")
        [request] = server.requests
    assert proc.returncode == 0, proc.stderr
    assert [(t["function"]["name"], t["function"]["description"]) for t in request.body["tools"]] == [("read_file", "Read one file.")]
    assert {"osprey.extensions.toolsets", "osprey.extensions.descriptions"} <= modules


def test_a_stored_tools_input_model_loads_and_checks_at_its_first_call(env: dict[str, str], workspace: Path) -> None:
    two_at_once = {"todos": [{"content": "a", "status": "in_progress"}, {"content": "b", "status": "in_progress"}]}
    with ModelServer([Reply.tool_call("todo_write", two_at_once), Reply.tool_call("todo_write", {"todos": [{"content": " a ", "status": "in_progress"}]}),
                      Reply.text("done")]) as server:
        proc, modules = loaded(env, *agent(server, workspace, "Plan."))
        server.assert_clean()
        first = server.requests[0].body["tools"]
    assert proc.returncode == 0, proc.stderr
    results = [json.loads(line) for line in proc.stdout.splitlines() if '"tool_result"' in line]
    assert [r["ok"] for r in results] == [False, True]
    assert "at most one may be" in results[0]["output"] and "In progress: a" in results[1]["output"]
    assert "osprey.tools.inputs" in modules
    [todo] = [t["function"] for t in first if t["function"]["name"] == "todo_write"]
    assert todo["parameters"]["properties"]["todos"]["maxItems"] == 100


def test_a_session_that_reads_a_file_still_loads_none_of_them(env: dict[str, str], workspace: Path) -> None:
    with ModelServer([Reply.tool_call("read_file", {"path": "notes.txt"}), Reply.text("read it")]) as server:
        proc, modules = loaded(env, *agent(server, workspace, "Read notes.txt."))
        server.assert_clean()
    assert proc.returncode == 0, proc.stderr
    results = [json.loads(line) for line in proc.stdout.splitlines() if '"tool_result"' in line]
    assert [r["ok"] for r in results] == [True] and "two" in results[0]["output"]
    assert {"grpc._cython", "google.protobuf"} <= modules  # loaded for the call
    assert imported(modules, NEVER + NOT_FOR_A_PLAIN_SESSION + NOT_FOR_PLAIN_HTTP + PLUGIN_SCAN) == []
    assert begun(proc) == [False]  # held at the start, made once the session waited, and it served the call


def test_agent_help_loads_no_session_machinery(env: dict[str, str]) -> None:
    proc, modules = loaded(env, "agent", "--help")
    assert proc.returncode == 0 and "--provider" in proc.stdout
    assert imported(modules, NEVER + NOT_FOR_A_PLAIN_SESSION + ("httpx", "grpc", "pydantic", "osprey.session")) == []


def test_a_session_with_a_custom_tool_loads_jsonschema_only_when_the_tool_is_called(env: dict[str, str], workspace: Path) -> None:
    tools = Path(env["OSPREY_HOME"]) / "tools"
    tools.mkdir()
    (tools / "echo.sh").write_text("#!/bin/sh\ncat\n")
    (tools / "echo.sh").chmod(0o755)
    (tools / "echo_input.toml").write_text('name = "echo_input"\ndescription = "Echoes."\ncommand = ["./echo.sh"]\n'
                                           '[parameters.text]\ntype = "string"\nrequired = true\n')
    with ModelServer([Reply.text("done")]) as server:
        proc, modules = loaded(env, *agent(server, workspace, "Say done."))
    assert proc.returncode == 0, proc.stderr
    assert "echo_input" in json.loads(proc.stdout.splitlines()[0])["tools"]
    assert imported(modules, ("jsonschema",)) == []
    with ModelServer([Reply.tool_call("echo_input", {"text": "hi"}), Reply.text("done")]) as server:
        proc, modules = loaded(env, *agent(server, workspace, "Echo."), "--yolo")
    assert proc.returncode == 0, proc.stderr
    [result] = [json.loads(line) for line in proc.stdout.splitlines() if '"tool_result"' in line]
    assert result["ok"] and '"text":"hi"' in result["output"]
    assert "jsonschema" in modules


async def test_a_held_dispatcher_start_makes_its_process_once_the_loop_is_quiet(workspace: Path) -> None:
    home = LocalDispatcher([str(workspace)])
    token = start_when_quiet.set(True)
    try:
        starting = await home.begin()
    finally:
        start_when_quiet.reset(token)
    try:
        assert home.proc is None and not starting.done()  # nothing made yet: the caller is still busy
        assert home.dir is not None and os.path.isdir(home.dir)  # what can fail at once was made at once
        # A call waits: the loop is then quiet, the process is made, and the call is served.
        result = await asyncio.wait_for(home.client.read_file("notes.txt"), 60)
        assert "two" in result.content and home.proc is not None
    finally:
        await home.close()
    assert home.proc is None and home.dir is None


async def test_a_held_dispatcher_start_closed_before_it_was_made_leaves_nothing(workspace: Path) -> None:
    home = LocalDispatcher([str(workspace)])
    token = start_when_quiet.set(True)
    try:
        starting = await home.begin()
    finally:
        start_when_quiet.reset(token)
    made = home.dir
    assert made is not None and home.proc is None
    await home.close()
    assert starting.cancelled() and home.proc is None and home.dir is None and not os.path.exists(made)


async def test_without_the_hold_begin_makes_the_process_at_once(workspace: Path) -> None:
    home = LocalDispatcher([str(workspace)])
    try:
        await home.begin()
        assert home.proc is not None
    finally:
        await home.close()


async def test_until_quiet_waits_while_the_loop_is_busy_and_returns_once_it_waits() -> None:
    loop = asyncio.get_running_loop()
    quiet = asyncio.ensure_future(until_quiet(quiet_for=0.05, share=0.1, cap=30))
    # Busy: the loop runs callbacks between slices of CPU work, for 0.3 s of this thread's CPU time.
    busy_until = time.thread_time() + 0.3
    while time.thread_time() < busy_until:
        spin = time.thread_time() + 0.002
        while time.thread_time() < spin:
            pass
        await asyncio.sleep(0)
    assert not quiet.done()
    # Busy in a worker thread while the loop waits for it: the process is not quiet either.
    await asyncio.to_thread(spin_for, 0.3)
    assert not quiet.done()
    waited = loop.time()
    await asyncio.wait_for(quiet, 10)  # the loop now only waits
    assert loop.time() - waited < 5


def spin_for(seconds: float) -> None:
    """Keep this thread on the CPU for `seconds` of its CPU time."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


# The entry point as `osprey` and `python -m osprey` run it (the process's own command line, no
# arguments passed), with an exit handler and a module that says when the interpreter's teardown
# frees it.
ENTRY_POINT = """
import atexit, sys, types
from osprey.cli import main

class Freed:
    def __del__(self):
        sys.stderr.write("FREED\\n")

marker = types.ModuleType("freed_marker")  # the teardown empties the modules still loaded
marker.kept = Freed()
sys.modules["freed_marker"] = marker
del marker
atexit.register(lambda: sys.stderr.write("EXIT HANDLERS RAN\\n"))
sys.argv[0] = "osprey"
main()
"""


def test_a_finished_headless_session_ends_the_process_without_the_interpreters_teardown(env: dict[str, str], workspace: Path) -> None:
    with ModelServer([Reply.text("done")]) as server:
        proc = subprocess.run([sys.executable, "-c", ENTRY_POINT, *agent(server, workspace, "Say done.")], env=env,
                              capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    end = json.loads(proc.stdout.splitlines()[-1])  # written and flushed before the process ended
    assert end["type"] == "session_end" and end["final_text"] == "done"
    assert "EXIT HANDLERS RAN" in proc.stderr  # an ordinary exit's handlers still run
    assert "FREED" not in proc.stderr  # but nothing is torn down one object at a time


def test_a_failed_headless_session_keeps_its_status_and_ends_at_once_too(env: dict[str, str], workspace: Path) -> None:
    with ModelServer([Reply.error(400, "bad request")]) as server:
        proc = subprocess.run([sys.executable, "-c", ENTRY_POINT, *agent(server, workspace, "Say done.")], env=env,
                              capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["type"] == "session_end"
    assert "EXIT HANDLERS RAN" in proc.stderr and "FREED" not in proc.stderr


def test_other_commands_and_callers_that_pass_arguments_exit_as_usual(env: dict[str, str], workspace: Path) -> None:
    # A usage error of `osprey agent`: no session ran, so the process exits as any Python program does.
    proc = subprocess.run([sys.executable, "-c", ENTRY_POINT, "agent", "-C", str(workspace), "--max-turns", "0", "Say done."], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and "FREED" in proc.stderr
    # A caller that passes the arguments (RUNNER above) gets SystemExit back after a session, and goes on.
    with ModelServer([Reply.text("done")]) as server:
        proc, _ = loaded(env, *agent(server, workspace, "Say done."))
    assert proc.returncode == 0 and "MODULES " in proc.stderr


def test_leave_waits_for_a_thread_that_is_still_running() -> None:
    code = """
import sys, threading, time, types
from osprey.cli import leave

class Freed:
    def __del__(self):
        sys.stderr.write("FREED\\n")

marker = types.ModuleType("freed_marker")
marker.kept = Freed()
sys.modules["freed_marker"] = marker
del marker
def late():
    time.sleep(0.3)
    print("thread done", flush=True)
threading.Thread(target=late).start()
leave(3)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 3 and proc.stdout == "thread done\n"
    assert "FREED" in proc.stderr  # the ordinary exit was taken

