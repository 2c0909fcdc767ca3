"""The TUI's launch and teardown order (the spec's "TUI launch sequence", with the first screen
drawn before the session is set up), against the loopback model server: steps in order, the lane before the terminal, the terminal restored before the
session is torn down, and a lane never left behind by a launch that fails."""

from __future__ import annotations

import asyncio
import io
import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import require_docker
from test_tui import SIZE, notices, started, type_prompt, until

from osprey.config import Settings, load_settings
from osprey.events import Event, ModelSwitch, SessionStart, UserMessageEvent
from osprey.session.core import SessionOptions
from osprey.sessions.journal import journal_path, load_events, read_events
from osprey.sessions.resume import recorded_model
from osprey.testing.model_server import ModelServer, Reply
from osprey.tui.app import OspreyApp
from osprey.tui.launch import Launch, LaunchTrace, launch

# The first screen is drawn (the event loop takes keys) before the first session is set up.
LAUNCH = ["capabilities", "terminal", "guard", "event_loop", "system_prompt", "session", "tools", "agent"]
EXIT = ["shutdown", "terminal_restored", "teardown"]


def _steps(trace: LaunchTrace) -> list[str]:
    """The launch's steps, without the session's own (each part it makes) and the tool service's
    background start (when it answers is its own step)."""
    return [n for n in trace.names if n != "tool service ready" and not n.startswith("part ")]


def _plan(tmp_path: Path, server: ModelServer, **flags: Any) -> Launch:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir(exist_ok=True)
    home.mkdir(exist_ok=True)
    env = {"OSPREY_HOME": str(home), "OPENAI_API_KEY": "test-key"}

    def settings_for(change: dict[str, Any]) -> Settings:
        return load_settings(workspace, {"base_url": server.base_url, "approval_policy": "never", **flags, **change}, env, interactive=True)

    return Launch(options=SessionOptions(settings=settings_for({}), interactive=True), settings_for=settings_for, journal=journal_path(home),
                  trace=LaunchTrace())


class Seen:
    """What a run saw while the app was up, checked after the launch returned."""

    def __init__(self) -> None:
        self.hook_during: Any = None
        self.session_open_after_app = False
        self.lanes_during: list[Any] = []
        self.session_id = ""


def _lanes(session_id: str) -> list[Any]:
    import docker

    api = docker.from_env(timeout=120)
    try:
        return api.containers.list(all=True, filters={"label": f"osprey.session={session_id}"})
    finally:
        api.close()


def _exchange(seen: Seen, *, answer: str = "hi there") -> Any:
    async def run(app: OspreyApp) -> int | None:
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot, app)
            assert app.session is not None
            seen.hook_during = sys.excepthook
            seen.session_id = app.session.session_id
            await type_prompt(pilot, app, "say hi")
            await until(pilot, lambda: answer in app.transcript.to_markdown() and not app.driver.working)
            await type_prompt(pilot, app, "/quit")
            await until(pilot, lambda: not app.is_running)
        # The app has ended (in a terminal: the screen is restored) and the session is still open.
        seen.session_open_after_app = app.session is not None and not app.session._closed
        return app.return_value

    return run


