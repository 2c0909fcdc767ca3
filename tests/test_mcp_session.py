"""MCP servers in a session, end to end: the loopback model server calls `mcp__SERVER__TOOL` tools
of real MCP servers (the SDK server of the test suite, over stdio where the tools run and over
streamable HTTP), judged by the approval policies and hooks like any tool, filtered by toolsets,
personas and a child's tools, and told as `mcp_server` events."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from session_harness import FAST_RETRY, Harness

from osprey.config import load_settings
from osprey.config.mcp import McpServerSpec, ResolvedMcp
from osprey.events import McpServerState, Notice, SessionStart, ToolResultEvent
from osprey.mcp.tools import MAX_NAME, offered_by, prefix, tool_names
from osprey.personas import Persona
from osprey.policy.approvals import ApprovalAnswer, ApprovalRequest
from osprey.session.core import Session, SessionOptions
from osprey.testing.model_server import ModelServer, Reply, ToolCall
from osprey.tools.base import ChildRequest

SDK_SERVER = Path(__file__).parent / "mcp_servers" / "sdk_server.py"
START = 60.0  # seconds a test waits for its servers (a loaded machine imports the SDK slowly)

# Runs the SDK server after a delay: on its first start only (`first`), or on every start after
# the first (`again`); the marker file tells them apart.
DELAYED = """import os, runpy, sys, time
marker, delay, when, server = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
again = os.path.exists(marker)
open(marker, "a").close()
if again == (when == "again"):
    time.sleep(delay)
