"""The first screen comes before the session: the prompt is drawn and takes keys while the first
session starts, a prompt sent meanwhile waits (queued, not refused) and is sent once the session
has started; a TUI closed while its session starts stops that start and closes what it made."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from session_harness import text
from test_tui import SIZE, TuiRig, type_prompt, until

from osprey.session.core import Session
from osprey.tui.app import OspreyApp
from osprey.tui.driver import Hooks
from osprey.tui.widgets import PromptArea, QueuePanel, UserRow


class GatedRig(TuiRig):
    """Sessions whose start waits for `gate` (as a slow start would): the first screen is up meanwhile."""

    def __init__(self, workspace: Path, home: Path, scripts: list[list[Any]]) -> None:
        super().__init__(workspace, home, scripts)
        self.gate = asyncio.Event()
        self.sessions: list[Session] = []

    def factory(self, hooks: Hooks) -> Session:
        session = super().factory(hooks)
        start = session.start

        async def gated() -> Any:
            await self.gate.wait()
            return await start()

        session.start = gated
        self.sessions.append(session)
        return session


def _rig(tmp_path: Path, scripts: list[list[Any]]) -> GatedRig:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir()
    home.mkdir()
    return GatedRig(workspace, home, scripts)


async def test_a_prompt_sent_while_the_session_starts_is_sent_once_it_has_started(tmp_path: Path) -> None:
    rig = _rig(tmp_path, [[text("started and answered")]])
    app = OspreyApp(rig.factory)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.driver.opening)
        assert app.focused is app.query_one(PromptArea)
        assert app.session is None and "starting" in str(app.query_one("#status").render())
        await pilot.press(*"hello")  # typed into the prompt at once
        assert app.query_one(PromptArea).text == "hello"
        await pilot.press("enter")
        await pilot.pause()
        assert "hello" in str(app.query_one(QueuePanel).render())  # waiting, not refused
        assert not rig.providers[0].requests
        rig.gate.set()
        await until(pilot, lambda: bool(rig.ends()))
        [request] = rig.providers[0].requests
        assert "hello" in request.model_dump_json()
        assert [row.text for row in app.query(UserRow)] == ["hello"]
        assert "started and answered" in app.transcript.to_markdown()
        await type_prompt(pilot, app, "/quit")
        await until(pilot, lambda: not app.is_running)


async def test_quitting_while_the_session_starts_ends_the_app_with_no_session_open(tmp_path: Path) -> None:
    rig = _rig(tmp_path, [[]])
    app = OspreyApp(rig.factory)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.driver.opening)
        await pilot.press("ctrl+q")
        await until(pilot, lambda: not app.is_running)
    [session] = rig.sessions
    assert not session.started and app.session is None
    assert not app.driver.opening
