"""Pilot tests of the TUI commands with a dialog or a toggle: /tools hides and shows the finished
tool rows, /approvals adds and revokes saved rules, /export writes the transcript with or without
tool output, /session renames, forks and deletes the journaled session, /debug shows what a bug
report needs. Each drives the real app, sessions with a scripted provider and a real local
ToolService, and the real files (approvals.toml, sessions.db, the exported Markdown)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from session_harness import calls, hang, text
from test_tui import SIZE, TuiRig, notices, started, type_prompt, until
from test_tui_commands import JournaledRig
from textual.widgets import Button, DataTable, Input, Switch

from osprey import __version__
from osprey.events import SessionStart, UserMessageEvent
from osprey.files import exclusive_lock
from osprey.policy.store import ApprovalStore
from osprey.sessions.journal import Journal, find_session, journal_path, load_events
from osprey.tui.app import OspreyApp
from osprey.tui.approval_screen import ApprovalScreen
from osprey.tui.dialogs import ApprovalsDialog, ConfirmDialog, DebugDialog, ExportDialog, SessionDialog
from osprey.tui.widgets import AnswerRow, ToolRow, UserRow


@pytest.fixture
def rig(tmp_path: Path) -> TuiRig:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir()
    home.mkdir()
    return TuiRig(workspace, home, [])


@pytest.fixture
def jrig(tmp_path: Path) -> JournaledRig:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir()
    home.mkdir()
    return JournaledRig(workspace, home, [])


async def _command(pilot: Any, app: OspreyApp, line: str) -> None:
    await type_prompt(pilot, app, line)
    await app.workers.wait_for_complete()
    await pilot.pause()


async def _open(pilot: Any, app: OspreyApp, line: str, dialog: type) -> Any:
    await type_prompt(pilot, app, line)
    await until(pilot, lambda: isinstance(app.screen, dialog))
    await pilot.pause()
    return app.screen


def _said(screen: Any, selector: str = "#error") -> str:
    return str(screen.query_one(selector).render())


async def _click(pilot: Any, app: OspreyApp, selector: str) -> None:
    """Click a widget of the screen in front (a button pressed a moment ago ignores clicks for 0.2 s)."""
    widget = app.screen.query_one(selector)
    await until(pilot, lambda: not widget.has_class("-active"))
    await pilot.click(selector)


async def _confirm(pilot: Any, app: OspreyApp, yes: bool) -> None:
    await until(pilot, lambda: isinstance(app.screen, ConfirmDialog))
    await _click(pilot, app, "#yes" if yes else "#no")
    await pilot.pause()


# ---------------------------------------------------------------------------------------------- /tools


async def test_tools_hides_and_shows_finished_rows_but_never_a_running_one_or_one_waiting_for_approval(rig: TuiRig) -> None:
    rig.policy = "on-request"
    rig.scripts.append([calls(("bash", {"command": "echo one"})), calls(("bash", {"command": "echo two; sleep 30"})), text("done")])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await _command(pilot, app, "/tools")
        assert "finished tool rows are hidden" in notices(app)
        await type_prompt(pilot, app, "run them")
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen))
        [first] = app.query(ToolRow)
        assert first.display, "a call waiting for approval stays visible"
        await pilot.press("y")
        await until(pilot, lambda: first.has_class("finished"))
        await pilot.pause()
        assert not first.display
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen))
        await pilot.press("y")
        await until(pilot, lambda: len(app.query(ToolRow)) == 2 and "two" in str(app.query(ToolRow).last().output.render()))
        running = app.query(ToolRow).last()
        assert running.display and not running.has_class("finished")
        assert [t.parent for t in app.conversation.titles()] == [running]  # the keys walk the rows shown
        await pilot.press("escape")  # stops the task: the call ends, and its row is hidden too
        await until(pilot, lambda: running.has_class("finished") and not app.driver.busy)
        await pilot.pause()
        assert not running.display
        await _command(pilot, app, "/tools")
        assert "finished tool rows are shown" in notices(app)
        assert first.display and running.display
        assert len(app.conversation.titles()) == 2


async def test_help_tools_lists_the_tools_and_status_counts_them(rig: TuiRig) -> None:
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        count = len(app.session.tool_specs()) if app.session is not None else 0
        await _command(pilot, app, "/help tools")
        assert f"{count} tools the model has:" in notices(app) and "\nbash: " in notices(app)
        await _command(pilot, app, "/status")
        assert f"tools: {count} (/help tools lists them)" in notices(app)
        await _command(pilot, app, "/help nothing")
        assert "no help topic 'nothing'" in notices(app)


# ---------------------------------------------------------------------------------------------- /approvals


async def test_approvals_dialog_lists_adds_and_revokes_rules(rig: TuiRig, monkeypatch: pytest.MonkeyPatch) -> None:
    path = rig.home / "approvals.toml"
    ApprovalStore(path).add("bash(make test *)", project=str(rig.workspace))
    ApprovalStore(path).add("bash(ls *)", project=str(rig.home))  # another project's: not listed
    app = rig.app()
    async with app.run_test(size=(110, 40)) as pilot:
        await started(pilot, app)
        dialog = await _open(pilot, app, "/approvals", ApprovalsDialog)
        table = dialog.query_one(DataTable)
        await until(pilot, lambda: table.row_count == 1)
        assert [str(c) for c in table.get_row_at(0)][1:] == ["bash(make test *)", "this project"]

        dialog.query_one("#rule", Input).value = "bash("
        await _click(pilot, app, "#add")
        await until(pilot, lambda: "invalid rule" in _said(dialog))
        assert "bash(" not in path.read_text().replace("bash(make test *)", "").replace("bash(ls *)", "")

        dialog.query_one("#rule", Input).value = "bash(git diff *)"
        await _click(pilot, app, "#everywhere")
        await _click(pilot, app, "#add")
        await until(pilot, lambda: table.row_count == 2)
        assert "saved bash(git diff *) everywhere" in _said(dialog, "#said") and _said(dialog) == ""
        [added] = [r for r in ApprovalStore(path).load() if r.rule == "bash(git diff *)"]
        assert added.project is None
        assert [str(c) for c in table.get_row_at(1)] == [added.id, "bash(git diff *)", "everywhere"]

        dialog.query_one("#rule", Input).value = "read_file"
        await _click(pilot, app, "#project")
        await _click(pilot, app, "#add")
        await until(pilot, lambda: table.row_count == 3)
        [read] = [r for r in ApprovalStore(path).load() if r.rule == "read_file"]
        assert read.project == str(rig.workspace)

        table.move_cursor(row=1)
        await _click(pilot, app, "#revoke")
        await _confirm(pilot, app, yes=False)  # cancelled: nothing changes
        assert added.id in {r.id for r in ApprovalStore(path).load()} and table.row_count == 3
        await _click(pilot, app, "#revoke")
        await _confirm(pilot, app, yes=True)
        await until(pilot, lambda: table.row_count == 2)
        assert added.id not in {r.id for r in ApprovalStore(path).load()} and "bash(git diff *)" not in path.read_text()
        assert f"revoked {added.id}" in _said(dialog, "#said")

        # A file held by another process: the error is shown in the dialog and nothing changes.
        monkeypatch.setattr(ApprovalStore, "lock_timeout", 0.2)
        before = path.read_text()
        with exclusive_lock(path.with_name("approvals.toml.lock"), 1):
            dialog.query_one("#rule", Input).value = "grep"
            await _click(pilot, app, "#add")
            await until(pilot, lambda: "is locked by another process" in _said(dialog))
        assert path.read_text() == before
        await pilot.press("escape")
        await app.workers.wait_for_complete()
        assert not isinstance(app.screen, ApprovalsDialog)


async def test_an_unreadable_approvals_file_is_said_in_the_dialog(rig: TuiRig) -> None:
    (rig.home / "approvals.toml").write_text("this is [not toml\n")
    app = rig.app()
    async with app.run_test(size=(110, 40)) as pilot:
        await started(pilot, app)
        dialog = await _open(pilot, app, "/approvals", ApprovalsDialog)
        await until(pilot, lambda: "not valid TOML" in _said(dialog))
        assert dialog.query_one(DataTable).row_count == 0 and dialog.query_one("#revoke", Button).disabled


# ---------------------------------------------------------------------------------------------- /export


EXPECTED_WITHOUT_TOOL_OUTPUT = """# Osprey transcript

