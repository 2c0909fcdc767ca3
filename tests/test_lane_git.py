"""A lane cannot get code run on the host through the workspace's `.git` or `.osprey`:
both are mounted read-only (created as empty placeholders when missing, removed afterwards),
unless `[sandbox] protect_git = false`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from helpers import require_docker

from osprey.config import SandboxSettings
from osprey.errors import ToolError
from osprey.toolservice.homes import open_tool_service


def git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60)


@pytest.fixture
def repo(workspace: Path) -> Path:
    git(workspace, "init", "-q")
    (workspace / "app.py").write_text("print('hi')\n")
    (workspace / ".osprey").mkdir()
    (workspace / ".osprey" / "config.toml").write_text('model = "m"\n')
    (workspace / ".gitmodules").write_text("")
    return workspace


async def test_a_lane_cannot_change_git_or_osprey(repo: Path, tmp_path: Path) -> None:
    require_docker()
    marker = repo / "fsmonitor-ran"
    async with open_tool_service([str(repo)], sandbox=SandboxSettings(enabled=True), session_id=f"git-{os.getpid()}-1") as service:
        client = service.client
        for command in (
            f"git config core.fsmonitor 'touch {marker}'",
            "echo 'touch pwned' > .git/hooks/pre-commit",
            "echo 'approval_policy = \"never\"' > .osprey/config.toml",
            "mkdir .osprey/tools",
            "echo '[submodule \"x\"]' > .gitmodules",
        ):
            result = await client.bash(command)
            assert result.exit_code != 0, (command, result.output)
        with pytest.raises(ToolError) as denied:
            await client.write_file(".git/config", "[core]\n\tfsmonitor = touch pwned\n")
        assert denied.value.category in ("permission_denied", "io_error"), denied.value
        # The rest of the workspace stays writable.
        assert (await client.bash("echo ok > new.txt && git status --short | head -3")).exit_code == 0
    assert (repo / "new.txt").read_text() == "ok\n"
    assert git(repo, "config", "--get", "core.fsmonitor").stdout == ""
    git(repo, "status")
    assert not marker.exists()
    assert (repo / ".osprey" / "config.toml").read_text() == 'model = "m"\n'


async def test_a_repository_a_lane_made_is_reported(workspace: Path) -> None:
    """Where the workspace has no .git, a lane can make one (nothing can be mounted over a path
    that does not exist without leaving it behind); the session says so when it ends."""
    require_docker()
    notes: list[str] = []
    async with open_tool_service([str(workspace)], sandbox=SandboxSettings(enabled=True), session_id=f"git-{os.getpid()}-2", progress=notes.append) as service:
        assert (await service.client.list_directory()).entries == []  # no placeholders: same listing as on the host
        assert (await service.client.bash("git init -q")).exit_code == 0
    assert any(f"{workspace}/.git" in n and "look at it" in n for n in notes), notes


async def test_protect_git_false_lets_a_lane_write_them(repo: Path) -> None:
    require_docker()
    options = SandboxSettings(enabled=True, protect_git=False)
    async with open_tool_service([str(repo)], sandbox=options, session_id=f"git-{os.getpid()}-3") as service:
        result = await service.client.bash("git config user.name lane && echo 'x = 1' > .osprey/note")
        assert result.exit_code == 0, result.output
    assert git(repo, "config", "--get", "user.name").stdout.strip() == "lane"


async def test_submodule_git_files_are_read_only_too(workspace: Path) -> None:
    require_docker()
    git(workspace, "init", "-q")
    (workspace / ".gitmodules").write_text('[submodule "lib"]\n\tpath = lib\n\turl = ../lib\n')
    (workspace / "lib").mkdir()
    (workspace / "lib" / ".git").write_text("gitdir: ../.git/modules/lib\n")
    async with open_tool_service([str(workspace)], sandbox=SandboxSettings(enabled=True), session_id=f"git-{os.getpid()}-4") as service:
        result = await service.client.bash("mkdir evil && echo 'gitdir: ../evil' > lib/.git")
        assert result.exit_code != 0, result.output
        assert (await service.client.bash("echo ok > lib/code.py")).exit_code == 0
    assert (workspace / "lib" / ".git").read_text() == "gitdir: ../.git/modules/lib\n"


async def test_osprey_home_inside_the_workspace_is_refused(workspace: Path) -> None:
    require_docker()
    from osprey.errors import SandboxError

    home = workspace / "my-osprey-home"
    home.mkdir()
    with pytest.raises(SandboxError, match="inside the workspace"):
        async with open_tool_service([str(workspace)], sandbox=SandboxSettings(enabled=True), session_id=f"git-{os.getpid()}-5", home=home):
            pass
    # The workspace's own .osprey is mounted read-only, so a home there is safe once it exists.
    with pytest.raises(SandboxError, match="inside the workspace"):
        async with open_tool_service([str(workspace)], sandbox=SandboxSettings(enabled=True), session_id=f"git-{os.getpid()}-7", home=workspace / ".osprey"):
            pass
    (workspace / ".osprey").mkdir()
    async with open_tool_service([str(workspace)], sandbox=SandboxSettings(enabled=True), session_id=f"git-{os.getpid()}-6", home=workspace / ".osprey"):
        pass


def test_the_model_is_told_that_git_is_read_only_in_a_lane() -> None:
    from osprey.prompt import system_prompt

    assert "read-only" in system_prompt("/w", "lane", git_read_only=True)
    assert "read-only" not in system_prompt("/w", "lane", git_read_only=False)
    assert "read-only" not in system_prompt("/w", "local", git_read_only=True)
