"""Shared fixtures: workspaces in tmp dirs, ToolService homes, the loopback model server."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from homes import HOMES
from remote_engine import remote_engine  # noqa: F401 - the second engine, one for the whole run

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


# Whole modules that need containers, time real work, or race the file system: `-m "not slow"`
# leaves them out (README: the fast subset).
SLOW_MODULES = frozenset({
    "test_compose", "test_demo", "test_demo_fallback", "test_path_races", "test_sandbox_cli", "test_testing_fixture",
    "test_perf_bash", "test_perf_files", "test_perf_lane", "test_perf_search", "test_perf_servicer_writes",
})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `slow` what the fast subset leaves out: the end-to-end tests (`e2e`), everything run in
    a lane (a test parametrised over the lane home, or named for a lane), and SLOW_MODULES."""
    for item in items:
        module = item.module.__name__ if item.module is not None else ""
        params = getattr(getattr(item, "callspec", None), "params", {})
        if (item.get_closest_marker("e2e") is not None or module.startswith("test_lane") or module in SLOW_MODULES
                or "lane" in params.values() or "lane" in item.name):
            item.add_marker(pytest.mark.slow)
