"""MCP servers in the terminal UI, against the SDK test server over stdio and the loopback model
server: a server's prompts become `/mcp__SERVER__PROMPT` commands once it is ready (in the menu and
/help, with their arguments), running one sends the rendered prompt to the model, a bad argument
is said; /status shows each server's state, tools and error; a server that fails to start, one
that crashes and its recovery are notices; /extensions shows origin, trust, state and tools, and the declared servers that do not run."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from test_tui import SIZE, notices, started, type_prompt, until

from osprey.config import Settings, load_settings
from osprey.session.core import Session, SessionOptions
from osprey.testing.model_server import ModelServer, Reply
from osprey.tui.app import OspreyApp
from osprey.tui.completion import CompletionMenu
from osprey.tui.driver import Hooks
from osprey.tui.widgets import PromptArea

SERVER = Path(__file__).parent / "mcp_servers" / "sdk_server.py"
# Starts the SDK server once the file GO exists: the test sees the server `starting` first.
GATED = ("import os, sys, time\n"
         "deadline = time.monotonic() + 60\n"
         "while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:\n"
         "    time.sleep(0.05)\n"
         "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])\n")


class Rig:
    def __init__(self, tmp_path: Path, model_server: ModelServer) -> None:
        self.workspace, self.home = tmp_path / "ws", tmp_path / "home"
        (self.workspace / ".git").mkdir(parents=True)
        self.home.mkdir()
        self.go = tmp_path / "go"
        used = tmp_path / "used"
        used.write_text("")  # `--start-once` finds it: that server exits at once, every time
        (self.home / "config.toml").write_text(
            "[mcp_servers.tester]\n"
            f"command = {json.dumps(sys.executable)}\n"
            f"args = ['-c', {json.dumps(GATED)}, {json.dumps(str(self.go))}, {json.dumps(str(SERVER))}]\n"
            "[mcp_servers.broken]\n"
            f"command = {json.dumps(sys.executable)}\n"
            f"args = [{json.dumps(str(SERVER))}, '--start-once', {json.dumps(str(used))}]\n"
            "startup_timeout_sec = 20\n")
        (self.workspace / ".mcp.json").write_text(json.dumps({"mcpServers": {"theirs": {"command": "their-server"}}}))
        self.model_server = model_server

    def settings(self) -> Settings:
        env = {"OSPREY_HOME": str(self.home), "OPENAI_API_KEY": "test-key"}
        return load_settings(self.workspace, {"base_url": self.model_server.base_url, "approval_policy": "never"}, env, interactive=True)

    def app(self) -> OspreyApp:
        def factory(hooks: Hooks) -> Session:
            return Session(SessionOptions(settings=self.settings(), interactive=True), **hooks.kwargs())

        return OspreyApp(factory)


@pytest.fixture
def rig(tmp_path: Path, model_server: ModelServer) -> Rig:
    return Rig(tmp_path, model_server)


def state(app: OspreyApp, name: str) -> str | None:
    mcp = app.session.mcp if app.session is not None else None
    server = mcp.servers.get(name) if mcp is not None else None
    return server.state if server is not None else None


async def menu_for(pilot: Any, app: OspreyApp, typed: str) -> list[str]:
    area = app.query_one(PromptArea)
    area.load_text(typed)
    area.move_cursor(area.document.end)
    await pilot.pause()
    menu = app.query_one(CompletionMenu)
    found = [c.name for c in menu.found] if menu.shown else []
    area.clear()
    await pilot.pause()
    return found


def last_user_text(request: Any) -> str:
    [*_, last] = [m for m in request.body["messages"] if m["role"] == "user"]
    content = last["content"]
    return content if isinstance(content, str) else "".join(part.get("text", "") for part in content)


async def test_prompts_become_commands_once_ready_and_send_the_rendered_prompt(rig: Rig) -> None:
    rig.model_server.add(Reply.text("reviewed"))
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        assert state(app, "tester") == "starting"
        assert await menu_for(pilot, app, "/mcp__") == []  # not ready: no commands yet
        rig.go.write_text("")
        await until(pilot, lambda: state(app, "tester") == "ready")
        assert await menu_for(pilot, app, "/mcp__") == ["mcp__tester__review"]
        menu = app.query_one(CompletionMenu)
        app.query_one(PromptArea).load_text("/mcp__tester__r")
        await pilot.pause()
        [shown] = menu.found
        assert shown.usage == "/mcp__tester__review SUBJECT [TONE]"
        assert shown.help == "Ask for a review of a subject. (arguments: subject, tone?)"
        app.query_one(PromptArea).clear()

        await type_prompt(pilot, app, "/help")
        await until(pilot, lambda: "MCP prompts:" in notices(app))
        assert "/mcp__tester__review SUBJECT [TONE]  Ask for a review of a subject. (arguments: subject, tone?)" in notices(app)

        await type_prompt(pilot, app, "/mcp__tester__review")
        await until(pilot, lambda: "the required argument subject is missing" in notices(app))
        assert rig.model_server.request_count == 0

        await type_prompt(pilot, app, "/mcp__tester__review 'the parser' tone=dry")
        await until(pilot, lambda: "reviewed" in app.transcript.to_markdown() and not app.driver.working)
        [request] = rig.model_server.requests
        assert last_user_text(request) == "Review the parser in a dry tone."


async def test_status_and_extensions_show_the_servers_and_a_failed_start_is_a_notice(rig: Rig) -> None:
    rig.go.write_text("")
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await until(pilot, lambda: state(app, "tester") == "ready" and state(app, "broken") == "failed")
        await until(pilot, lambda: "broken" in notices(app))  # the session's notice of the failed start

        await type_prompt(pilot, app, "/status")
        await until(pilot, lambda: "MCP servers:" in notices(app))
        text = notices(app)
        tools = len(app.session.mcp.servers["tester"].tools)  # type: ignore[union-attr]
        assert tools > 5 and f"  tester: ready, {tools} tools" in text
        [broken] = [line for line in text.splitlines() if line.startswith("  broken: failed")]
        assert len(broken) > len("  broken: failed: ")
        assert "  1 declared server not started (/extensions says why)" in text

        await type_prompt(pilot, app, "/extensions")
        await until(pilot, lambda: "MCP server tester (user, stdio, trusted): ready" in notices(app))
        text = notices(app)
        assert f"  {tools} tools: " in text and "echo" in text
        assert "MCP server broken (user, stdio, trusted): failed" in text
        assert "MCP server theirs (mcp.json) does not run: " in text


async def test_a_crash_and_the_recovery_show_as_notices_and_in_status(rig: Rig) -> None:
    rig.go.write_text("")
    rig.model_server.add(Reply.tool_call("mcp__tester__crash", {"code": 3}), Reply.text("it crashed"))
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await until(pilot, lambda: state(app, "tester") == "ready")
        rig.go.unlink()  # its next start waits until the test says
        await type_prompt(pilot, app, "crash the server")
        await until(pilot, lambda: "the MCP server tester stopped" in notices(app))
        assert "it is being started again, and its tools fail until it is back" in notices(app)
        await until(pilot, lambda: "it crashed" in app.transcript.to_markdown() and not app.driver.working)
        await type_prompt(pilot, app, "/status")
        await until(pilot, lambda: "  tester: restarting: the MCP server 'tester' crashed" in notices(app))
        rig.go.write_text("")
        await until(pilot, lambda: "the MCP server tester is back (10 tools)" in notices(app))
        await type_prompt(pilot, app, "/status")
        await until(pilot, lambda: notices(app).count("  tester: ready, 10 tools") == 1)
