"""Pilot tests of the TUI, driving it against a scripted provider and a real local ToolService."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from session_harness import FAST_RETRY, FakeProvider, calls, hang, text
from textual import events

from osprey.config import load_settings
from osprey.events import Event, TaskEnd, ToolResultEvent
from osprey.messages import ModelRequest, ModelTurn
from osprey.session.core import Session, SessionOptions
from osprey.tui import commands
from osprey.tui.app import OspreyApp
from osprey.tui.approval_screen import ApprovalScreen
from osprey.tui.completion import CompletionMenu
from osprey.tui.driver import Hooks
from osprey.tui.widgets import AnswerRow, NoticeRow, PromptArea, QueuePanel, ToolRow, UserRow

SIZE = (100, 30)


@dataclass
class ChunkedProvider(FakeProvider):
    """A FakeProvider that streams a turn's text in small pieces, as real providers do."""

    piece: int = 4

    async def complete(self, request: ModelRequest, on_text: Any = None) -> ModelTurn:
        self.requests.append(request.model_copy(deep=True))
        if not self.script:
            raise AssertionError(f"the loop asked for turn {len(self.requests)} but the script is exhausted")
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        if callable(step):
            return await step(request)
        text = step.message.text
        if on_text and text:
            for start in range(0, len(text), self.piece):
                on_text(text[start:start + self.piece])
                await asyncio.sleep(0)
        return step


@dataclass
class TuiRig:
    """Builds the app's sessions: each `/new` takes the next script."""

    workspace: Path
    home: Path
    scripts: list[list[Any]]
    policy: str | None = None
    events: list[Event] = field(default_factory=list)
    providers: list[ChunkedProvider] = field(default_factory=list)

    def factory(self, hooks: Hooks) -> Session:
        flags = {"approval_policy": self.policy} if self.policy else {}
        settings = load_settings(self.workspace, flags, {"OSPREY_HOME": str(self.home), "OPENAI_API_KEY": "unused"}, interactive=True)
        provider = ChunkedProvider(self.scripts.pop(0) if self.scripts else [])
        self.providers.append(provider)

        def emit(event: Event) -> None:
            self.events.append(event)
            hooks.emit(event)

        kwargs = {**hooks.kwargs(), "emit": emit}
        options = SessionOptions(settings=settings.model_copy(update={"retry": FAST_RETRY}), interactive=True, session_id="tui-test-0001")
        return Session(options, provider=provider, **kwargs)

    def app(self) -> OspreyApp:
        return OspreyApp(self.factory)

    def ends(self) -> list[TaskEnd]:
        return [e for e in self.events if isinstance(e, TaskEnd)]


