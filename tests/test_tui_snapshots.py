"""SVG snapshots of the TUI: the main screen after an exchange, and an approval prompt.

`pytest --snapshot-update tests/test_tui_snapshots.py` rewrites them after a deliberate change."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from session_harness import calls, text
from test_tui import SIZE, TuiRig, started, type_prompt, until

from osprey.tui.approval_screen import ApprovalScreen
from osprey.tui.widgets import PromptArea

ANSWER = "The test failed because `total()` skipped the last item.\n\n1. fixed the loop bound\n2. the tests pass now\n"


@pytest.fixture
def rig(tmp_path: Path) -> TuiRig:
    workspace, home = tmp_path / "ws", tmp_path / "home"  # no path shows on these screens
    workspace.mkdir()
    home.mkdir()
    return TuiRig(workspace, home, [])


def _steady(app: Any) -> None:
    app.query_one(PromptArea).cursor_blink = False


def test_main_screen_after_an_exchange(rig: TuiRig, snap_compare: Any) -> None:
    rig.policy = "never"
    rig.scripts.append([
        calls(("bash", {"command": "printf 'collected 3 items\\n3 passed\\n'"}), say="Running the tests first.", usage=(900, 40)),
        text(ANSWER, usage=(1200, 60)),
    ])
    app = rig.app()

    async def run_before(pilot: Any) -> None:
        _steady(app)
        await started(pilot, app)
        await type_prompt(pilot, app, "why does the test fail?")
        await until(pilot, lambda: bool(rig.ends()))
        await app.workers.wait_for_complete()
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_approval_prompt(rig: TuiRig, snap_compare: Any) -> None:
    command = "git status --short && python -m pytest -q tests/test_inventory.py -k 'total and not slow' 2>&1 | tail -n 20"
    rig.scripts.append([calls(("bash", {"command": command, "timeout": 120})), text("done")])
    app = rig.app()

    async def run_before(pilot: Any) -> None:
        _steady(app)
        await started(pilot, app)
        await type_prompt(pilot, app, "run the inventory tests")
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen))
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)