## You

say hi

- tool: `bash  echo hi`

## Osprey

It said **hi**.
"""


async def test_export_dialog_writes_with_and_without_tool_output_and_asks_before_overwriting(rig: TuiRig) -> None:
    rig.policy = "never"
    rig.scripts.append([calls(("bash", {"command": "echo hi"})), text("It said **hi**.")])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "say hi")
        await until(pilot, lambda: bool(rig.ends()))
        await app.workers.wait_for_complete()

        dialog = await _open(pilot, app, "/export", ExportDialog)
        assert dialog.query_one(Input).value == "osprey-tui-test-0001.md" and dialog.query_one(Switch).value
        await _click(pilot, app, "#export")
        await until(pilot, lambda: not isinstance(app.screen, ExportDialog))
        await app.workers.wait_for_complete()
        full = (rig.workspace / "osprey-tui-test-0001.md").read_text()
        assert full.startswith("# Osprey transcript\n") and "\n## You\n\nsay hi\n" in full and "> warning: " in full
        assert "```text\nbash\ncommand: echo hi\n```" in full and "```text\nbash -> ok\nhi\n" in full and "It said **hi**." in full
        assert f"transcript written to {rig.workspace / 'osprey-tui-test-0001.md'}" in notices(app)

        dialog = await _open(pilot, app, "/export", ExportDialog)
        dialog.query_one(Input).value = "brief.md"
        await _click(pilot, app, "#tool-output")
        assert not dialog.query_one(Switch).value
        await _click(pilot, app, "#export")
        await until(pilot, lambda: (rig.workspace / "brief.md").exists())
        await app.workers.wait_for_complete()
        assert (rig.workspace / "brief.md").read_text() == EXPECTED_WITHOUT_TOOL_OUTPUT

        # An existing file: asked first; cancelled, it is left as it was.
        dialog = await _open(pilot, app, "/export", ExportDialog)
        dialog.query_one(Input).value = "brief.md"
        await _click(pilot, app, "#export")
        await _confirm(pilot, app, yes=False)
        assert isinstance(app.screen, ExportDialog)
        assert (rig.workspace / "brief.md").read_text() == EXPECTED_WITHOUT_TOOL_OUTPUT
        await _click(pilot, app, "#export")
        await _confirm(pilot, app, yes=True)
        await until(pilot, lambda: not isinstance(app.screen, ExportDialog))
        await app.workers.wait_for_complete()
        assert (rig.workspace / "brief.md").read_text().startswith("# Osprey transcript") and "```text" in (rig.workspace / "brief.md").read_text()

        # Errors stay in the dialog.
        dialog = await _open(pilot, app, "/export", ExportDialog)
        dialog.query_one(Input).value = "no/such/dir/out.md"
        await _click(pilot, app, "#export")
        await until(pilot, lambda: "could not write" in _said(dialog))
        dialog.query_one(Input).value = "."
        await _click(pilot, app, "#export")
        await until(pilot, lambda: "is a directory" in _said(dialog))
        await _click(pilot, app, "#cancel")
        await app.workers.wait_for_complete()
        assert not isinstance(app.screen, ExportDialog)

        # With a path, it writes at once, with the tool output.
        await _command(pilot, app, "/export direct.md")
        assert "command: echo hi" in (rig.workspace / "direct.md").read_text()


# ---------------------------------------------------------------------------------------------- /session


def _db_count(path: Path, sql: str, *args: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute(sql, args).fetchone()[0])


async def test_session_dialog_renames_the_session_in_the_journal(jrig: JournaledRig) -> None:
    jrig.scripts.append([text("first answer")])
    app = jrig.app()
    path = journal_path(jrig.home)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "the first prompt")
        await until(pilot, lambda: bool(jrig.ends()))
        await app.workers.wait_for_complete()
        dialog = await _open(pilot, app, "/session", SessionDialog)
        info = _said(dialog, "#info")
        assert "session: sess-0001" in info and "title: the first prompt" in info and f"journal: {path}" in info and "turns: 1" in info
        assert dialog.query_one("#title", Input).value == "the first prompt"
        dialog.query_one("#title", Input).value = "   "
        await _click(pilot, app, "#rename")
        await until(pilot, lambda: "cannot be empty" in _said(dialog))
        assert isinstance(app.screen, SessionDialog)
        dialog.query_one("#title", Input).value = "Fix  the   flaky test"
        await _click(pilot, app, "#rename")
        await until(pilot, lambda: "is now titled: Fix the flaky test" in notices(app))
        assert find_session(path, "sess-0001").title == "Fix the flaky test"
        # The journal does not put the first prompt back over it.
        jrig.providers[0].script.append(text("second answer"))
        await type_prompt(pilot, app, "another prompt")
        await until(pilot, lambda: len(jrig.ends()) == 2)
        await app.workers.wait_for_complete()
    assert find_session(path, "sess-0001").title == "Fix the flaky test"


async def test_session_dialog_forks_from_here_and_the_tui_goes_on_in_the_fork(jrig: JournaledRig) -> None:
    jrig.scripts += [[calls(("bash", {"command": "echo forked"})), text("The first answer.")], [text("The fork's answer.")]]
    app = jrig.app()
    path = journal_path(jrig.home)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "before the fork")
        await until(pilot, lambda: bool(jrig.ends()))
        await app.workers.wait_for_complete()
        assert app.session is not None and app.session.journal is not None
        await asyncio.to_thread(app.session.journal.flush)
        before = load_events(path, "sess-0001")
        await _open(pilot, app, "/session", SessionDialog)
        await _click(pilot, app, "#fork")
        await until(pilot, lambda: len(jrig.ids) == 2)
        await started(pilot, app)
        fork_id = jrig.ids[1]
        assert fork_id != "sess-0001" and app.session is not None and app.session.session_id == fork_id
        assert [u.text for u in app.query(UserRow)] == ["before the fork"]
        await type_prompt(pilot, app, "after the fork")
        await until(pilot, lambda: len(jrig.ends()) == 2)
        await app.workers.wait_for_complete()
        sent = jrig.providers[1].requests[0].model_dump_json()
        assert "before the fork" in sent and "The first answer." in sent and "forked" in sent and "after the fork" in sent
    forked = load_events(path, fork_id)
    assert [{k: v for k, v in e.items() if k not in ("session_id", "forked_from")} for e in forked[:len(before)]] == \
           [{k: v for k, v in e.items() if k != "session_id"} for e in before]
    assert forked[0]["forked_from"] == "sess-0001"
    assert forked[len(before)]["type"] == "notice" and forked[len(before)]["forked_from"] == "sess-0001"
    assert any(e["type"] == "user_message" and e["text"] == "after the fork" for e in forked[len(before):])
    original = load_events(path, "sess-0001")
    assert original[:len(before)] == before and not any(e.get("text") == "after the fork" for e in original)
    assert find_session(path, fork_id).title == "before the fork (fork)"


async def test_session_dialog_deletes_the_session_its_children_and_results_then_starts_afresh(jrig: JournaledRig) -> None:
    jrig.scripts += [[text("an answer")], []]
    app = jrig.app()
    path = journal_path(jrig.home)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "soon deleted")
        await until(pilot, lambda: bool(jrig.ends()))
        await app.workers.wait_for_complete()
        # A child session of it, as a subagent would leave, and an unrelated one.
        other = Journal(path)
        other.record(SessionStart(session_id="child-1", provider="openai", model="m", cwd=str(jrig.workspace), tool_service="local",
                                  tools=[], approval_policy="never", max_turns=3, parent_id="sess-0001", agent_id="child-1"), "child-1")
        other.record(UserMessageEvent(text="child work"), "child-1")
        other.record(SessionStart(session_id="keep-1", provider="openai", model="m", cwd=str(jrig.workspace), tool_service="local",
                                  tools=[], approval_policy="never", max_turns=3), "keep-1")
        other.record(UserMessageEvent(text="kept"), "keep-1")
        await asyncio.to_thread(other.close)
        results = jrig.home / "results"
        (results / "sess-0001").mkdir(parents=True)
        (results / "sess-0001" / "out.txt").write_text("stored output")
        (results / "child-1").mkdir()
        (results / "keep-1").mkdir()
        dialog = await _open(pilot, app, "/session", SessionDialog)
        await _click(pilot, app, "#delete")
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        assert "its 1 child sessions" in str(app.screen.query_one("Static").render())
        await _confirm(pilot, app, yes=False)
        assert app.screen is dialog and (results / "sess-0001").is_dir()
        await _click(pilot, app, "#delete")
        await _confirm(pilot, app, yes=True)
        await until(pilot, lambda: len(jrig.ids) == 2)
        await started(pilot, app)
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.session is not None and app.session.session_id == "sess-0002"
        assert not app.query(UserRow) and not app.query(AnswerRow)
        assert "deleted session sess-0001 and 1 child sessions; this is a fresh session" in notices(app)
    for sid in ("sess-0001", "child-1"):
        assert _db_count(path, "SELECT COUNT(*) FROM events WHERE session_id = ?", sid) == 0
        assert _db_count(path, "SELECT COUNT(*) FROM sessions WHERE id = ?", sid) == 0
        assert not (results / sid).exists()
    assert _db_count(path, "SELECT COUNT(*) FROM sessions WHERE id = ?", "keep-1") == 1 and (results / "keep-1").is_dir()


async def test_session_actions_wait_while_a_task_runs(jrig: JournaledRig) -> None:
    jrig.scripts.append([hang])
    app = jrig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "a long task")
        await until(pilot, lambda: app.driver.busy and app.session is not None and app.session.busy)
        await _command(pilot, app, "/session")
        assert not isinstance(app.screen, SessionDialog)
        assert "session: sess-0001" in notices(app) and "a task is running; rename, fork and delete wait until it ends" in notices(app)
        await pilot.press("escape")
        await until(pilot, lambda: not app.driver.busy)


# ---------------------------------------------------------------------------------------------- /debug


async def test_debug_dialog_shows_the_fields_switches_raw_events_and_copies(rig: TuiRig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "xterm-test")
    monkeypatch.setenv("TERM_PROGRAM", "TestTerm")
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        dialog = await _open(pilot, app, "/debug", DebugDialog)
        info = _said(dialog, "#info")
        for field in (f"osprey {__version__}", "date: 20", " UTC", "system: ", "Python ", "terminal: TERM=xterm-test, TERM_PROGRAM=TestTerm, size 100x30",
                      "session: tui-test-0001", "model: fake · "):
            assert field in info, (field, info)
        assert not dialog.query_one(Switch).value and not app.presenter.debug
        await _click(pilot, app, "#raw-events")
        await pilot.pause()
        assert app.presenter.debug
        await _click(pilot, app, "#copy")
        assert app.clipboard == dialog.text and "session: tui-test-0001" in app.clipboard
        assert "copied to the clipboard" in _said(dialog, "#said")
        await _click(pilot, app, "#close")
        await app.workers.wait_for_complete()
        assert "raw events are shown (/debug hides them)" in notices(app)
        dialog = await _open(pilot, app, "/debug", DebugDialog)
        assert dialog.query_one(Switch).value
        await _click(pilot, app, "#raw-events")
        await pilot.press("escape")
        await app.workers.wait_for_complete()
        assert not app.presenter.debug and "raw events are hidden" in notices(app)

