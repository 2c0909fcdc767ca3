"""Shared fixtures: workspaces in tmp dirs, ToolService homes, the loopback model server."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from homes import HOMES

from osprey.testing.model_server import ModelServer
from osprey.toolservice.client import ToolClient


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """An empty workspace directory (the first allowed root)."""
    ws = tmp_path / "workspace"
    ws.mkdir()
    return ws


@pytest.fixture(params=sorted(HOMES))
def tool_home(request: pytest.FixtureRequest) -> str:
    """The name of each ToolService home in turn."""
    return request.param


@pytest.fixture
async def tools(tool_home: str, workspace: Path) -> AsyncIterator[ToolClient]:
    """A ToolClient for `workspace`, served by each home in turn."""
    async with HOMES[tool_home]([str(workspace)]) as home:
        yield home.client


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    """A scripted model server on loopback; its protocol checks must stay clean."""
    server = ModelServer()
    server.start()
    try:
        yield server
        server.assert_clean()
    finally:
        server.close()


@pytest.fixture
def osprey_env(tmp_path: Path) -> dict[str, str]:
    """Environment for running `osprey` as a subprocess: a private OSPREY_HOME and dummy keys."""
    home = tmp_path / "osprey-home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OSPREY_", "OPENAI_", "ANTHROPIC_"))}
    env.update({"OSPREY_HOME": str(home), "OPENAI_API_KEY": "test-key", "ANTHROPIC_API_KEY": "test-key", "HOME": str(tmp_path)})
    return env
