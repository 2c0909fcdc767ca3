"""The development tooling report of a `dev_tooling` persona, detected through a real ToolService
(the local dispatcher, and a lane where Docker is available) in a tmp workspace."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest
from homes import HOMES

from osprey.personas import dev_tooling
from osprey.personas.dev_tooling import dev_tooling_report
from osprey.toolservice.client import ToolClient


def project(workspace: Path) -> None:
    (workspace / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (workspace / "package.json").write_text('{"name": "demo", "packageManager": "pnpm@9.0.0"}\n')
    (workspace / "Makefile").write_text("test:\n\ttrue\n")
    (workspace / ".git").mkdir()
    (workspace / "README.md").write_text("demo\n")


def host_version(program: str) -> str:
    out = subprocess.run(["sh", "-c", f"cd / && {program} --version"], capture_output=True, text=True, timeout=10, check=False).stdout
    match = re.search(r"\d+(?:\.\d+)+", out)
    assert match, out
    return match.group()


async def test_the_report_names_the_markers_and_the_toolchains(tools: ToolClient, tool_home: str, workspace: Path) -> None:
    project(workspace)
    report = await dev_tooling_report(tools, str(workspace))
    header, markers, toolchains = report.split("\n")
    assert header == "Development tooling (detected where the tools run):"
    assert markers == (f"- Project markers in {workspace}: .git (git repository), pyproject.toml (Python project), "
                       "package.json (Node.js package), Makefile (make)")
    assert toolchains.startswith("- Toolchains available: ")
    found = toolchains.removeprefix("- Toolchains available: ").split(", ")
    # Both homes have python3 and git (the lane image installs them); the local one is this machine's.
    if tool_home == "local":
        assert f"python3 {host_version('python3')}" in found
        assert f"git {host_version('git')}" in found
    else:
        assert any(re.fullmatch(r"python3 3\.\d+\.\d+", item) for item in found), found
        assert any(re.fullmatch(r"git \d+\.\d+(\.\d+)?", item) for item in found), found
    order = [name for name, _ in dev_tooling.PROBES]
    assert [order.index(item.split(" ")[0]) for item in found] == sorted(order.index(item.split(" ")[0]) for item in found)


async def test_an_empty_workspace_has_no_markers(tools: ToolClient, workspace: Path) -> None:
    report = await dev_tooling_report(tools, str(workspace))
    assert f"- Project markers in {workspace}: none found" in report.split("\n")


async def test_a_working_directory_the_service_refuses_leaves_an_empty_report(tools: ToolClient, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    assert await dev_tooling_report(tools, str(outside)) == ""


async def test_a_closed_service_leaves_an_empty_report(workspace: Path) -> None:
    async with HOMES["local"]([str(workspace)]) as home:
        client = home.client
    assert await dev_tooling_report(client, str(workspace)) == ""


async def test_a_probe_cut_short_keeps_what_it_found(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project(workspace)
    monkeypatch.setattr(dev_tooling, "SCRIPT", "printf 'node\\tv20.1.0\\n'; printf 'make\\tGNU Make 4.3\\n'; printf 'git\\tgit vers'; sleep 30")
    monkeypatch.setattr(dev_tooling, "PROBE_TIMEOUT_MS", 700)
    async with HOMES["local"]([str(workspace)]) as home:
        started = time.monotonic()
        report = await dev_tooling_report(home.client, str(workspace))
        assert time.monotonic() - started < 10
    assert report.split("\n")[2] == "- Toolchains available: node 20.1.0, make 4.3"  # the cut line is left out
    assert "pyproject.toml (Python project)" in report


async def test_probe_output_is_read_as_untrusted(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = ["rm\t-rf 1.2", "git\tgit version 2.1.0", "python3\tPython 3.12.1", "python3\tPython 9.9.9", "rg\t" + "x" * 5000 + " 1.0.0", "no tab here", ""]
    monkeypatch.setattr(dev_tooling, "SCRIPT", "printf '%s\\n' " + " ".join(f"'{line}'" for line in lines))
    async with HOMES["local"]([str(workspace)]) as home:
        report = await dev_tooling_report(home.client, str(workspace))
    # Only probed names, each once, in probe order; a version is looked for only near the line's start.
    assert report.split("\n")[2] == "- Toolchains available: python3 3.12.1, git 2.1.0, rg"


async def test_a_failing_probe_command_leaves_the_toolchains_out(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dev_tooling, "SCRIPT", "exit 3")
    async with HOMES["local"]([str(workspace)]) as home:
        report = await dev_tooling_report(home.client, str(workspace))
    assert report == f"Development tooling (detected where the tools run):\n- Project markers in {workspace}: none found"


def test_the_probe_script_is_valid_shell_and_fetches_nothing() -> None:
    subprocess.run(["sh", "-n", "-c", dev_tooling.SCRIPT], check=True, timeout=10)
    assert dev_tooling.SCRIPT.startswith("cd / ")
    assert "GOTOOLCHAIN=local" in dev_tooling.SCRIPT and "RUSTUP_AUTO_INSTALL=0" in dev_tooling.SCRIPT
    for shimmed in ("pnpm", "yarn"):  # corepack may download these when run
        assert f"{shimmed}) v=" not in dev_tooling.SCRIPT