async def until(pilot: Any, condition: Callable[[], bool], timeout: float = 20.0) -> None:
    """Let the app run until `condition` holds (fails after `timeout` seconds)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError("timed out waiting for the app")
        await pilot.pause(0.02)


async def started(pilot: Any, app: OspreyApp) -> None:
    """The first session has started, and so have its tools (the status line says `ready`)."""
    def ready() -> bool:
        session = app.session
        return session is not None and session.started and (session.tools_starting is None or session.tools_starting.done())

    await until(pilot, ready)
    await pilot.pause()


async def type_prompt(pilot: Any, app: OspreyApp, text: str) -> None:
    from osprey.tui.widgets import PromptArea

    area = app.query_one(PromptArea)
    area.load_text(text)
    area.move_cursor(area.document.end)
    await pilot.press("enter")


# ---------------------------------------------------------------------------------------------- tests


@pytest.fixture
def rig(tmp_path: Path) -> TuiRig:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir()
    home.mkdir()
    return TuiRig(workspace, home, [])


def notices(app: OspreyApp) -> str:
    return "\n".join(str(row.render()) for row in app.query(NoticeRow))


async def test_a_prompt_streams_an_answer_as_markdown(rig: TuiRig) -> None:
    answer = "Here is **the answer**:\n\n- one\n- two\n"
    rig.scripts.append([text(answer, usage=(120, 34))])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "explain it")
        await until(pilot, lambda: bool(rig.ends()))
        await app.workers.wait_for_complete()
        [user] = app.query(UserRow)
        assert user.text == "explain it"
        [row] = app.query(AnswerRow)
        assert row.markdown.source == answer
        assert len(rig.providers[0].requests) == 1
        status = str(app.query_one("#status").render())
        assert "fake-1" in status and "on-request" in status and "local" in status
        assert "120 in / 34 out" in status
        assert rig.ends()[0].outcome == "Completed"
        assert app.transcript.last_answer() == answer


def _bash_script(command: str) -> list[Any]:
    return [calls(("bash", {"command": command})), text("finished")]


async def _approval(pilot: Any, app: OspreyApp, command: str) -> ApprovalScreen:
    await type_prompt(pilot, app, "run it")
    await until(pilot, lambda: isinstance(app.screen, ApprovalScreen))
    screen = app.screen
    assert isinstance(screen, ApprovalScreen)
    shown = "\n".join(str(s.render()) for s in screen.query("#arguments Static"))
    assert command in shown  # the whole command, not a summary
    return screen


LONG = "echo approved-output && echo " + "x" * 150 + " > /dev/null"


async def test_y_allows_a_bash_call_once(rig: TuiRig) -> None:
    rig.scripts.append(_bash_script(LONG))
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await _approval(pilot, app, LONG)
        await pilot.press("y")
        await until(pilot, lambda: bool(rig.ends()))
        [result] = [e for e in rig.events if isinstance(e, ToolResultEvent)]
        assert result.ok and "approved-output" in result.output
        [row] = app.query(ToolRow)
        assert "approved-output" in str(row.output.render())
        assert not (rig.home / "approvals.toml").exists()


async def test_n_denies_with_a_reason_the_model_sees(rig: TuiRig) -> None:
    rig.scripts.append(_bash_script("touch made-by-bash"))
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await _approval(pilot, app, "touch made-by-bash")
        await pilot.press("n")
        await pilot.press(*"use the tests instead")
        await pilot.press("enter")
        await until(pilot, lambda: bool(rig.ends()))
        [result] = [e for e in rig.events if isinstance(e, ToolResultEvent)]
        assert not result.ok and "use the tests instead" in result.output
        assert "use the tests instead" in rig.providers[0].requests[1].model_dump_json()
        assert not (rig.workspace / "made-by-bash").exists()
        [row] = app.query(ToolRow)
        assert row.has_class("failed") and result.error_category in str(row.category.render())


async def test_a_saves_a_rule_for_this_project(rig: TuiRig) -> None:
    rig.scripts.append(_bash_script("echo saved-rule"))
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await _approval(pilot, app, "echo saved-rule")
        await pilot.press("a")
        assert isinstance(app.screen, ApprovalScreen)  # it asks for the scope first
        await pilot.press("p")
        await until(pilot, lambda: bool(rig.ends()))
        saved = (rig.home / "approvals.toml").read_text()
        assert 'rule = "bash(echo saved-rule)"' in saved or 'rule = "bash(echo saved-rule *)"' in saved
        assert f'project = "{rig.workspace}"' in saved


async def test_a_then_g_saves_a_rule_for_everywhere(rig: TuiRig) -> None:
    rig.scripts.append(_bash_script("echo everywhere"))
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await _approval(pilot, app, "echo everywhere")
        await pilot.press("a", "g")
        await until(pilot, lambda: bool(rig.ends()))
        saved = (rig.home / "approvals.toml").read_text()
        assert "echo everywhere" in saved and "project" not in saved.split("[[rules]]", 1)[1]


async def test_esc_stops_a_running_task(rig: TuiRig) -> None:
    rig.scripts.append([hang])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "take forever")
        await until(pilot, lambda: bool(rig.providers[0].requests))
        await pilot.press("escape")
        await until(pilot, lambda: bool(rig.ends()))
        assert rig.ends()[0].outcome == "Stopped"
        assert "Stopped" in notices(app)
        assert app.session is not None and not app.session.busy


async def test_quitting_denies_a_pending_approval_and_closes_the_session(rig: TuiRig) -> None:
    rig.scripts.append(_bash_script("touch never-made"))
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await _approval(pilot, app, "touch never-made")
        await pilot.press("ctrl+q")
        await until(pilot, lambda: any(e.type == "session_end" for e in rig.events))
    results = [e for e in rig.events if isinstance(e, ToolResultEvent)]
    assert all(not r.ok for r in results)
    assert not (rig.workspace / "never-made").exists()
    assert rig.events[-1].type == "session_end"


async def test_concurrent_asks_queue(rig: TuiRig) -> None:
    rig.scripts.append([calls(("bash", {"command": "echo first-call"}), ("bash", {"command": "echo second-call"})), text("ok")])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await _approval(pilot, app, "echo first-call")
        await pilot.press("y")
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen) and "second-call" in str(app.screen.query_one("#arguments Static").render()))
        await pilot.press("y")
        await until(pilot, lambda: bool(rig.ends()))
        outputs = [e.output for e in rig.events if isinstance(e, ToolResultEvent)]
        assert any("first-call" in o for o in outputs) and any("second-call" in o for o in outputs)


async def test_prompt_keys_newline_history_and_completion(rig: TuiRig) -> None:
    rig.scripts.append([text("one"), text("two")])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        area = app.query_one(PromptArea)
        await pilot.press(*"first", "ctrl+j", *"line")
        assert area.text == "first\nline"
        await pilot.press("enter")
        await until(pilot, lambda: len(rig.ends()) == 1)
        await pilot.press(*"second", "enter")
        await until(pilot, lambda: len(rig.ends()) == 2)
        assert area.text == ""
        await pilot.press("up")
        assert area.text == "second"
        await pilot.press("up")
        assert area.text == "first\nline"
        await pilot.press("down", "down")
        assert area.text == "second"
        area.load_text("/exp")
        area.move_cursor(area.document.end)
        await pilot.pause()
        menu = app.query_one(CompletionMenu)
        assert menu.shown and [c.name for c in menu.found] == ["export"]
        await pilot.press("tab")
        assert area.text == "/export " and not menu.shown


async def test_the_slash_menu_is_walked_with_the_keys_and_the_mouse(rig: TuiRig) -> None:
    rig.scripts.append([text("unused")])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        area, menu = app.query_one(PromptArea), app.query_one(CompletionMenu)
        await pilot.press("/")
        assert menu.shown and len(menu.found) == len(commands.COMMANDS)
        assert menu.found[0].name == "help" and menu.current is not None and menu.current.name == "help"
        await pilot.press(*"se")
        assert [c.name for c in menu.found] == ["session", "sessions"] and menu.current is not None and menu.current.name == "session"
        await pilot.press("down")
        assert menu.current is not None and menu.current.name == "sessions"
        await pilot.press("down")  # wraps
        assert menu.current is not None and menu.current.name == "session"
        await pilot.press("up")
        assert menu.current is not None and menu.current.name == "sessions" and area.text == "/se"
        await pilot.press("escape")  # closes the menu, stops nothing
        assert not menu.shown and area.text == "/se" and app.session is not None and app.session.started
        area.clear()
        # Enter takes the highlighted command and runs it when it needs no argument.
        await pilot.press(*"/stat", "enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert "approval policy:" in notices(app) and area.text == "" and not menu.shown
        # One that needs an argument is put in the prompt to be finished.
        await pilot.press(*"/prov", "enter")
        assert area.text == "/provider " and not menu.shown
        area.clear()
        # A command typed in full is sent as typed, argument and all.
        await pilot.press(*"/effort", "enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert "/effort: unknown level ''" in notices(app)
        # A click takes a command.
        await pilot.press(*"/too")
        assert [c.name for c in menu.found] == ["tools"]
        await pilot.click(CompletionMenu, offset=(3, 0))
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert "finished tool rows are hidden" in notices(app) and area.text == ""
        # With the menu closed, up walks the history again.
        await pilot.press("up")
        assert area.text == "/tools"


async def _command(pilot: Any, app: OspreyApp, line: str) -> None:
    await type_prompt(pilot, app, line)
    await app.workers.wait_for_complete()
    await pilot.pause()


async def test_slash_commands(rig: TuiRig) -> None:
    rig.scripts.append([text("The **answer** is 42.")])
    rig.scripts.append([text("fresh")])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await _command(pilot, app, "/help")
        assert "/export [PATH]" in notices(app) and "/timestamps" in notices(app)
        await _command(pilot, app, "/help tools")
        assert "tools the model has:" in notices(app) and "bash:" in notices(app) and "read_file:" in notices(app)
        await _command(pilot, app, "/status")
        assert "session: tui-test-0001" in notices(app) and "approval policy: on-request" in notices(app)
        assert re.search(r"tools: [1-9]\d* \(/help tools lists them\)", notices(app))

        await type_prompt(pilot, app, "what is it?")
        await until(pilot, lambda: bool(rig.ends()))
        await app.workers.wait_for_complete()
        await _command(pilot, app, "/copy")
        assert app.clipboard == "The **answer** is 42."
        await _command(pilot, app, "/copy all")
        assert "## You\n\nwhat is it?" in app.clipboard and "The **answer** is 42." in app.clipboard
        await _command(pilot, app, "/export notes/out.md")
        assert "could not write" in notices(app)  # the directory does not exist
        await _command(pilot, app, "/export out.md")
        exported = (rig.workspace / "out.md").read_text()
        assert exported.startswith("# Osprey transcript") and "what is it?" in exported and "The **answer** is 42." in exported

        stamp = app.query_one(UserRow).query_one("Stamp")
        assert not stamp.display
        await _command(pilot, app, "/timestamps")
        assert stamp.display
        await _command(pilot, app, "/timestamps")
        assert not stamp.display

        first = app.session
        await _command(pilot, app, "/new")
        await until(pilot, lambda: app.session is not None and app.session is not first and app.session.started)
        assert not app.query(UserRow) and not app.query(AnswerRow)
        assert [e.type for e in rig.events].count("session_end") == 1
        await type_prompt(pilot, app, "again")
        await until(pilot, lambda: len(rig.ends()) == 2)
        await app.workers.wait_for_complete()
        assert app.transcript.last_answer() == "fresh"

        await _command(pilot, app, "/nonsense")
        await _command(pilot, app, "/quit")
        await until(pilot, lambda: [e.type for e in rig.events].count("session_end") == 2)
    assert app.return_code == 0


async def test_an_app_that_exits_otherwise_still_closes_its_session(rig: TuiRig) -> None:
    rig.scripts.append(_bash_script("touch not-made-either"))
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await _approval(pilot, app, "touch not-made-either")
        app.exit()
    assert rig.events[-1].type == "session_end"
    assert not (rig.workspace / "not-made-either").exists()


async def test_bash_output_shows_while_the_command_runs(rig: TuiRig) -> None:
    rig.policy = "never"
    marker = rig.workspace / "go-on"
    command = f"echo first-part; while [ ! -e {marker} ]; do sleep 0.05; done; echo second-part"
    rig.scripts.append([calls(("bash", {"command": command})), text("ok")])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "run it")
        await until(pilot, lambda: bool(app.query(ToolRow)) and "first-part" in str(app.query_one(ToolRow).output.render()))
        row = app.query_one(ToolRow)
        assert not any(isinstance(e, ToolResultEvent) for e in rig.events)  # still running
        assert not row.collapsed and "… bash" in str(row.title)
        marker.touch()
        await until(pilot, lambda: bool(rig.ends()))
        assert "second-part" in str(row.output.render()) and str(row.title).startswith("✓ bash")


async def test_a_first_session_that_cannot_start_stops_the_tui_with_status_1(rig: TuiRig) -> None:
    from osprey.errors import SandboxError

    def failing(hooks: Hooks) -> Session:
        raise SandboxError("the lane could not start: no Docker engine answers")

    app = OspreyApp(failing)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.return_code is not None or not app.is_running)
    assert app.start_error == "the lane could not start: no Docker engine answers"
    assert app.return_value == 1 and rig.ends() == []


async def test_a_later_session_that_cannot_start_is_shown_and_new_tries_again(rig: TuiRig) -> None:
    from osprey.errors import SandboxError

    failing = {"left": 0}
    factory = rig.factory

    def flaky(hooks: Hooks) -> Session:
        if failing["left"]:
            failing["left"] -= 1
            raise SandboxError("the lane could not start: no Docker engine answers")
        return factory(hooks)

    rig.scripts.append([text("up now")])
    app = OspreyApp(flaky)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        failing["left"] = 1
        await _command(pilot, app, "/new")
        await until(pilot, lambda: app.start_error is not None)
        assert "no Docker engine answers" in notices(app) and app.exit_status == 1 and app.is_running
        assert "did not start" in str(app.query_one("#status").render())
        await _command(pilot, app, "/new")
        await started(pilot, app)
        assert app.start_error is None and app.exit_status == 0
        await type_prompt(pilot, app, "hello")
        await until(pilot, lambda: bool(rig.ends()))


async def test_an_internal_error_is_kept_for_the_crash_report_and_the_session_closed(rig: TuiRig) -> None:
    rig.scripts.append([text("unused")])
    app = rig.app()

    def boom() -> None:
        raise ZeroDivisionError("a bug in a widget")

    with pytest.raises(ZeroDivisionError):
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot, app)
            app.call_later(boom)
            await pilot.pause(0.5)
    assert isinstance(app.crash, ZeroDivisionError)
    assert rig.events[-1].type == "session_end"


async def test_settings_warnings_show_first_and_prompts_sent_meanwhile_are_queued_until_esc(rig: TuiRig) -> None:
    rig.scripts.append([hang])
    app = OspreyApp(rig.factory, warnings=["/ws/.osprey/config.toml: ignored approval_policy"])
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        assert "warning: /ws/.osprey/config.toml: ignored approval_policy" in notices(app)
        area = app.query_one(PromptArea)
        area.load_text("first")
        await pilot.press("enter")
        area.load_text("second")
        await pilot.press("enter")  # the first task has not even begun: queued
        await until(pilot, lambda: bool(rig.providers[0].requests))
        area.load_text("third")
        await pilot.press("enter")  # the first task runs: queued too
        assert area.text == "" and app.driver.queued == ["second", "third"]
        panel = app.query_one(QueuePanel)
        assert panel.display and "second" in str(panel.render()) and "third" in str(panel.render())
        await pilot.press("escape")  # stops the task and drops the queue
        await until(pilot, lambda: bool(rig.ends()))
        await app.workers.wait_for_complete()
        assert [u.text for u in app.query(UserRow)] == ["first"]
        assert len(rig.providers[0].requests) == 1
        assert app.driver.queued == [] and not panel.display
        assert "dropped 2 queued prompts" in notices(app)


async def test_a_prompt_queued_while_the_model_works_is_sent_when_the_turn_ends(rig: TuiRig) -> None:
    release = asyncio.Event()

    async def slow(request: ModelRequest) -> ModelTurn:
        await release.wait()
        return text("first answer")

    rig.scripts.append([slow, text("second answer")])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "first")
        await until(pilot, lambda: bool(rig.providers[0].requests))
        await type_prompt(pilot, app, "and then this")
        assert app.driver.queued == ["and then this"]
        release.set()
        await until(pilot, lambda: len(rig.ends()) == 2)
        await app.workers.wait_for_complete()
        assert [u.text for u in app.query(UserRow)] == ["first", "and then this"]
        last = rig.providers[0].requests[-1].model_dump_json()
        assert "first answer" in last and "and then this" in last  # sent after the first turn, in the same conversation
        assert not app.query_one(QueuePanel).display


async def test_a_warning_from_another_thread_reaches_the_screen(rig: TuiRig) -> None:
    """The session journal warns from its writer thread: the warning is handed to the UI thread."""
    rig.scripts.append([text("ok")])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await asyncio.to_thread(app.driver.warn, "the journal could not be written")
        await until(pilot, lambda: "the journal could not be written" in notices(app))


async def test_enter_runs_the_command_typed_even_before_the_menu_caught_up(rig: TuiRig) -> None:
    rig.scripts.append([text("unused")])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        area, menu = app.query_one(PromptArea), app.query_one(CompletionMenu)
        await pilot.press("/", "d")
        assert menu.current is not None and menu.current.name == "diff"
        area.load_text("/debug")
        area.move_cursor(area.document.end)
        await pilot.pause()
        menu.show_for("/di")  # the menu still shows an earlier state of the prompt
        await pilot.press("enter")
        from osprey.tui.dialogs import DebugDialog

        await until(pilot, lambda: isinstance(app.screen, DebugDialog))
        await pilot.press("escape")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert "raw events are hidden" in notices(app) and "git diff" not in notices(app)


async def test_keys_queued_faster_than_the_prompt_reads_them_run_the_command_typed(rig: TuiRig) -> None:
    """A terminal can deliver `/quit` and Enter before the prompt has read the `/`: Enter still runs
    what was typed, not the menu's first command for a bare `/`."""
    rig.scripts.append([text("unused")])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        area = app.query_one(PromptArea)
        await pilot.press("/")
        release = asyncio.Event()
        area.call_later(release.wait)  # the prompt reads nothing more until released
        try:
            for key in [*"session", "enter"]:
                app.post_message(events.Key(key, None if key == "enter" else key))
            await asyncio.sleep(0.3)  # the app has seen the keys; the prompt has read only the "/"
        finally:
            release.set()
        from osprey.tui.dialogs import SessionDialog

        await until(pilot, lambda: isinstance(app.screen, SessionDialog) or "Not available yet" in notices(app))
        assert "Not available yet" not in notices(app) and "journal" in str(app.screen.query_one("#info").render()) and area.text == ""
        await pilot.press("escape")


