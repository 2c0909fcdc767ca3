"""SVG snapshots of the slash commands' dialogs: saved approvals, the transcript export, this
session, the debug information, and the confirmation they ask for.

`pytest --snapshot-update tests/test_tui_dialog_snapshots.py` rewrites them after a deliberate change."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from test_tui import SIZE, until
from textual.app import App
from textual.screen import ModalScreen
from textual.widgets import DataTable

from osprey.policy.store import ApprovalStore
from osprey.tui.dialogs import ApprovalsDialog, ConfirmDialog, DebugDialog, ExportDialog, SessionDialog

TALL = (100, 36)

APPROVALS = """[[rules]]
id = "r-3f9a1c"
rule = "bash(git diff *)"
project = "/srv/inventory"
created = 2026-12-02T19:30:00Z

[[rules]]
id = "r-a81c55"
rule = "read_file"
created = 2026-12-01T08:00:00Z

[[rules]]
id = "r-c07d1e"
rule = "bash(make test *)"
project = "/srv/billing"
created = 2026-12-01T09:00:00Z
"""

DEBUG_TEXT = """osprey 0.9.0
date: 2026-12-03 21:00:00 UTC
system: Linux 6.8.0 (x86_64), Python 3.12.7
terminal: TERM=xterm-256color, TERM_PROGRAM=tmux, size 100x30
session: 3f2a9c01d4e7
model: openai · gpt-5"""

SESSION_LINES = ["session: 3f2a9c01d4e7", "title: why does the test fail?", "journal: ~/.osprey/sessions.db", "turns: 4",
                 "usage: 12,400 in, 1,060 out"]


class DialogApp(App[None]):
    """An empty screen with one dialog in front."""

    def __init__(self, dialog: Callable[[], ModalScreen[Any]]) -> None:
        super().__init__()
        self.dialog = dialog

    def on_mount(self) -> None:
        self.push_screen(self.dialog())


async def _nothing(path: Path, tool_output: bool) -> None:
    raise AssertionError("a snapshot writes nothing")


def test_approvals_dialog(tmp_path: Path, snap_compare: Any) -> None:
    (tmp_path / "approvals.toml").write_text(APPROVALS)
    app = DialogApp(lambda: ApprovalsDialog(ApprovalStore(tmp_path / "approvals.toml"), "/srv/inventory"))

    async def run_before(pilot: Any) -> None:
        await until(pilot, lambda: isinstance(app.screen, ApprovalsDialog) and app.screen.query_one(DataTable).row_count == 2)
        app.screen.query_one("#rule").cursor_blink = False
        await pilot.pause()

    assert snap_compare(app, terminal_size=TALL, run_before=run_before)


def test_export_dialog(snap_compare: Any) -> None:
    app = DialogApp(lambda: ExportDialog("osprey-3f2a9c01d4e7.md", Path("/srv/inventory"), _nothing))

    async def run_before(pilot: Any) -> None:
        await until(pilot, lambda: isinstance(app.screen, ExportDialog))
        app.screen.query_one("#path").cursor_blink = False
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_session_dialog(snap_compare: Any) -> None:
    app = DialogApp(lambda: SessionDialog(SESSION_LINES, "why does the test fail?", session_id="3f2a9c01d4e7", journaled=True, children=1))

    async def run_before(pilot: Any) -> None:
        await until(pilot, lambda: isinstance(app.screen, SessionDialog))
        app.screen.query_one("#title").cursor_blink = False
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_debug_dialog(snap_compare: Any) -> None:
    app = DialogApp(lambda: DebugDialog(DEBUG_TEXT, raw_events=False, on_raw_events=lambda shown: None))

    async def run_before(pilot: Any) -> None:
        await until(pilot, lambda: isinstance(app.screen, DebugDialog))
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_delete_confirmation(snap_compare: Any) -> None:
    question = ("Delete session 3f2a9c01d4e7, its 1 child sessions, their events and their stored tool outputs? "
                "It cannot be undone; a fresh session starts.")
    app = DialogApp(lambda: ConfirmDialog(question, yes="Delete"))

    async def run_before(pilot: Any) -> None:
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)
