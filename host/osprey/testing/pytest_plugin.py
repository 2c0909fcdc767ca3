"""pytest fixtures for projects that run Osprey in their CI (loaded through the `pytest11` entry point).

- `osprey_lane_workspace`: an empty workspace directory for a lane.
- `osprey_lane`: a testcontainers-managed sandbox lane (`osprey.testing.lane.TestLane`) for
  that workspace; pass `osprey_lane.agent_args()` to `osprey agent` to run in it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def osprey_lane_workspace(tmp_path: Path) -> Path:
    workspace = tmp_path / "lane-workspace"
    workspace.mkdir()
    return workspace


@pytest.fixture
def osprey_lane(osprey_lane_workspace: Path) -> Iterator[object]:
    from .lane import TestLane

    with TestLane(osprey_lane_workspace) as lane:
        yield lane