async def test_the_slash_menu_shows_argument_hints_and_a_command_run_from_it_leaves_the_prompt_empty(rig: TuiRig) -> None:
    rig.scripts.append([text("unused")])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        area, menu = app.query_one(PromptArea), app.query_one(CompletionMenu)
        await pilot.press(*"/ex")
        assert menu.shown
        await pilot.pause()
        # What is drawn, without its styles: the hint is text, not markup.
        shown = re.sub("\x1b\\[[0-9;?]*[A-Za-z]", "", app.screen._compositor.render_full_update().render_segments(app.console))
        assert "[PATH]" in shown, shown
        area.clear()
        await pilot.press(*"/tools", "enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert area.text == "" and not menu.shown and "finished tool rows are hidden" in notices(app)


async def test_old_rows_leave_the_screen_and_export_still_has_them(rig: TuiRig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("osprey.tui.app.MAX_ROWS", 12)
    prompts = 10
    rig.scripts.append([text(f"answer number {n}") for n in range(prompts)])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        for n in range(prompts):
            await type_prompt(pilot, app, f"prompt number {n}")
            await until(pilot, lambda n=n: len(rig.ends()) == n + 1 and not app.driver.working)
        await app.workers.wait_for_complete()
        await pilot.pause()
        rows = list(app.conversation.children)
        assert len(rows) <= 12 + 1
        earlier = app.query_one("#earlier", NoticeRow)
        assert rows[0] is earlier
        hidden = 1 + 2 * prompts - (len(rows) - 1)  # the welcome note, then a prompt and an answer each
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