async def test_launch_and_exit_follow_the_spec_order(tmp_path: Path, model_server: ModelServer) -> None:
    model_server.add(Reply.text("hi there"))
    plan = _plan(tmp_path, model_server)
    seen = Seen()
    before = sys.excepthook
    status = await launch(plan, run=_exchange(seen), stderr=io.StringIO())
    assert status == 0
    assert _steps(plan.trace) == [*LAUNCH, *EXIT]
    assert seen.session_open_after_app, "the session was torn down before the terminal was restored"
    assert seen.hook_during is not before and sys.excepthook is before  # the guard, then put back on a normal exit
    # Teardown drained the journal and checkpointed it.
    events = load_events(plan.journal, seen.session_id)
    assert [e["type"] for e in events][-2:] == ["task_end", "session_end"]
    wal = Path(f"{plan.journal}-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    assert "tools" in plan.trace.summary() and " ms" in plan.trace.summary()


async def test_a_dispatcher_that_cannot_start_stops_the_tui_before_the_agent(tmp_path: Path, model_server: ModelServer,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import osprey.toolservice.homes

    async def broken(self: Any) -> None:
        raise osprey.toolservice.homes.DispatcherError("the local dispatcher did not start: test")

    monkeypatch.setattr(osprey.toolservice.homes.LocalDispatcher, "_set_up", broken)
    plan = _plan(tmp_path, model_server)
    err = io.StringIO()

    async def run(app: OspreyApp) -> int | None:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: not app.is_running)
        return app.return_value

    assert await launch(plan, run=run, stderr=err) == 1
    assert "osprey: error: the local dispatcher did not start: test" in err.getvalue()
    assert "agent" not in plan.trace.names and plan.trace.names[-1] == "teardown"


async def test_a_dispatcher_that_fails_to_come_up_in_the_background_stops_the_tui(tmp_path: Path, model_server: ModelServer,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import osprey.toolservice.homes

    gate = asyncio.Event()
    processes: list[Any] = []

    async def held_then_broken(self: Any) -> None:
        processes.append(self.proc)  # the real child process, started by the real set-up
        await gate.wait()
        raise osprey.toolservice.homes.DispatcherError("the local dispatcher did not start serving: test")

    monkeypatch.setattr(osprey.toolservice.homes.LocalDispatcher, "_come_up", held_then_broken)
    plan = _plan(tmp_path, model_server)
    err = io.StringIO()
    states: list[str] = []

    async def run(app: OspreyApp) -> int | None:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.session is not None and app.session.started)  # its tools are held
            states.append(app.driver.state)
            gate.set()
            await until(pilot, lambda: not app.is_running)
        return app.return_value

    assert await launch(plan, run=run, stderr=err) == 1
    assert states == ["ready (the tools still starting)"]  # the prompt was usable before the tools were
    assert "osprey: error: the local dispatcher did not start serving: test" in err.getvalue()
    assert plan.trace.names[-1] == "teardown"
    [proc] = processes
    assert proc.returncode is not None  # the child was stopped with the session


async def test_a_resumed_session_goes_on_with_the_model_it_ran_with(tmp_path: Path, model_server: ModelServer) -> None:
    model_server.add(Reply.text("hi there"), Reply.text("hi there again"))
    plan = _plan(tmp_path, model_server, model="gpt-first", effort="low")
    seen = Seen()
    assert await launch(plan, run=_exchange(seen), stderr=io.StringIO()) == 0
    events = read_events(plan.journal, seen.session_id)
    assert recorded_model(events) == {"provider": "openai", "model": "gpt-first", "effort": "low"}
    assert recorded_model(load_events(plan.journal, seen.session_id)) == recorded_model(events), "a record's dicts read the same"
    # A model switch later in the record wins; junk and replay records are ignored.
    more = [*events, ModelSwitch(provider="replay", model="x"), ModelSwitch(provider="openai", model="gpt-\x1b[31m"),
            ModelSwitch(provider="anthropic", model="claude-x", effort="bogus")]
    assert recorded_model(more) == {"provider": "anthropic", "model": "claude-x"}
    start = SessionStart(session_id="s", provider="openai", model="m" * 500, cwd="/", tool_service="local", tools=[],
                         approval_policy="never", max_turns=5)
    assert recorded_model([start]) == {}
    assert recorded_model([start.model_copy(update={"model": "m" * 200})]) == {"provider": "openai", "model": "m" * 200}


def _tui_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process's environment as `osprey` would have it: a private OSPREY_HOME and a key; the workspace."""
    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir()
    home.mkdir()
    for name in [n for n in os.environ if n.startswith(("OSPREY_", "OPENAI_", "ANTHROPIC_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("OSPREY_HOME", str(home))
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("HOME", str(tmp_path))
    return workspace


async def test_the_tui_offers_only_the_toolset_it_was_given(tmp_path: Path, model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    from osprey.cli.tui import plan_for, resolve_options

    workspace = _tui_env(tmp_path, monkeypatch)
    (workspace / ".osprey").mkdir()
    (workspace / ".osprey" / "toolsets.toml").write_text('[toolsets.looking]\ntools = ["read_file", "grep"]\n')
    model_server.add(Reply.text("hi there"))
    plan = plan_for(resolve_options({"cwd": str(workspace), "base_url": model_server.base_url, "toolset": "looking", "yolo": True}))
    assert plan.options.toolset == "looking" and plan.options.interactive
    seen = Seen()
    assert await launch(plan, run=_exchange(seen), stderr=io.StringIO()) == 0
    [start] = [e for e in read_events(plan.journal, seen.session_id) if isinstance(e, SessionStart)]
    assert {"read_file", "grep"} <= set(start.tools) and not {"bash", "write_file", "edit_file"} & set(start.tools), start.tools
    offered = {tool["function"]["name"] for tool in model_server.requests[-1].body["tools"]}
    assert offered == set(start.tools)


async def test_the_tui_resumes_where_and_with_the_model_the_session_ran(tmp_path: Path, model_server: ModelServer,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from osprey.cli.tui import plan_for, resolve_options

    workspace = _tui_env(tmp_path, monkeypatch)
    model_server.add(Reply.text("hi there"), Reply.text("hello again"))
    first = plan_for(resolve_options({"cwd": str(workspace), "base_url": model_server.base_url, "model": "gpt-first", "effort": "low"}))
    seen = Seen()
    assert await launch(first, run=_exchange(seen), stderr=io.StringIO()) == 0

    monkeypatch.chdir(tmp_path)  # elsewhere, and no -C: the session's own directory
    again = plan_for(resolve_options({"resume": seen.session_id[:6], "base_url": model_server.base_url}))
    assert again.settings.cwd == workspace.resolve() and again.settings.model == "gpt-first" and again.settings.effort == "low"
    assert again.model_flags == {"provider": "openai", "model": "gpt-first", "effort": "low"}
    assert again.resume is not None and all(isinstance(e, Event) for e in again.resume.events)
    resumed = Seen()
    assert await launch(again, run=_exchange(resumed, answer="hello again"), stderr=io.StringIO()) == 0
    assert resumed.session_id == seen.session_id
    starts = [e for e in read_events(again.journal, seen.session_id) if isinstance(e, SessionStart)]
    assert [(e.model, e.effort, e.cwd) for e in starts] == [("gpt-first", "low", str(workspace.resolve()))] * 2
    body = model_server.requests[-1].body
    assert body["model"] == "gpt-first" and "hi there" in json.dumps(body["messages"]), "the conversation went on"


def _osprey_tui(*args: str, env: dict[str, str]) -> tuple[int, str]:
    """Run `osprey` as a person would on a pseudo-terminal that ends at once; its status and output."""
    import pty
    import subprocess

    master, slave = pty.openpty()
    proc = subprocess.Popen([str(Path(sys.executable).with_name("osprey")), *args], env=env, stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    return proc.wait(timeout=60), b"".join(chunks).decode("utf-8", "replace")


def test_resume_refuses_a_recorded_model_that_no_longer_resolves(tmp_path: Path, osprey_env: dict[str, str]) -> None:
    home = Path(osprey_env["OSPREY_HOME"])
    db = journal_path(home)
    from osprey.sessions.journal import Journal

    journal = Journal(db)
    journal.record(SessionStart(session_id="abc123", provider="anthropic", model="claude-test", cwd=str(tmp_path), tool_service="local",
                                tools=[], approval_policy="never", max_turns=5), "abc123", str(tmp_path))
    journal.record(UserMessageEvent(text="a prompt"), "abc123", str(tmp_path))  # a session without one is not kept
    journal.close()
    env = {k: v for k, v in osprey_env.items() if k != "ANTHROPIC_API_KEY"}
    status, output = _osprey_tui("-C", str(tmp_path), "--resume", "abc123", env=env)
    assert status == 1, output
    assert "cannot go on with anthropic · claude-test" in output and "--provider/--model" in output
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT count(*) FROM events WHERE session_id = 'abc123'").fetchone() == (2,)  # nothing added
    finally:
        conn.close()


async def test_sandbox_lane_starts_before_the_terminal_comes_up_behind_it_and_is_removed_after_it(tmp_path: Path, model_server: ModelServer) -> None:
    require_docker()
    model_server.add(Reply.text("hi there"))
    plan = _plan(tmp_path, model_server, sandbox={"enabled": True})
    seen = Seen()
    err = io.StringIO()
    homes: list[Any] = []
    later: list[str] = []

    async def and_a_new_session(app: OspreyApp) -> int | None:
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot, app)
            assert app.session is not None
            homes.append(app.session.home)
            seen.session_id = app.session.session_id
            # The lane comes up in the background while the prompt already takes keys.
            await until(pilot, lambda: app.session is not None and app.session.tools_starting is not None and app.session.tools_starting.done())
            seen.lanes_during = _lanes(seen.session_id)
            await type_prompt(pilot, app, "say hi")
            await until(pilot, lambda: "hi there" in app.transcript.to_markdown() and not app.driver.working)
            await type_prompt(pilot, app, "/new")
            await until(pilot, lambda: app.session is not None and app.session.session_id != seen.session_id and app.session.started)
            assert app.session is not None
            homes.append(app.session.home)
            later.append(app.session.session_id)
            await type_prompt(pilot, app, "/quit")
            await until(pilot, lambda: not app.is_running)
        return app.return_value

    assert await launch(plan, run=and_a_new_session, stderr=err) == 0
    assert _steps(plan.trace)[:len(LAUNCH) + 1] == ["sandbox", *LAUNCH]
    assert _steps(plan.trace)[-len(EXIT):] == EXIT
    assert "tool service ready" in plan.trace.names
    assert len(seen.lanes_during) == 1, "the session did not run in the lane provisioned at launch"
    assert homes[0] is homes[1] and _lanes(later[0]) == [], "a new session borrows the launch's lane"
    assert _lanes(seen.session_id) == []


async def test_a_lane_is_removed_when_the_launch_fails_before_or_after_handing_it_over(tmp_path: Path, model_server: ModelServer,
                                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    require_docker()
    plan = _plan(tmp_path, model_server, sandbox={"enabled": True})
    ids: list[str] = []

    async def terminal_fails(app: OspreyApp) -> None:
        raise OSError("the terminal could not be set up")

    import osprey.session.core

    real = osprey.session.core.new_session_id
    monkeypatch.setattr(osprey.session.core, "new_session_id", lambda: ids.append(real()) or ids[-1])
    with pytest.raises(OSError, match="terminal could not be set up"):
        await launch(plan, run=terminal_fails, stderr=io.StringIO())
    assert plan.trace.names == ["sandbox", "capabilities", "teardown"]
    assert ids[0] and _lanes(ids[0]) == []

    # With a session: the tools cannot be built, so the session fails, the TUI stops, and the lane goes with the launch.
    import osprey.tools

    def no_tools(**_: Any) -> list[Any]:
        raise RuntimeError("the tool layer could not be built")

    monkeypatch.setattr(osprey.tools, "base_tools", no_tools)
    plan = _plan(tmp_path, model_server, sandbox={"enabled": True})
    err = io.StringIO()

    async def run(app: OspreyApp) -> int | None:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: not app.is_running)
            assert "the tool layer could not be built" in notices(app)
        return app.return_value

    assert await launch(plan, run=run, stderr=err) == 1
    assert "the tool layer could not be built" in err.getvalue()
    assert _lanes(ids[-1]) == []
    assert "agent" not in plan.trace.names and plan.trace.names[-1] == "teardown"
