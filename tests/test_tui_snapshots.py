"""SVG snapshots of the TUI: the main screen after an exchange, an approval prompt, the sessions tree,
the model's question over its task list.

`pytest --snapshot-update tests/test_tui_snapshots.py` rewrites them after a deliberate change."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from session_harness import calls, text
from test_tui import SIZE, TuiRig, started, type_prompt, until
from textual.app import App

from osprey.sessions.journal import SessionRow
from osprey.tui.approval_screen import ApprovalScreen
from osprey.tui.question_screen import QuestionScreen
from osprey.tui.screens import SessionsScreen
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


def test_question_over_the_task_list(rig: TuiRig, snap_compare: Any) -> None:
    todos = [{"content": "read the inventory module", "status": "completed"},
             {"content": "choose where the report goes", "status": "in_progress"},
             {"content": "add the --json flag", "status": "pending"}]
    question = "Should the report go to stdout or to a file next to the inventory (report.json)?"
    rig.scripts.append([calls(("todo_write", {"todos": todos})), calls(("question", {"question": question})), text("ok")])
    app = rig.app()

    async def run_before(pilot: Any) -> None:
        _steady(app)
        await started(pilot, app)
        await type_prompt(pilot, app, "add a --json flag to the report")
        await until(pilot, lambda: isinstance(app.screen, QuestionScreen))
        await pilot.press(*"stdout")
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


SESSION_ROWS = [
    SessionRow(id="3f2a9c01d4e7", cwd="/srv/inventory", workspace="/srv/inventory", title="why does the test fail?",
               provider="openai", model="gpt-5", created=1772355600.0, updated=1772356200.0, outcome="Completed"),
    SessionRow(id="a81c55e09b32", cwd="/srv/inventory", workspace="/srv/inventory",
               title="add a --json flag to the report command and document it in the README", provider="openai", model="gpt-5",
               created=1772460000.0, updated=1772463600.0, outcome="Completed"),
    SessionRow(id="c07d1e6f4a90", cwd="/srv/billing", workspace="/srv/billing", title="rename the invoice module",
               provider="anthropic", model="claude-sonnet-4-5", created=1772445600.0, updated=1772446000.0, outcome="Stopped"),
]


class SessionsApp(App[None]):
    def on_mount(self) -> None:
        self.push_screen(SessionsScreen(SESSION_ROWS, "/srv/inventory", current="a81c55e09b32"))


def test_sessions_tree(snap_compare: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")  # the times shown are local times
    time.tzset()
    try:
        assert snap_compare(SessionsApp(), terminal_size=SIZE)
    finally:
        monkeypatch.undo()
        time.tzset()


# ---------------------------------------------------------------------------------------------- small terminals
# and the states a person meets in the first hour: the first screen with a notice, the approval
# dialog proposing a rule, an edit's diff, the deny reason, a stopped call with its output.

SMALL = (80, 24)
NARROW = (50, 24)
HOOKS_NOTICE = ("the hooks in /srv/inventory/.osprey/hooks.toml do not run (it changed since it was trusted): nothing they "
                "would block is blocked; review it, then run `osprey extensions trust hooks`")


def test_first_screen_with_a_notice_at_80x24(rig: TuiRig, snap_compare: Any) -> None:
    from osprey.events import Notice

    app = rig.app()

    async def run_before(pilot: Any) -> None:
        _steady(app)
        await started(pilot, app)
        app.presenter.present(Notice(message=HOOKS_NOTICE, level="warning"))  # as a session announces inactive hooks
        await pilot.pause()

    assert snap_compare(app, terminal_size=SMALL, run_before=run_before)


def test_approval_proposing_a_rule_at_80x24(rig: TuiRig, snap_compare: Any) -> None:
    (rig.workspace / "src" / "pkg").mkdir(parents=True)
    rig.scripts.append([calls(("write_file", {"path": "src/pkg/report.py", "content": "def report():\n    return 1\n"})), text("done")])
    app = rig.app()

    async def run_before(pilot: Any) -> None:
        _steady(app)
        await started(pilot, app)
        await type_prompt(pilot, app, "add the report module")
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen))
        await pilot.press("a")
        await pilot.pause()

    assert snap_compare(app, terminal_size=SMALL, run_before=run_before)


def test_edit_approval_as_a_diff_at_80x24(rig: TuiRig, snap_compare: Any) -> None:
    (rig.workspace / "inventory.py").write_text("def total(items):\n    return sum(i.price for i in items[:-1])\n")
    edit = {"path": "inventory.py", "old_string": "    return sum(i.price for i in items[:-1])\n",
            "new_string": "    return sum(i.price for i in items)\n"}
    rig.scripts.append([calls(("edit_file", edit)), text("done")])
    app = rig.app()

    async def run_before(pilot: Any) -> None:
        _steady(app)
        await started(pilot, app)
        await type_prompt(pilot, app, "fix total")
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen))
        await pilot.pause()

    assert snap_compare(app, terminal_size=SMALL, run_before=run_before)


NARROW_COMMAND = "python3 -m pytest -q tests/test_inventory.py -k 'total and not slow'"


def test_approval_at_50_columns(rig: TuiRig, snap_compare: Any) -> None:
    rig.scripts.append([calls(("bash", {"command": NARROW_COMMAND})), text("done")])
    app = rig.app()

    async def run_before(pilot: Any) -> None:
        _steady(app)
        await started(pilot, app)
        await type_prompt(pilot, app, "run the tests")
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen))
        await pilot.pause()

    assert snap_compare(app, terminal_size=NARROW, run_before=run_before)


def test_deny_reason_at_50_columns(rig: TuiRig, snap_compare: Any) -> None:
    rig.scripts.append([calls(("bash", {"command": NARROW_COMMAND})), text("done")])
    app = rig.app()

    async def run_before(pilot: Any) -> None:
        _steady(app)
        await started(pilot, app)
        await type_prompt(pilot, app, "run the tests")
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen))
        await pilot.press("n", *"run only the fast ones")
        await pilot.pause()

    assert snap_compare(app, terminal_size=NARROW, run_before=run_before)


def test_a_stopped_call_keeps_its_output(rig: TuiRig, snap_compare: Any) -> None:
    from osprey.events import TaskEnd, ToolCallEvent, ToolResultEvent
    from osprey.messages import Usage

    app = rig.app()
    printed = "".join(f"test_inventory.py::test_case_{n} PASSED\n" for n in range(6))

    async def run_before(pilot: Any) -> None:
        _steady(app)
        await started(pilot, app)
        presenter = app.presenter
        presenter.prompt("run the whole suite")
        # The events a session emits when Esc stops a bash call 4.2 s in (its real duration, its output kept).
        presenter.present(ToolCallEvent(turn=1, id="c1", name="bash", arguments={"command": "python3 -m pytest -v"}))
        presenter.tool_output("c1", printed.encode())
        presenter.present(ToolResultEvent(turn=1, id="c1", name="bash", ok=False, error_category="cancelled",
                                          output=printed + "[stopped after 4.2 s: the task was interrupted while this call ran; "
                                          "the output above is what it printed until then]", duration_ms=4200))
        presenter.present(TaskEnd(session_id="tui-test-0001", outcome="Stopped", exit_status=130, turns=1, usage=Usage()))
        await pilot.pause()

    assert snap_compare(app, terminal_size=SMALL, run_before=run_before)
