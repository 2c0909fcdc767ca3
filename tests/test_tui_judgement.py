"""Pilot tests of the loop's judgement in the TUI: the model's questions, /verify, the task list,
advisories, declared status and verification objections, and their place in /export.

Each drives the real session core (stall detectors, adjudicator, checkpoint, control tools) with a
scripted provider and a real local ToolService."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from session_harness import calls, hang, text
from test_tui import SIZE, TuiRig, notices, started, type_prompt, until
from textual.widgets import Input

from osprey.events import Advisory, Question, ToolResultEvent, UserMessageEvent, Verification
from osprey.messages import ModelRequest, ModelTurn, UserMessage
from osprey.session.verification import VERIFY_AUDIT_PROMPT
from osprey.tools.control import NOT_ANSWERED
from osprey.tui import commands
from osprey.tui.app import OspreyApp
from osprey.tui.question_screen import QuestionScreen
from osprey.tui.widgets import NoticeRow, QuestionRow, TodoPanel, UserRow, todo_text


@pytest.fixture
def rig(tmp_path: Path) -> TuiRig:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir()
    home.mkdir()
    return TuiRig(workspace, home, [])


def _status(app: OspreyApp) -> str:
    return str(app.query_one("#status").render())


def _results(rig: TuiRig, name: str) -> list[ToolResultEvent]:
    return [e for e in rig.events if isinstance(e, ToolResultEvent) and e.name == name]


def _last_user_text(request: ModelRequest) -> str:
    users = [m for m in request.messages if isinstance(m, UserMessage)]
    content = users[-1].content
    return content if isinstance(content, str) else str(content)


async def _export(pilot: Any, app: OspreyApp, workspace: Path, name: str) -> str:
    await type_prompt(pilot, app, f"/export {name}")
    await app.workers.wait_for_complete()
    await until(pilot, lambda: (workspace / name).exists())
    return (workspace / name).read_text()


QUESTION = "Which database should the cache use: sqlite or redis?"


async def _asked(pilot: Any, app: OspreyApp) -> QuestionScreen:
    await type_prompt(pilot, app, "add a cache")
    await until(pilot, lambda: isinstance(app.screen, QuestionScreen))
    screen = app.screen
    assert isinstance(screen, QuestionScreen)
    assert QUESTION in str(screen.query_one("#question Static").render())
    return screen


async def test_a_question_is_answered_and_the_model_gets_the_answer(rig: TuiRig) -> None:
    rig.scripts.append([calls(("question", {"question": QUESTION})), text("sqlite it is")])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        screen = await _asked(pilot, app)
        assert screen.query_one("#answer", Input).has_focus
        await pilot.press(*"sqlite, keep it local", "enter")
        await until(pilot, lambda: bool(rig.ends()))
        await app.workers.wait_for_complete()
        [result] = _results(rig, "question")
        assert result.ok and result.output == "The person answered: sqlite, keep it local"
        assert "The person answered: sqlite, keep it local" in rig.providers[0].requests[1].model_dump_json()
        [asked] = [e for e in rig.events if isinstance(e, Question)]
        assert (asked.question, asked.answer) == (QUESTION, "sqlite, keep it local")
        [row] = app.query(QuestionRow)
        shown = "\n".join(str(s.render()) for s in row.query("Static"))
        assert QUESTION in shown and "→ sqlite, keep it local" in shown
        assert not isinstance(app.screen, QuestionScreen)
        exported = await _export(pilot, app, rig.workspace, "asked.md")
    assert "## Osprey asks\n\n> " + QUESTION in exported
    assert "**Answer:**\n\n> sqlite, keep it local" in exported


async def test_esc_closes_a_question_and_the_model_is_told_nobody_answered(rig: TuiRig) -> None:
    rig.scripts.append([calls(("question", {"question": QUESTION})), text("I chose sqlite")])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await _asked(pilot, app)
        await pilot.press(*"half typed", "escape")
        await until(pilot, lambda: bool(rig.ends()))
        await app.workers.wait_for_complete()
        [result] = _results(rig, "question")
        assert result.output == NOT_ANSWERED and "closed the question without answering" in result.output
        assert NOT_ANSWERED in rig.providers[0].requests[1].model_dump_json()
        [asked] = [e for e in rig.events if isinstance(e, Question)]
        assert asked.answer is None
        [row] = app.query(QuestionRow)
        assert "(closed without an answer)" in "\n".join(str(s.render()) for s in row.query("Static"))
        assert rig.ends()[0].outcome == "Completed"
        exported = await _export(pilot, app, rig.workspace, "closed.md")
    assert "_(closed without an answer)_" in exported


async def test_quitting_closes_an_open_question_unanswered(rig: TuiRig) -> None:
    rig.scripts.append([calls(("question", {"question": QUESTION})), text("unused")])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await _asked(pilot, app)
        await pilot.press("ctrl+q")
        await until(pilot, lambda: any(e.type == "session_end" for e in rig.events))
    assert rig.events[-1].type == "session_end"
    # The task was interrupted while the question was open: the call ends as interrupted, nothing waits on
    # the person any more, and a later ask (a call still finishing) gets no answer at once.
    [result] = _results(rig, "question")
    assert not result.ok and result.error_category == "cancelled"
    assert app.asker.pending == 0
    assert await app.asker.ask("anyone there?") is None


async def test_verify_is_refused_while_the_agent_works_and_otherwise_arms_and_audits(rig: TuiRig) -> None:
    armed_when_asked: list[bool] = []

    async def declare_done(request: ModelRequest) -> ModelTurn:
        session = app.session
        assert session is not None and session.checkpoint is not None
        armed_when_asked.append(session.checkpoint.armed)
        assert _last_user_text(request) == VERIFY_AUDIT_PROMPT
        return calls(("task_status", {"status": "done", "summary": "all good"}))

    rig.scripts.append([hang, declare_done, text("I will run the tests next.")])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        assert app.session is not None and app.session.checkpoint is not None
        checkpoint = app.session.checkpoint
        await type_prompt(pilot, app, "think hard")
        await until(pilot, lambda: bool(rig.providers[0].requests))
        await type_prompt(pilot, app, "/verify")
        await until(pilot, lambda: "/verify: a task is running" in notices(app))
        assert not checkpoint.armed and [u.text for u in app.query(UserRow)] == ["think hard"]
        await pilot.press("escape")
        await until(pilot, lambda: bool(rig.ends()) and not app.driver.working)

        await type_prompt(pilot, app, "/verify")
        await until(pilot, lambda: len(rig.ends()) == 2)
        await app.workers.wait_for_complete()
        assert armed_when_asked == [True]
        assert [u.text for u in app.query(UserRow)] == ["think hard", VERIFY_AUDIT_PROMPT]
        assert app.transcript.entries[-1].role != "user" and any(
            e.role == "user" and e.text == VERIFY_AUDIT_PROMPT for e in app.transcript.entries)
        # The armed checkpoint held the done declaration back: no verification had passed since.
        told = [e.text for e in rig.events if isinstance(e, UserMessageEvent) and e.origin == "loop"]
        assert any("A verification audit was requested (/verify)" in t for t in told)
        assert "task done: all good" in notices(app)
        assert rig.ends()[1].outcome == "Completed"
        snapshots = [e for e in rig.events if isinstance(e, Verification)]
        assert snapshots and snapshots[-1].armed
    assert "verify" in commands.BY_NAME


def _todos(*items: tuple[str, str]) -> tuple[str, dict[str, Any]]:
    return ("todo_write", {"todos": [{"content": c, "status": s} for c, s in items]})


async def test_the_task_list_is_updated_in_place_above_the_prompt(rig: TuiRig) -> None:
    seen: list[tuple[str, str]] = []

    def looking(reply: ModelTurn) -> Any:
        async def step(request: ModelRequest) -> ModelTurn:
            seen.append((str(app.query_one(TodoPanel).render()), _status(app)))
            return reply
        return step

    rig.scripts.append([
        calls(_todos(("read the code", "in_progress"), ("fix the bug", "pending"), ("run the tests", "pending"))),
        looking(calls(_todos(("read the code", "completed"), ("fix the bug", "in_progress"), ("run the tests", "pending")))),
        looking(calls(_todos(("read the code", "completed"), ("fix the bug", "completed"), ("run the tests", "completed")))),
        looking(text("done")),
    ])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        panel = app.query_one(TodoPanel)
        assert not panel.display and "todo" not in _status(app)
        await type_prompt(pilot, app, "fix it")
        await until(pilot, lambda: bool(rig.ends()))
        await app.workers.wait_for_complete()
        first, second, third = seen
        assert "tasks 0/3\n▸ read the code\n○ fix the bug\n○ run the tests" in first[0] and "todo 0/3" in first[1]
        assert "tasks 1/3\n✓ read the code\n▸ fix the bug\n○ run the tests" in second[0] and "todo 1/3" in second[1]
        assert "tasks 3/3\n✓ read the code\n✓ fix the bug\n✓ run the tests" in third[0] and "todo 3/3" in third[1]
        assert len(app.query(TodoPanel)) == 1 and panel.display
        assert "read the code" not in notices(app)  # no row per update in the conversation
        exported = await _export(pilot, app, rig.workspace, "tasks.md")
        assert "**Tasks:**\n\n- [~] read the code _(in progress)_\n- [ ] fix the bug" in exported
        assert "- [x] read the code\n- [x] fix the bug\n- [x] run the tests" in exported
        await type_prompt(pilot, app, "/new")
        await until(pilot, lambda: not panel.display)
        assert "todo" not in _status(app)


def test_a_long_task_list_shows_a_window_around_the_item_in_progress() -> None:
    items = [{"content": f"step {n}", "status": "completed" if n < 12 else "in_progress" if n == 12 else "pending"} for n in range(30)]
    shown = todo_text(items)
    lines = shown.plain.splitlines()
    assert lines[0] == "tasks 12/30" and lines[1] == "  … 8 more above" and lines[-1] == "  … 14 more below"
    assert "▸ step 12" in lines and len(lines) == 1 + 8 + 2
    struck = [shown.plain[s.start:s.end] for s in shown.spans if "strike" in str(s.style)]
    assert "step 8" in struck and "step 12" not in struck


async def test_advisories_objections_and_declarations_are_rows_and_exported(rig: TuiRig) -> None:
    rig.policy = "never"
    rig.scripts.append([
        calls(_todos(("make the tests pass", "in_progress"))),
        calls(("read_file", {"path": "missing.txt"})),
        calls(("read_file", {"path": "missing.txt"})),
        calls(("bash", {"command": "make test"})),
        calls(("task_status", {"status": "done", "summary": "the tests pass"})),
        text("make has no test target here; I cannot make it pass."),
    ])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "make the tests pass")
        await until(pilot, lambda: bool(rig.ends()))
        await app.workers.wait_for_complete()
        await pilot.pause()
        [advisory] = [e for e in rig.events if isinstance(e, Advisory)]
        assert advisory.detector == "identical_failure"
        rows = [str(r.render()) for r in app.query(NoticeRow)]
        [advised] = [r for r in rows if r.startswith("advisory (identical failure): ")]
        assert advisory.message in advised
        objected = [r for r in rows if r.startswith("verification objections still open:")]
        assert len(objected) == 1 and "- FAILED: make test (exit 2)" in objected[0]
        assert sum(bool(e.objections) for e in rig.events if isinstance(e, Verification)) > 1  # shown once all the same
        [declared] = [r for r in app.query(NoticeRow) if str(r.render()) == "task done: the tests pass"]
        assert declared.has_class("done")
        exported = await _export(pilot, app, rig.workspace, "judged.md")
    assert "> advisory (identical failure): " in exported
    assert "> verification objections still open:\n> - FAILED: make test (exit 2)" in exported
    assert "> task done: the tests pass" in exported
    assert "- [~] make the tests pass _(in progress)_" in exported


async def test_a_blocked_declaration_is_a_warning_row(rig: TuiRig) -> None:
    rig.scripts.append([calls(("task_status", {"status": "blocked", "summary": "I need the API key"}))])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "deploy it")
        await until(pilot, lambda: bool(rig.ends()))
        await app.workers.wait_for_complete()
        [row] = [r for r in app.query(NoticeRow) if str(r.render()) == "task blocked: I need the API key"]
        assert row.has_class("warning")
        assert rig.ends()[0].final_text == "blocked: I need the API key"


async def test_a_resumed_session_shows_its_questions_declarations_and_task_list(tmp_path: Path) -> None:
    from test_tui_commands import JournaledRig

    from osprey.sessions.journal import journal_path, list_sessions, read_events
    from osprey.tui.driver import Resume

    (tmp_path / "ws").mkdir()
    (tmp_path / "home").mkdir()
    rig = JournaledRig(tmp_path / "ws", tmp_path / "home", [])
    rig.scripts.append([
        calls(_todos(("pick a port", "completed"), ("write the config", "in_progress"))),
        calls(("question", {"question": "Which port?"})),
        calls(("task_status", {"status": "done", "summary": "configured port 8081"})),
    ])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "configure it")
        await until(pilot, lambda: isinstance(app.screen, QuestionScreen))
        await pilot.press(*"8081", "enter")
        await until(pilot, lambda: bool(rig.ends()))
        await app.workers.wait_for_complete()
    path = journal_path(rig.home)
    [row] = list_sessions(path)
    rig.scripts.append([text("unused")])
    app = rig.app(Resume(row, read_events(path, row.id)))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        [asked] = app.query(QuestionRow)
        assert (asked.event.question, asked.event.answer) == ("Which port?", "8081")
        assert "task done: configured port 8081" in notices(app)
        panel = app.query_one(TodoPanel)
        assert panel.display and "✓ pick a port\n▸ write the config" in str(panel.render())
        assert "todo 1/2" in _status(app)
        exported = await _export(pilot, app, rig.workspace, "resumed.md")
    assert "> Which port?\n\n**Answer:**\n\n> 8081" in exported and "> task done: configured port 8081" in exported
