"""A long conversation: the screen keeps the newest rows, the transcript keeps them all."""

from __future__ import annotations

from pathlib import Path

import pytest
from session_harness import text
from test_tui import SIZE, TuiRig, started, type_prompt, until

import osprey.tui.app
from osprey.tui.widgets import AnswerRow, NoticeRow, UserRow


@pytest.fixture
def rig(tmp_path: Path) -> TuiRig:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir()
    home.mkdir()
    return TuiRig(workspace, home, [])


async def test_old_rows_leave_the_screen_and_export_still_has_them(rig: TuiRig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(osprey.tui.app, "MAX_ROWS", 12)
    prompts = 10
    rig.scripts.append([text(f"answer number {n}") for n in range(prompts)])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        for n in range(prompts):
            await type_prompt(pilot, app, f"prompt number {n}")
            await until(pilot, lambda n=n: len(rig.ends()) == n + 1 and not app._working)
        await app.workers.wait_for_complete()
        await pilot.pause()
        rows = list(app.conversation.children)
        assert len(rows) <= 12 + 1
        earlier = app.query_one("#earlier", NoticeRow)
        assert rows[0] is earlier
        hidden = 2 * prompts - (len(rows) - 1)
        assert f"{hidden:,} earlier rows are not shown here" in str(earlier.render())
        shown_users = [r.text for r in app.query(UserRow)]
        assert not any("prompt number 0" in u for u in shown_users)
        assert any(f"prompt number {prompts - 1}" in u for u in shown_users)
        assert len(app.query(AnswerRow)) >= 5
        await type_prompt(pilot, app, "/export all.md")
        await app.workers.wait_for_complete()
        await until(pilot, lambda: (rig.workspace / "all.md").exists())
    exported = (rig.workspace / "all.md").read_text()
    for n in range(prompts):
        assert f"prompt number {n}" in exported and f"answer number {n}" in exported
