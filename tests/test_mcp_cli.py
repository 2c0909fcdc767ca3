"""`osprey mcp list|get|add|remove` on a temporary OSPREY_HOME, against the SDK test server
(tests/mcp_servers/sdk_server.py) started for real over stdio and streamable HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from osprey.cli.mcp import mcp
from osprey.config import load_settings

SERVER = str(Path(__file__).resolve().parent / "mcp_servers" / "sdk_server.py")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "osprey-home"
    h.mkdir()
    return h


@pytest.fixture
def project(workspace: Path) -> Path:
    (workspace / ".git").mkdir()
    return workspace


def run(home: Path, *args: str, **env: str) -> Result:
    return CliRunner().invoke(mcp, list(args), env={"OSPREY_HOME": str(home), "OPENAI_API_KEY": None, **env}, catch_exceptions=False)


def listed(home: Path, project: Path) -> dict[str, dict]:
    result = run(home, "list", "--json", "-C", str(project))
    assert result.exit_code == 0, result.output
    return {s["name"]: s for s in json.loads(result.stdout)["servers"]}


@pytest.fixture
def http_server() -> Iterator[str]:
    proc = subprocess.Popen([sys.executable, SERVER, "--http"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening on "), line
        yield f"http://127.0.0.1:{int(line.split()[-1])}/mcp"
    finally:
        proc.kill()
        proc.wait()


def test_add_list_remove_round_trip_keeps_the_rest_of_the_file(home: Path, project: Path) -> None:
    (home / "config.toml").write_text("# my settings\nmodel = \"gpt-4.1\"\n\n[retry]\nmax_retries = 2\n")
    result = run(home, "add", "echo", "--env", "GREETING=hi there", "--", sys.executable, SERVER, "--stderr", "started")
    assert result.exit_code == 0 and "Added the MCP server 'echo'" in result.output, result.output
    result = run(home, "add", "docs", "--url", "http://127.0.0.1:9/mcp", "--bearer-token-env-var", "DOCS_TOKEN",
                 "--header", "X-Team: core", "--env-header", "X-Api-Key=DOCS_KEY")
    assert result.exit_code == 0, result.output
    text = (home / "config.toml").read_text()
    assert text.startswith("# my settings\nmodel = \"gpt-4.1\"\n\n[retry]\nmax_retries = 2\n")
    settings = load_settings(project, {}, {"OSPREY_HOME": str(home), "HOME": str(home.parent), "DOCS_TOKEN": "t"}, need_provider=False)
    echo, docs = settings.mcp.servers
    assert (echo.command, echo.args, echo.env) == (sys.executable, (SERVER, "--stderr", "started"), {"GREETING": "hi there"})
    assert docs.url == "http://127.0.0.1:9/mcp" and set(docs.headers) == {"X-Team", "Authorization"}

    servers = listed(home, project)
    assert servers["echo"]["state"] == "ready" and servers["echo"]["origin"] == "user"
    assert servers["docs"]["state"] == "skipped" and "DOCS_TOKEN, which is not set" in servers["docs"]["reason"]

    result = run(home, "remove", "docs")
    assert result.exit_code == 0, result.output
    result = run(home, "remove", "nope")
    assert result.exit_code == 1 and "declares no MCP server 'nope' (its servers: echo)" in result.output
    assert run(home, "remove", "echo").exit_code == 0
    assert (home / "config.toml").read_text().rstrip("\n") == "# my settings\nmodel = \"gpt-4.1\"\n\n[retry]\nmax_retries = 2"
    result = run(home, "list", "-C", str(project))
    assert result.exit_code == 0 and "No MCP servers are configured" in result.output


def test_list_shows_the_sdk_servers_tools_over_stdio_and_http(home: Path, project: Path, http_server: str) -> None:
    assert run(home, "add", "local", "--", sys.executable, SERVER).exit_code == 0
    assert run(home, "add", "remote", "--url", http_server).exit_code == 0
    # A project's plain HTTP server runs untrusted: its readOnlyHint counts for nothing.
    assert run(home, "add", "theirs", "--project", "-C", str(project), "--url", http_server).exit_code == 0
    servers = listed(home, project)
    for name in ("local", "remote", "theirs"):
        assert servers[name]["state"] == "ready", servers[name]
        tools = {t["name"]: t for t in servers[name]["tools"]}
        assert {"echo", "add", "peek"} <= set(tools)
    assert [t["read_only"] for t in servers["local"]["tools"] if t["name"] == "peek"] == [True]
    assert [t["read_only"] for t in servers["theirs"]["tools"] if t["name"] == "peek"] == [False]
    assert servers["theirs"]["origin"] == "project" and servers["theirs"]["trusted"] is False
    result = run(home, "list", "-C", str(project))
    assert "peek (read-only)" in result.output and "local  (user, stdio)  ready" in result.output


def test_a_failing_server_is_listed_failed_with_its_reason_and_the_status_is_0(home: Path, project: Path, tmp_path: Path) -> None:
    once = tmp_path / "started-once"
    once.write_text("")
    assert run(home, "add", "broken", "--", sys.executable, SERVER, "--start-once", str(once)).exit_code == 0
    assert run(home, "add", "gone", "--url", "http://127.0.0.1:9/mcp").exit_code == 0
    (home / "config.toml").write_text((home / "config.toml").read_text() + "startup_timeout_sec = 5\n")
    result = run(home, "list", "-C", str(project))
    assert result.exit_code == 0, result.output
    servers = listed(home, project)
    assert servers["broken"]["state"] == "failed" and "could not be started" in servers["broken"]["reason"]
    assert servers["gone"]["state"] == "failed" and servers["gone"]["reason"]
    result = run(home, "get", "broken", "-C", str(project))
    assert result.exit_code == 0 and "broken  (user, stdio)  failed" in result.output


def test_an_untrusted_project_stdio_server_is_listed_skipped_with_the_trust_advice(home: Path, project: Path) -> None:
    result = run(home, "add", "theirs", "--project", "-C", str(project), "--", sys.executable, SERVER)
    assert result.exit_code == 0 and f"osprey trust {project}" in result.output
    assert (project / ".osprey" / "config.toml").is_file()
    servers = listed(home, project)
    assert servers["theirs"]["state"] == "skipped" and f"run `osprey trust {project}`" in servers["theirs"]["reason"]


@pytest.mark.parametrize(("args", "says"), [
    (["add", "bad name", "--", "x"], "is not a server name"),
    (["add", "a__b.c", "--", "x"], "is not a server name"),
    (["add", "a__b", "--", "x"], "no '__' and no '_' at either end"),
    (["add", "_a", "--", "x"], "no '__' and no '_' at either end"),
    (["add", "x", "--env", "GITHUB_TOKEN=abc", "--", "cmd"], "--env GITHUB_TOKEN: that looks like a credential"),
    (["add", "x", "--env", "PLAIN=ghp_abcdefghijklmnop1234567890", "--", "cmd"], "passthrough"),
    (["add", "x", "--url", "http://127.0.0.1/mcp", "--header", "X-Auth: s3cr3t"], "--env-header 'X-Auth=VARIABLE'"),
    (["add", "x", "--url", "http://127.0.0.1/mcp", "--header", "X-Team: ghp_abcdefghijklmnop1234567890"], "a credential is never written"),
    (["add", "x"], "give the server's command after --"),
    (["add", "x", "--url", "http://127.0.0.1/mcp", "--", "cmd"], "either a command (after --) or --url, not both"),
    (["add", "x", "--url", "http://127.0.0.1/mcp", "--bearer-token-env-var", "ghp_16C7e42F292c6912E7710c838347Ae178B4a"], "never the token itself"),
    (["add", "x", "--url", "http://127.0.0.1/mcp", "--bearer-token-env-var", "sk-abc"], "never the token itself"),
    (["add", "x", "--url", "http://127.0.0.1/mcp", "--header", "Authorization: Bearer abc"], "a credential is never written into a file"),
    (["add", "x", "--url", "http://127.0.0.1/mcp", "--header", "no colon"], "write it as Name: value"),
    (["add", "x", "--url", "ftp://127.0.0.1/mcp"], "not an http:// or https:// URL"),
    (["add", "x", "--env", "1A=b", "--", "cmd"], "not a variable name"),
    (["add", "x", "--url", "http://127.0.0.1/mcp", "--env", "A=b"], "--env is for stdio servers"),
    (["add", "x", "--bearer-token-env-var", "T", "--", "cmd"], "are for HTTP servers"),
    (["remove", "x"], "declares no MCP server 'x' (its servers: none)"),
])
def test_bad_input_is_refused_and_nothing_is_written(home: Path, args: list[str], says: str) -> None:
    result = run(home, *args)
    assert result.exit_code != 0
    assert says in result.output
    assert not (home / "config.toml").exists()


def test_an_existing_name_is_refused_unless_forced(home: Path) -> None:
    assert run(home, "add", "x", "--", "one").exit_code == 0
    result = run(home, "add", "x", "--", "two")
    assert result.exit_code == 1 and "already declares the MCP server 'x'" in result.output and "osprey mcp remove x" in result.output
    result = run(home, "add", "x", "--force", "--url", "http://127.0.0.1:5/mcp")
    assert result.exit_code == 0 and "Replaced" in result.output
    assert (home / "config.toml").read_text() == '[mcp_servers.x]\nurl = "http://127.0.0.1:5/mcp"\n'


def test_a_config_error_exits_as_other_commands_do(home: Path, project: Path) -> None:
    (home / "config.toml").write_text("[mcp_servers.x]\nurl = \"ftp://nope\"\n")
    result = run(home, "list", "-C", str(project))
    assert result.exit_code == 1 and "osprey: error:" in result.output and "mcp_servers.x.url" in result.output


def test_the_docs_list_the_mcp_page() -> None:
    from osprey.cli.docs import docs

    result = CliRunner().invoke(docs, [])
    assert result.exit_code == 0 and "\n  mcp " in result.output
    page = CliRunner().invoke(docs, ["mcp"]).output
    for key in ("startup_timeout_sec", "bearer_token_env_var", ".mcp.json", "osprey mcp add", "osprey trust", "mcp__SERVER__TOOL"):
        assert key in page, key


def test_list_runs_a_stdio_server_inside_the_lane_with_the_sandbox_on(home: Path, project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    monkeypatch.setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
    assert run(home, "add", "where", "--", "sh", "-c", 'echo "host=$(hostname)" >&2; exit 3').exit_code == 0
    (home / "config.toml").write_text((home / "config.toml").read_text() + "\n[sandbox]\nenabled = true\n")
    servers = listed(home, project)
    reason = servers["where"]["reason"]
    assert servers["where"]["state"] == "failed" and "exited with code 3" in reason
    assert "host=" in reason and f"host={socket.gethostname()}\n" not in reason + "\n"


def test_remove_stays_linear_on_a_long_line(home: Path, project: Path) -> None:
    (project / ".osprey").mkdir()
    path = project / ".osprey" / "config.toml"
    long_lines = f'"""\n[{" " * 20_000}\n""", """\n[{" " * 4000}x\n{" " * 20_000}\n"""'
    path.write_text(f'[mcp_servers.x]\ncommand = "a"\n\n[moa]\n# {" " * 20_000}\n\n[mcp_servers.y]\ncommand = "b"\n'
                    f'args = [{long_lines}]\n')
    code = ("import sys, time; from pathlib import Path; from osprey.mcp.manage import remove_server; "
            "t = time.perf_counter(); remove_server(Path(sys.argv[1]), 'x'); print(time.perf_counter() - t)")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) < 1.0
    assert "mcp_servers.x" not in path.read_text() and long_lines in path.read_text()
    start = time.perf_counter()
    result = run(home, "remove", "y", "--project", "-C", str(project))
    assert result.exit_code == 0 and time.perf_counter() - start < 1.0, result.output


def test_list_shows_command_lines_and_urls_as_written_never_what_variables_hold(home: Path, project: Path) -> None:
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {
        "gh": {"command": "/bin/false", "args": ["--token", "${GITHUB_TOKEN}"]},
        "web": {"type": "http", "url": "http://me:pw-SECRET789@127.0.0.1:9/mcp?key=${API_KEY}&plain=SECRET000"}}}))
    from osprey.cli.trust import trust

    assert CliRunner().invoke(trust, [str(project), "--yes"], env={"OSPREY_HOME": str(home)}).exit_code == 0
    secrets = {"GITHUB_TOKEN": "ghp_SUPERSECRET123", "API_KEY": "sk-SECRET456"}
    for args in (["list"], ["get", "gh", "--json"], ["get", "web"], ["list", "--json"]):
        result = run(home, *args, "-C", str(project), **secrets)
        assert result.exit_code == 0, result.output
        assert "SECRET" not in result.output
    servers = {s["name"]: s for s in json.loads(result.stdout)["servers"]}
    assert servers["gh"]["target"] == "/bin/false --token '${GITHUB_TOKEN}'"
    assert servers["web"]["target"] == "http://127.0.0.1:9/mcp?key=...&plain=..."


def test_list_text_drops_terminal_control_sequences_from_servers_and_files() -> None:
    from osprey.mcp.manage import ServerReport, ToolReport, format_reports

    report = ServerReport("x", "user", "failed", "stdio", "srv \x1b]0;title\x07--flag", reason="it said \x1b[2Jboom\x9b1m\x07",
                          tools=[ToolReport("ev\x1b]52;c;Zm9v\x07il", False, True)])
    text = format_reports([report])
    assert not any(c in text for c in "\x1b\x07\x9b")
    assert "it said boom" in text and "evil" in text and "srv --flag" in text


def test_add_writes_through_a_symlinked_config_and_refuses_a_link_to_anything_else(home: Path, tmp_path: Path) -> None:
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    (dotfiles / "osprey.toml").write_text("# my settings\nmodel = \"gpt-5\"\n")
    (home / "config.toml").symlink_to(dotfiles / "osprey.toml")
    result = run(home, "add", "x", "--", "srv")
    assert result.exit_code == 0 and f"in {dotfiles / 'osprey.toml'} (the target of {home / 'config.toml'})" in result.output
    assert (home / "config.toml").is_symlink()
    assert (dotfiles / "osprey.toml").read_text() == '# my settings\nmodel = "gpt-5"\n\n[mcp_servers.x]\ncommand = "srv"\n'
    assert run(home, "remove", "x").exit_code == 0 and (home / "config.toml").is_symlink()

    (home / "config.toml").unlink()
    (home / "config.toml").symlink_to(tmp_path / "missing.toml")
    result = run(home, "add", "x", "--", "srv")
    assert result.exit_code == 1 and "is a symlink to" in result.output and "was not changed" in result.output
    assert (home / "config.toml").is_symlink() and not (tmp_path / "missing.toml").exists()
    if os.getuid() == 0:  # a regular file of another user
        (home / "config.toml").unlink()
        other = tmp_path / "other.toml"
        other.write_text("")
        os.chown(other, 65534, 65534)
        (home / "config.toml").symlink_to(other)
        result = run(home, "add", "x", "--", "srv")
        assert result.exit_code == 1 and "not a regular file of yours" in result.output and other.read_text() == ""


def test_add_says_when_it_rewrites_the_file_from_its_settings(home: Path) -> None:
    (home / "config.toml").write_text("# my servers\nmcp_servers = { a = { command = \"one\" } }\n")
    result = run(home, "add", "b", "--", "two")
    assert result.exit_code == 0 and "its comments and layout are not" in result.output
    assert "# my servers" not in (home / "config.toml").read_text()
    result = run(home, "add", "c", "--", "three")
    assert result.exit_code == 0 and "its comments and layout are not" not in result.output