sys.argv = [server, *sys.argv[5:]]
runpy.run_path(server, run_name="__main__")
"""


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    return Harness.under(tmp_path, {"notes.txt": "alpha\n"}, git=True)


def stdio(name: str = "srv", *args: str, trusted: bool = True, **fields: Any) -> McpServerSpec:
    return McpServerSpec(name=name, origin="user", transport="stdio", command=sys.executable, args=(str(SDK_SERVER), *args),
                         trusted=trusted, startup_timeout_sec=START, **fields)


def delayed(marker: Path, seconds: float, when: str, name: str = "srv") -> McpServerSpec:
    return McpServerSpec(name=name, origin="user", transport="stdio", command=sys.executable, startup_timeout_sec=START,
                         args=("-c", DELAYED, str(marker), str(seconds), when, str(SDK_SERVER)))


@contextmanager
def http_server() -> Iterator[str]:
    """The SDK server over streamable HTTP on loopback: its URL."""
    process = subprocess.Popen([sys.executable, str(SDK_SERVER), "--http"], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("listening on "), line
        yield f"http://127.0.0.1:{int(line.split()[-1])}/mcp"
    finally:
        process.terminate()
        process.wait(10)


def options(h: Harness, server: ModelServer, specs: Sequence[McpServerSpec], *, max_chars: int | None = None,
            **flags: Any) -> SessionOptions:
    settings = load_settings(h.workspace, {"provider": "openai", "model": "m", "base_url": server.base_url, "approval_policy": "never", **flags},
                             {"OSPREY_HOME": str(h.home), "OPENAI_API_KEY": "unused"})
    update: dict[str, Any] = {"retry": FAST_RETRY, "mcp": ResolvedMcp(servers=tuple(specs))}
    if max_chars is not None:
        update["tool_results"] = settings.tool_results.model_copy(update={"max_chars": max_chars})
    return SessionOptions(settings=settings.model_copy(update=update))


@asynccontextmanager
async def running(h: Harness, server: ModelServer, specs: Sequence[McpServerSpec], *, ready: bool = True, approver: Any = None,
                  max_chars: int | None = None, flags: dict[str, Any] | None = None, **fields: Any) -> AsyncIterator[Session]:
    """A started session with these servers (ready, unless `ready` is False)."""
    opts = options(h, server, specs, max_chars=max_chars, approval_policy=fields.pop("approval_policy", "never"), **(flags or {}))
    session = Session(opts.model_copy(update=fields), emit=h.events.append, approver=approver)
    async with session:
        if ready:
            assert session.mcp is not None
            session.mcp.start()  # now, not with the first model response
            await session.mcp.wait_started(START)
            assert {s.state for s in session.mcp.servers.values()} == {"ready"}, [(s.spec.name, s.error) for s in session.mcp.servers.values()]
        yield session


def offered(request: Any) -> dict[str, Any]:
    """The tools of a recorded model request, by name."""
    return {tool["function"]["name"]: tool["function"] for tool in request.body.get("tools", [])}


def results(h: Harness) -> dict[str, ToolResultEvent]:
    return {e.name: e for e in h.of(ToolResultEvent)}


async def until(condition: Any, timeout: float = START) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


def states(h: Harness, server: str = "srv") -> list[str]:
    return [e.state for e in h.of(McpServerState) if e.server == server]


# ------------------------------------------------------------------------------------- names


def test_tool_names_are_safe_bounded_and_stable() -> None:
    names = tool_names("srv", ["echo", "get.file", "get_file", "x" * 80, "a b"])
    assert names["echo"] == "mcp__srv__echo"
    assert names["get_file"] == "mcp__srv__get_file"  # the name that needed no change keeps it
    assert names["get.file"].startswith("mcp__srv__get_file_") and names["get.file"] != names["get_file"]
    assert names["a b"] == "mcp__srv__a_b"
    assert len(names["x" * 80]) == MAX_NAME and names["x" * 80].startswith("mcp__srv__xxx")
    assert len(set(names.values())) == len(names)
    assert all(len(n) <= MAX_NAME and n.replace("_", "a").replace("-", "a").isalnum() for n in names.values())
    assert tool_names("srv", reversed(list(names))) == names  # the same names whatever the order


def test_a_tools_list_offers_one_tool_or_all_of_a_servers() -> None:
    assert offered_by(["mcp__srv__echo"], "srv", "mcp__srv__echo")
    assert not offered_by(["mcp__srv__echo"], "srv", "mcp__srv__add")
    assert offered_by(["mcp__srv"], "srv", "mcp__srv__add") and offered_by(["mcp__srv__*"], "srv", "mcp__srv__add")
    assert not offered_by(["mcp__other", "mcp__other__*", "mcp__s"], "srv", "mcp__srv__add")


# ------------------------------------------------------------------------------ calling tools


async def test_the_model_calls_a_stdio_servers_tools(h: Harness) -> None:
    script = [Reply.tool_calls([ToolCall("mcp__srv__echo", {"text": "hello there"}), ToolCall("mcp__srv__add", {"a": 2, "b": 3}),
                                ToolCall("mcp__srv__fail", {"message": "it broke"}), ToolCall("mcp__srv__big", {"size": 9000}),
                                ToolCall("mcp__srv__image", {})]),
              Reply.text("done")]
    with ModelServer(script) as server:
        async with running(h, server, [stdio()], max_chars=2000) as session:
            end = await session.submit("Use the server.")
        server.assert_clean()
        first = offered(server.requests[0])
    assert end.outcome == "Completed"
    echo = first["mcp__srv__echo"]
    assert echo["parameters"]["properties"]["text"]["type"] == "string" and "Echo the text back." in echo["description"]
    assert {"mcp__srv__add", "mcp__srv__crash", "mcp__srv__peek"} <= set(first)
    got = results(h)
    assert got["mcp__srv__echo"].ok and got["mcp__srv__echo"].output == "hello there"
    add = got["mcp__srv__add"]
    assert add.ok and json.loads(add.output) == {"sum": 5}  # the structured content is the text: said once
    assert not got["mcp__srv__fail"].ok and got["mcp__srv__fail"].error_category == "mcp_tool_error"
    assert "it broke" in got["mcp__srv__fail"].output
    big = got["mcp__srv__big"]
    assert big.ok and big.truncated_chars > 0 and len(big.output) < 2500  # cut to the tool-result limit like any result
    assert got["mcp__srv__image"].ok and "a pixel" in got["mcp__srv__image"].output
    tool_messages = [m for m in server.requests[1].body["messages"] if m["role"] == "tool"]
    assert any("hello there" in str(m["content"]) for m in tool_messages)
    assert states(h) == ["ready"] and [e.tools for e in h.of(McpServerState)] == [len([n for n in first if n.startswith("mcp__srv__")])]


async def test_structured_content_that_the_text_does_not_say_is_added(h: Harness) -> None:
    from osprey.mcp.connection import McpContent
    from osprey.mcp.tools import outcome_of

    said = outcome_of(McpContent("the sum is ready", structured={"sum": 5}))
    assert not said.is_error and said.text.startswith("the sum is ready") and '"sum": 5' in said.text
    assert outcome_of(McpContent('{"sum": 5}', structured={"sum": 5})).text == '{"sum": 5}'
    failed = outcome_of(McpContent("bad input", is_error=True))
    assert failed.is_error and failed.category == "mcp_tool_error" and "bad input" in failed.text


async def test_the_model_calls_a_streamable_http_servers_tools_and_reads_its_resources(h: Harness) -> None:
    script = [Reply.tool_calls([ToolCall("mcp__web__echo", {"text": "over http"}), ToolCall("list_mcp_resources", {}),
                                ToolCall("read_mcp_resource", {"server": "web", "uri": "memo://greeting"})]),
              Reply.text("done")]
    with http_server() as url, ModelServer(script) as server:
        spec = McpServerSpec(name="web", origin="user", transport="http", url=url, startup_timeout_sec=START)
        async with running(h, server, [spec]) as session:
            end = await session.submit("Use the server.")
        server.assert_clean()
    assert end.outcome == "Completed"
    got = results(h)
    assert got["mcp__web__echo"].output == "over http"
    assert "memo://greeting" in got["list_mcp_resources"].output and "memo://pixel" in got["list_mcp_resources"].output
    assert got["read_mcp_resource"].ok and got["read_mcp_resource"].output == "hello from the resource"


async def test_a_slow_server_does_not_delay_the_first_request_and_its_tools_come_next_turn(h: Harness, tmp_path: Path) -> None:
    script = [Reply.hold(1, Reply.tool_call("read_file", {"path": "notes.txt"})), Reply.tool_call("mcp__srv__echo", {"text": "late"}),
              Reply.text("done")]
    with ModelServer(script) as server:
        began = time.monotonic()
        async with running(h, server, [delayed(tmp_path / "marker", 5.0, "first")], ready=False) as session:
            task = asyncio.create_task(session.submit("Work."))
            assert await asyncio.to_thread(server.wait_requests, 1, START)
            first_request = time.monotonic() - began
            await until(lambda: states(h) == ["ready"])
            assert await asyncio.to_thread(server.wait_held, 1, START)
            server.release()
            end = await task
        server.assert_clean()
        tools = [offered(request) for request in server.requests]
    assert first_request < 4.0, first_request  # the server takes 5 s to start: the request did not wait for it
    assert not [name for name in tools[0] if name.startswith("mcp__")]
    assert "mcp__srv__echo" in tools[1]
    # The model is told which servers are still starting, and no more once they are ready.
    system = [request.body["messages"][0]["content"] for request in server.requests]
    assert "MCP servers still starting: srv." in system[0]
    assert "MCP servers still starting" not in system[1]
    assert end.outcome == "Completed" and results(h)["mcp__srv__echo"].output == "late"


async def test_a_headless_session_starts_its_servers_as_the_first_request_goes_out(h: Harness, tmp_path: Path) -> None:
    """Loading the SDK and starting servers takes CPU time the first request's sending needs: a
    headless session starts them as its first request goes out; an interactive one (a person
    is about to type) at once."""
    headless, interactive = tmp_path / "headless.pid", tmp_path / "interactive.pid"
    with ModelServer([Reply.text("done")]) as server:
        async with running(h, server, [stdio("srv", "--pid-file", str(headless))], ready=False) as session:
            await asyncio.sleep(1.0)
            assert session.mcp is not None and not session.mcp._tasks  # no runner scheduled, no SDK loading
            assert not headless.exists()
            await session.submit("Work.")
            await until(headless.exists)
    with ModelServer() as server:
        async with running(h, server, [stdio("srv", "--pid-file", str(interactive))], ready=False, interactive=True):
            await until(interactive.exists)


async def test_a_crashed_servers_calls_fail_clearly_until_it_is_back(h: Harness, tmp_path: Path) -> None:
    script = [Reply.tool_call("mcp__srv__crash", {}), Reply.tool_call("mcp__srv__echo", {"text": "too soon"}),
              Reply.hold(1, Reply.tool_call("mcp__srv__echo", {"text": "back again"})), Reply.text("done")]
    with ModelServer(script) as server:
        async with running(h, server, [delayed(tmp_path / "marker", 3.0, "again")]) as session:
            task = asyncio.create_task(session.submit("Work."))
            await until(lambda: states(h) == ["ready", "restarting", "ready"])
            assert await asyncio.to_thread(server.wait_held, 1, START)
            server.release()
            end = await task
        server.assert_clean()
    assert end.outcome == "Completed"
    crash, soon, back = h.of(ToolResultEvent)
    assert not crash.ok and crash.error_category == "mcp_unavailable" and "srv" in crash.output
    assert not soon.ok and soon.error_category == "mcp_unavailable" and "restarted" in soon.output and "crashed" in soon.output, soon.output
    assert back.ok and back.output == "back again"
    notices = [n for n in h.of(Notice) if "MCP server srv" in n.message]
    assert [n.level for n in notices] == ["warning", "info"], notices
    assert "started again" in notices[0].message and "is back" in notices[1].message


async def test_a_server_that_cannot_start_is_told_once_and_offers_nothing(h: Harness, tmp_path: Path) -> None:
    broken = McpServerSpec(name="broken", origin="user", transport="stdio", command=sys.executable,
                           args=("-c", "import sys; print('no such luck', file=sys.stderr); sys.exit(3)"), startup_timeout_sec=START)
    with ModelServer([Reply.text("done")]) as server:
        async with running(h, server, [broken, stdio()], ready=False) as session:
            assert session.mcp is not None
            session.mcp.start()
            await session.mcp.wait_started(START)
            await session.submit("Work.")
        tools = offered(server.requests[0])
    assert states(h, "broken") == ["failed"] and "no such luck" in (h.of(McpServerState)[0].error or "") + "".join(
        e.error or "" for e in h.of(McpServerState))
    (notice,) = [n.message for n in h.of(Notice) if "broken" in n.message and n.level == "warning"]
    assert notice.startswith("the MCP server broken did not start: ") and "the MCP server 'broken'" not in notice, notice
    assert not [name for name in tools if name.startswith("mcp__broken")] and "mcp__srv__echo" in tools


async def test_under_sandbox_a_stdio_server_runs_in_the_lane(h: Harness) -> None:
    from helpers import require_docker
    from test_mcp_runtime import sdk_spec

    require_docker()
    spec = sdk_spec("lane", h.workspace, startup_timeout_sec=START)
    with ModelServer() as server:
        async with running(h, server, [spec], flags={"sandbox": {"enabled": True}}) as session:
            assert session.tool_service_kind == "lane" and session.mcp is not None
            pid = session.mcp.servers["sdk"].pid
            assert pid is not None
            server.add(Reply.tool_calls([ToolCall("mcp__sdk__echo", {"text": "in the lane"}),
                                         ToolCall("bash", {"command": f"tr '\\0' ' ' < /proc/{pid}/cmdline"})]), Reply.text("done"))
            end = await session.submit("Work.")
        server.assert_clean()
    assert end.outcome == "Completed"
    got = results(h)
    assert got["mcp__sdk__echo"].output == "in the lane"
    assert got["bash"].ok and "sdk_server.py" in got["bash"].output  # the server is a process of the lane, beside the tools


# ------------------------------------------------------------------------------ what is offered


async def test_toolsets_personas_and_their_wildcards_choose_the_servers_tools(h: Harness) -> None:
    (h.home / "toolsets.toml").write_text('[toolsets.one]\ntools = ["read_file", "mcp__srv__echo"]\n'
                                          '[toolsets.whole]\ntools = ["read_file", "mcp__srv"]\n'
                                          '[toolsets.star]\ntools = ["read_file", "mcp__srv__*"]\n')
    picky = Persona(name="picky", prompt="Be picky.", source="user", path="", tools=("read_file", "mcp__srv__*", "list_mcp_resources"))
    seen: dict[str, set[str]] = {}
    for label, fields in (("one", {"toolset": "one"}), ("whole", {"toolset": "whole"}), ("star", {"toolset": "star"}), ("persona", {"persona": picky}),
                          ("child list", {"tools": ["read_file", "mcp__srv__add"]})):
        with ModelServer([Reply.text("done")]) as server:
            async with running(h, server, [stdio()], **fields) as session:
                await session.submit("Work.")
            seen[label] = {name for name in offered(server.requests[0]) if "mcp" in name}
    everything = {f"mcp__srv__{n}" for n in ("echo", "add", "fail", "slow", "big", "crash", "image", "peek", "garbage", "grow")}
    assert seen["one"] == {"mcp__srv__echo"}
    assert seen["whole"] == everything
    assert seen["star"] == everything
    assert seen["persona"] == everything | {"list_mcp_resources"}
    assert seen["child list"] == {"mcp__srv__add"}


async def test_a_child_session_uses_its_leads_servers(h: Harness) -> None:
    script = [Reply.tool_call("mcp__srv__echo", {"text": "from the child"}), Reply.text("child done")]
    with ModelServer(script) as server:
        async with running(h, server, [stdio()]) as session:
            child = await session.spawn(ChildRequest(task="Echo something."))
            end = await child.wait()
            assert child.session.mcp is session.mcp
            assert "tools:mcp" in session.owned_parts and "tools:mcp" not in child.session.owned_parts
            await child.close()
            assert session.mcp is not None and session.mcp.servers["srv"].state == "ready"  # the child closed nothing of its lead's
        server.assert_clean()
    assert end.outcome == "Completed"
    (result,) = h.of(ToolResultEvent)
    assert result.agent_id == child.agent_id and result.ok and result.output == "from the child"
    child_start = next(e for e in h.of(SessionStart) if e.agent_id == child.agent_id)
    assert "mcp__srv__echo" in child_start.tools


async def test_a_spawnable_persona_may_name_all_of_a_servers_tools(h: Harness) -> None:
    (h.home / "personas").mkdir()
    (h.home / "personas" / "echoer.md").write_text("---\nname: echoer\nspawnable: true\ntools: [mcp__srv, read_file]\n---\n\nEcho things.\n")
    with ModelServer([Reply.text("child done")]) as server:
        async with running(h, server, [stdio(), stdio("other")]) as session:
            child = await session.spawn(ChildRequest(task="Echo something.", persona="echoer"))
            await child.wait()
            await child.close()
        server.assert_clean()
    tools = set(next(e for e in h.of(SessionStart) if e.agent_id == child.agent_id).tools)
    assert {"mcp__srv__echo", "mcp__srv__peek", "read_file"} <= tools
    assert not [name for name in tools if name.startswith("mcp__other")]


# ------------------------------------------------------------------------------ judged like any tool


class Recorder:
    """Allows every call once and records which tools asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        self.asked.append(request.tool)
        return ApprovalAnswer(decision="allow_once")


