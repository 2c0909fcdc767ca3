"""Pilot tests of the TUI from the keyboard alone: tool rows open and close, the conversation
scrolls, Ctrl+C stops before it quits, the first screen says how to start, and the approval
dialog proposes a rule the person edits, shows an edit as a diff and fits small terminals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from session_harness import calls, hang, text
from test_tui import SIZE, TuiRig, notices, started, type_prompt, until
from textual.widgets import Button, Input, Static
from textual.widgets.collapsible import CollapsibleTitle

from osprey.events import ToolResultEvent
from osprey.tui import app as app_module
from osprey.tui.app import OspreyApp
from osprey.tui.approval_screen import ApprovalScreen
from osprey.tui.widgets import PromptArea, ToolRow


@pytest.fixture
def rig(tmp_path: Path) -> TuiRig:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir()
    home.mkdir()
    return TuiRig(workspace, home, [])


def _reads(count: int) -> list[Any]:
    return [calls(*[("read_file", {"path": f"f{n}.txt"}) for n in range(count)]), text("read them")]


async def _ran(pilot: Any, app: OspreyApp, rig: TuiRig, prompt: str = "go") -> None:
    await started(pilot, app)
    await type_prompt(pilot, app, prompt)
    await until(pilot, lambda: bool(rig.ends()))
    await app.workers.wait_for_complete()
    await pilot.pause()


async def test_tool_rows_open_and_close_from_the_keyboard(rig: TuiRig) -> None:
    for n in range(3):
        (rig.workspace / f"f{n}.txt").write_text(f"content of file {n}\n")
    rig.policy = "never"
    rig.scripts.append(_reads(3))
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await _ran(pilot, app, rig)
        rows = list(app.query(ToolRow))
        assert len(rows) == 3 and all(row.collapsed for row in rows)
        await pilot.press("tab")  # nothing to complete: to the newest row
        focused = app.screen.focused
        assert isinstance(focused, CollapsibleTitle) and focused.parent is rows[2]
        await pilot.press("enter")
        assert not rows[2].collapsed and "content of file 2" in str(rows[2].output.render())
        await pilot.press("up", "up")
        assert app.screen.focused is not None and app.screen.focused.parent is rows[0]
        await pilot.press("space")
        assert not rows[0].collapsed
        await pilot.press("space")
        assert rows[0].collapsed
        await pilot.press("up")  # the first row stays the first
        assert app.screen.focused is not None and app.screen.focused.parent is rows[0]
        await pilot.press("escape")  # back to the prompt; no task is stopped
        assert isinstance(app.screen.focused, PromptArea)
        await pilot.press("ctrl+o")  # the newest row, from the prompt
        assert rows[2].collapsed
        await pilot.press("ctrl+o")
        assert not rows[2].collapsed
        await pilot.press("h", "i")  # the prompt still takes text
        assert app.query_one(PromptArea).text == "hi"


async def test_the_conversation_scrolls_with_page_keys_and_home_end(rig: TuiRig) -> None:
    rig.scripts.append([text("\n\n".join(f"paragraph {n} of a long answer" for n in range(80)))])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await _ran(pilot, app, rig)
        conversation = app.conversation
        assert conversation.max_scroll_y > 40
        await until(pilot, lambda: conversation.scroll_y == conversation.max_scroll_y)  # anchored at the end
        await pilot.press("pageup")
        assert conversation.scroll_y < conversation.max_scroll_y
        up_once = conversation.scroll_y
        await pilot.press("pageup")
        assert conversation.scroll_y < up_once
        await pilot.press("home")  # the prompt is empty: the conversation's top
        assert conversation.scroll_y == 0
        await pilot.press("pagedown")
        assert conversation.scroll_y > 0
        await pilot.press("end")
        assert conversation.scroll_y == conversation.max_scroll_y
        await pilot.press("home")
        area = app.query_one(PromptArea)
        await pilot.press("a", "b", "home")  # with text, Home is the prompt's own
        assert area.cursor_location == (0, 0) and conversation.scroll_y == 0
        await pilot.press("pageup")  # PageUp always scrolls (the prompt is a few lines at most)
        assert isinstance(app.screen.focused, PromptArea)


async def test_the_first_ctrl_c_stops_the_task_and_only_a_second_within_2_s_quits(rig: TuiRig) -> None:
    rig.scripts.append([hang])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "take forever")
        await until(pilot, lambda: bool(rig.providers[0].requests))
        await pilot.press("ctrl+c")
        await until(pilot, lambda: bool(rig.ends()))
        assert rig.ends()[0].outcome == "Stopped"
        assert app.is_running and not app.driver.quitting
        assert any("Ctrl+C again within 2 s quits" in n.message for n in app._notifications)
        await pilot.press("ctrl+c")  # within 2 s of the first
        await until(pilot, lambda: app.driver.quitting)
    assert any(e.type == "session_end" for e in rig.events)


async def test_ctrl_c_clears_the_prompt_and_a_late_second_one_does_not_quit(rig: TuiRig, monkeypatch: Any) -> None:
    monkeypatch.setattr(app_module, "QUIT_WINDOW", 0.3)
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        area = app.query_one(PromptArea)
        await pilot.press("d", "r", "a", "f", "t")
        await pilot.press("ctrl+c")
        assert area.text == "" and not app.driver.quitting
        await pilot.pause(0.5)  # past the window: this one starts it again
        await pilot.press("ctrl+c")
        assert not app.driver.quitting
        await pilot.press("ctrl+c")
        await until(pilot, lambda: app.driver.quitting)


async def test_the_first_screen_says_how_to_start(rig: TuiRig) -> None:
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await until(pilot, lambda: "Osprey is ready" in notices(app))
        said = notices(app)
        assert "/help" in said and "fake · fake-1" in said and "approval policy on-request" in said
        assert not app.transcript.entries  # a hint, not part of the conversation (/export)


async def _approval(pilot: Any, app: OspreyApp) -> ApprovalScreen:
    await started(pilot, app)
    await type_prompt(pilot, app, "change it")
    await until(pilot, lambda: isinstance(app.screen, ApprovalScreen))
    screen = app.screen
    assert isinstance(screen, ApprovalScreen)
    return screen


async def test_allow_always_proposes_a_wider_rule_the_person_can_edit(rig: TuiRig) -> None:
    (rig.workspace / "src" / "pkg").mkdir(parents=True)
    rig.scripts.append([calls(("write_file", {"path": "src/pkg/a.py", "content": "A = 1\n"})), text("done")])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        screen = await _approval(pilot, app)
        await pilot.press("a")
        rule = screen.query_one("#rule_input", Input)
        assert rule.value == "write_file(src/pkg/**)"
        assert "src/pkg/**" in str(screen.query_one("#covers", Static).render())
        await pilot.press("e")  # edit it
        assert screen.focused is rule
        rule.value = "write_file(src/**"  # not a rule: said, and nothing is saved
        await pilot.press("enter")
        assert isinstance(app.screen, ApprovalScreen)
        covers = screen.query_one("#covers", Static)
        assert covers.has_class("invalid") and "invalid rule" in str(covers.render())
        rule.value = "write_file(src/**)"
        await pilot.press("enter")  # in this project
        await until(pilot, lambda: bool(rig.ends()))
        saved = (rig.home / "approvals.toml").read_text()
        assert 'rule = "write_file(src/**)"' in saved and f'project = "{rig.workspace}"' in saved
        assert (rig.workspace / "src" / "pkg" / "a.py").read_text() == "A = 1\n"


async def test_an_edit_is_approved_from_its_diff(rig: TuiRig) -> None:
    (rig.workspace / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    edit = {"path": "calc.py", "old_string": "    return a - b\n", "new_string": "    return a + b\n"}
    rig.scripts.append([calls(("edit_file", edit)), text("fixed")])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        screen = await _approval(pilot, app)
        shown = str(screen.query_one("#arguments Static", Static).render())
        assert "--- a/calc.py" in shown and "+++ b/calc.py" in shown
        assert "-    return a - b" in shown and "+    return a + b" in shown
        assert "old_string" not in shown and "path: calc.py" in shown
        await pilot.press("y")
        await until(pilot, lambda: bool(rig.ends()))
        assert "a + b" in (rig.workspace / "calc.py").read_text()


def _fits(app: OspreyApp, screen: ApprovalScreen) -> None:
    """Every visible button of the dialog is whole on the screen, its label not cut."""
    width, height = app.size
    for button in screen.query(Button):
        if not button.display or not button.region.area or any(not a.display for a in button.ancestors_with_self if hasattr(a, "display")):
            continue
        region = button.region
        assert region.right <= width and region.bottom <= height, f"{button.id} is off the screen: {region}"
        label = str(button.label).replace("\\[", "[")
        assert region.width >= len(label), f"{button.id} is cut: {region.width} < {len(label)} ({label})"


async def test_the_approval_dialog_fits_80x24_and_50_columns(rig: TuiRig) -> None:
    command = " && ".join(f"python3 -m pytest -q tests/test_part_{n}.py" for n in range(40))  # a long call
    for size in ((80, 24), (50, 24)):
        rig.scripts.append([calls(("bash", {"command": command})), text("ok")])
        app = rig.app()
        rig.events.clear()
        async with app.run_test(size=size) as pilot:
            screen = await _approval(pilot, app)
            await pilot.pause()
            _fits(app, screen)
            dialog = screen.query_one("ApprovalScreen > Vertical")
            assert dialog.region.bottom <= size[1]
            await pilot.press("n")  # the reason stage: no taller than it needs
            await pilot.pause()
            reason = screen.query_one("#reason")
            assert reason.region.height <= 5
            assert dialog.region.height < size[1] - 2
            await pilot.press("escape")
            await until(pilot, lambda: bool(rig.ends()))
            [result] = [e for e in rig.events if isinstance(e, ToolResultEvent)]
            assert not result.ok


async def test_toasts_never_cover_the_prompt(rig: TuiRig) -> None:
    from textual.widgets._toast import Toast, ToastRack

    for size in ((80, 24), (50, 24)):
        app = rig.app()
        async with app.run_test(size=size, notifications=True) as pilot:
            await started(pilot, app)
            for n in range(4):
                app.notify(f"notification number {n} with enough words to wrap on a narrow screen", timeout=30)
            await pilot.pause(0.3)
            assert app.screen.query(Toast)
            for name in ("#status", "#prompt"):
                region = app.query_one(name).region
                for y in range(region.y, region.bottom):
                    for x in range(region.x, region.right):
                        widget, _ = app.screen.get_widget_at(x, y)
                        assert not isinstance(widget, (Toast, ToastRack)), (size, name, x, y)
            covered = {type(app.screen.get_widget_at(size[0] - 3, y)[0]).__name__ for y in range(2, 6)}
            assert "Toast" in covered  # they are on the screen, at its top right