async def test_approval_asks_unless_a_trusted_server_says_read_only(h: Harness) -> None:
    approver = Recorder()
    script = [Reply.tool_calls([ToolCall("mcp__srv__echo", {"text": "x"}), ToolCall("mcp__srv__peek", {"key": "k"}),
                                ToolCall("mcp__other__peek", {"key": "k"})]), Reply.text("done")]
    with ModelServer(script) as server:
        async with running(h, server, [stdio(), stdio("other", trusted=False)], approver=approver, approval_policy="on-request") as session:
            end = await session.submit("Work.")
        server.assert_clean()
    assert end.outcome == "Completed"
    # echo changes things as far as anyone knows; peek is read-only only where its server is trusted.
    assert sorted(approver.asked) == ["mcp__other__peek", "mcp__srv__echo"]
    assert all(r.ok for r in h.of(ToolResultEvent))


async def test_a_hook_matching_mcp_tools_denies_them(h: Harness) -> None:
    hook = h.home / "deny.sh"
    hook.write_text('#!/bin/sh\necho \'{"hookSpecificOutput": {"permissionDecision": "deny", "permissionDecisionReason": "no MCP here"}}\'\n')
    hook.chmod(0o755)
    (h.home / "hooks.toml").write_text(f'[[hooks.PreToolUse]]\nmatcher = "mcp__.*"\n[[hooks.PreToolUse.hooks]]\ncommand = "{hook}"\n')
    script = [Reply.tool_calls([ToolCall("mcp__srv__peek", {"key": "k"}), ToolCall("read_file", {"path": "notes.txt"})]), Reply.text("done")]
    with ModelServer(script) as server:
        async with running(h, server, [stdio()]) as session:
            await session.submit("Work.")
        server.assert_clean()
    got = results(h)
    assert not got["mcp__srv__peek"].ok and got["mcp__srv__peek"].error_category == "denied" and "no MCP here" in got["mcp__srv__peek"].output
    assert got["read_file"].ok


# ------------------------------------------------------------------------------ osprey agent


def test_osprey_agent_prints_the_servers_state_as_json_lines(tmp_path: Path, osprey_env: dict[str, str]) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    home = Path(osprey_env["OSPREY_HOME"])
    (home / "config.toml").write_text(f'[mcp_servers.srv]\ncommand = {json.dumps(sys.executable)}\nargs = [{json.dumps(str(SDK_SERVER))}]\n'
                                      f"startup_timeout_sec = {START}\n")
    script = [Reply.hold(1, Reply.tool_call("read_file", {"path": "missing.txt"})), Reply.tool_call("mcp__srv__echo", {"text": "agent"}),
              Reply.text("done")]
    events: list[dict[str, Any]] = []
    with ModelServer(script) as server:
        process = subprocess.Popen([sys.executable, "-m", "osprey", "agent", "--provider", "openai", "--model", "m", "--base-url",
                                    server.base_url, "--yolo", "--events-jsonl", "Work."],
                                   cwd=workspace, env=osprey_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert process.stdout is not None
            for line in process.stdout:  # the first request is held until the server is ready
                events.append(json.loads(line))
                if events[-1]["type"] == "mcp_server":
                    assert server.wait_held(1, START)
                    server.release()
                if events[-1]["type"] == "session_end":
                    break
            assert process.wait(60) == 0, process.stderr.read()[-2000:] if process.stderr else ""
        finally:
            process.kill()
            process.wait()
    (state,) = [e for e in events if e["type"] == "mcp_server"]
    assert state["server"] == "srv" and state["state"] == "ready" and state["tools"] == 10 and "error" not in state
    assert [e["output"] for e in events if e["type"] == "tool_result" and e["name"] == "mcp__srv__echo"] == ["agent"]


# ------------------------------------------------------------------- untrusted servers' limits


def test_a_name_under_another_servers_prefix_is_hashed_and_told() -> None:
    taken: set[str] = set()
    first = tool_names("a", ["b__c"], taken=taken)
    moved: list[tuple[str, str]] = []
    later = tool_names("a__b", ["c", "d"], taken=taken, reserved=[prefix("a")], moved=lambda tool, wanted: moved.append((tool, wanted)))
    assert first == {"b__c": "mcp__a__b__c"}
    assert later["c"].startswith("mcp__a__b__c_") and later["d"].startswith("mcp__a__b__d_")  # the prefix is a's, ready or not
    assert moved == [("c", "mcp__a__b__c"), ("d", "mcp__a__b__d")]
    assert tool_names("a__b", ["c"], reserved=[prefix("a")]) == {"c": later["c"]}  # the same whatever a offers


async def test_a_later_server_never_takes_the_name_of_an_earlier_one_that_is_not_ready(h: Harness) -> None:
    # Server `a` cannot start; server `a__b` (its name made past the config's checks) would read as
    # a's tools `b__echo`... and take a saved rule for them.
    down = McpServerSpec(name="a", origin="user", transport="stdio", command=sys.executable, args=("-c", "raise SystemExit(3)"),
                         startup_timeout_sec=START)
    other = stdio("x", trusted=False).model_copy(update={"name": "a__b", "origin": "project"})
    approver = Recorder()
    script = [Reply.tool_call("mcp__a__b__echo", {"text": "secret"}), Reply.text("done")]
    with ModelServer(script) as server:
        async with running(h, server, [down, other], ready=False, approver=approver, approval_policy="on-request",
                           allow=["mcp__a__b__echo"]) as session:
            assert session.mcp is not None
            session.mcp.start()
            await session.mcp.wait_started(START)
            await session.submit("Work.")
        tools = offered(server.requests[0])
    assert "mcp__a__b__echo" not in tools
    assert [n for n in tools if n.startswith("mcp__a__b__echo_")]
    assert not results(h)["mcp__a__b__echo"].ok and not approver.asked  # no such tool: nothing ran
    moved = [n.message for n in h.of(Notice) if "hashed name" in n.message and "'echo'" in n.message]
    assert len(moved) == 1 and "mcp__a__b__echo" in moved[0] and n_warning(h, moved[0])


def n_warning(h: Harness, message: str) -> bool:
    return any(n.message == message and n.level == "warning" for n in h.of(Notice))


def test_an_mcp_tool_skips_argument_validation_and_a_bad_schema_never_raises() -> None:
    from osprey.mcp.connection import McpToolInfo
    from osprey.mcp.tools import server_tool
    from osprey.tools.base import Tool

    class Holder:
        spec = stdio(trusted=False)

    redos = {"type": "object", "properties": {"x": {"type": "string", "pattern": "^(a+)+$"}}}
    tool = server_tool(Holder, McpToolInfo("t", "d", redos, False), "mcp__srv__t", None)  # type: ignore[arg-type]
    assert tool is not None and not tool.validate_arguments
    began = time.monotonic()
    assert tool.validate({"x": "a" * 40 + "!"}) == ({"x": "a" * 40 + "!"}, None)  # the server checks its own arguments
    assert time.monotonic() - began < 1
    assert tool.validate(["not", "an", "object"])[1] == "arguments: must be a JSON object"  # type: ignore[arg-type]

    async def run(call: Any, ctx: Any) -> str:
        return "ran"

    for schema in ({"type": "object", "properties": {"x": {"$ref": "#/nowhere"}}},
                   {"type": "object", "$defs": {"a": {"$ref": "#/$defs/a"}}, "properties": {"x": {"$ref": "#/$defs/a"}}}):
        checked = Tool("t", "d", schema, run)
        value, problem = checked.validate({"x": 1})
        assert value is None and problem is not None and "cannot check" in problem


async def test_a_sessions_mcp_tools_are_capped_in_number_and_size(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    import osprey.mcp.tools as mcp_tools

    monkeypatch.setattr(mcp_tools, "MAX_TOOLS", 4)
    with ModelServer([Reply.text("done"), Reply.text("again")]) as server:
        async with running(h, server, [stdio("one"), stdio("two")]) as session:
            await session.submit("Work.")
            monkeypatch.setattr(mcp_tools, "MAX_TOOLS", 100)
            monkeypatch.setattr(mcp_tools, "MAX_TOOLS_BYTES", 1500)
            assert session.mcp is not None
            session._mcp_generation = -1  # made again under the new budget
            await session.submit("Again.")
        first, second = offered(server.requests[0]), offered(server.requests[1])
    assert [n for n in first if n.startswith("mcp__")] == ["mcp__one__echo", "mcp__one__add", "mcp__one__fail", "mcp__one__slow"]
    assert "list_mcp_resources" in first  # the resource tools are not counted
    assert 0 < len([n for n in second if n.startswith("mcp__")]) < 10
    assert len(json.dumps([second[n] for n in second if n.startswith("mcp__")])) <= 1500 + 400  # the budget, give or take the JSON's spaces
    left = [n.message for n in h.of(Notice) if "are left out" in n.message]
    assert left[0].startswith("6 tools of the MCP server one are left out") and "enabled_tools" in left[0]
    assert left[1].startswith("10 tools of the MCP server two are left out") and len(left) == 2  # once per server


async def test_resource_tools_reach_only_offered_servers_and_are_read_only_only_when_all_are_trusted(h: Harness) -> None:
    approver = Recorder()
    script = [Reply.tool_calls([ToolCall("read_mcp_resource", {"server": "two", "uri": "memo://greeting"}),
                                ToolCall("list_mcp_resources", {}), ToolCall("list_mcp_resources", {"server": "two"})]),
              Reply.text("done")]
    with ModelServer(script) as server:
        async with running(h, server, [stdio("one"), stdio("two", trusted=False)], approver=approver, approval_policy="on-request",
                           tools=["read_file", "mcp__one", "list_mcp_resources", "read_mcp_resource"]) as session:
            await session.submit("Work.")
            assert session.registry is not None
            assert not session.registry.tools["read_mcp_resource"].read_only  # `two` is not trusted
    events = h.of(ToolResultEvent)
    read, listed, listed_two = events[0], events[1], events[2]
    assert not read.ok and "not among this session's tools" in read.output and "hello" not in read.output
    assert listed.ok and "one:" in listed.output and "two:" not in listed.output
    assert not listed_two.ok and "not among this session's tools" in listed_two.output
    assert sorted(approver.asked) == ["list_mcp_resources", "list_mcp_resources", "read_mcp_resource"]
    with ModelServer([Reply.text("done")]) as server:
        async with running(h, server, [stdio("one")]) as session:
            await session.submit("Work.")
            assert session.registry is not None and session.registry.tools["read_mcp_resource"].read_only
