"""Pilot tests of the TUI's second set of commands: model, provider and effort switches, /compact,
resuming journaled sessions, /session, /sessions, /diff, /debug, and the commands /help lists."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from session_harness import FAST_RETRY, calls, hang, text
from test_tui import SIZE, ChunkedProvider, notices, started, type_prompt, until
from textual.widgets import OptionList

from osprey.catalog import Catalog, ModelInfo
from osprey.config import Settings, load_settings
from osprey.errors import ProviderError
from osprey.events import Compaction, Event, ModelSwitch, TaskEnd, ToolCallEvent, ToolResultEvent
from osprey.interception import Interceptor, PendingCall, Verdict
from osprey.session.core import Session, SessionOptions
from osprey.sessions.journal import Journal, journal_path, list_sessions, read_events
from osprey.sessions.resume import resume_point
from osprey.tui import commands
from osprey.tui.app import OspreyApp
from osprey.tui.driver import Hooks, Resume
from osprey.tui.presenter import DIFF_COMMAND
from osprey.tui.question_screen import QuestionScreen
from osprey.tui.screens import ModelPicker, SessionsScreen
from osprey.tui.widgets import AnswerRow, FoldRow, NoticeRow, QuestionRow, TodoPanel, ToolRow, UserRow


@dataclass
class JournaledRig:
    """Sessions journaled in `home`, each with the next script; switches resolve real settings."""

    workspace: Path
    home: Path
    scripts: list[list[Any]]
    env: dict[str, str] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    providers: list[ChunkedProvider] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    interceptors: list[Interceptor] = field(default_factory=list)  # given to every session

    def settings_for(self, change: dict[str, Any]) -> Settings:
        env = {"OSPREY_HOME": str(self.home), "OPENAI_API_KEY": "unused", **self.env}
        return load_settings(self.workspace, {"approval_policy": "never", **change}, env, interactive=True)

    def factory(self, hooks: Hooks) -> Session:
        provider = ChunkedProvider(self.scripts.pop(0) if self.scripts else [])
        self.providers.append(provider)

        def emit(event: Event) -> None:
            self.events.append(event)
            hooks.emit(event)

        settings = self.settings_for({}).model_copy(update={"retry": FAST_RETRY})
        options = SessionOptions(settings=settings, interactive=True, session_id=f"sess-{len(self.providers):04d}")
        if hooks.resume is not None:
            options = options.model_copy(update={"session_id": hooks.resume.row.id, "resume": resume_point(hooks.resume.events)})
        self.ids.append(options.session_id)
        journal = Journal(journal_path(self.home))
        return Session(options, provider=provider, journal=journal, interceptors=list(self.interceptors), **{**hooks.kwargs(), "emit": emit})

    def app(self, resume: Resume | None = None) -> OspreyApp:
        return OspreyApp(self.factory, settings_for=self.settings_for, journal=journal_path(self.home), resume=resume)

    def ends(self) -> list[TaskEnd]:
        return [e for e in self.events if isinstance(e, TaskEnd)]


@pytest.fixture
def rig(tmp_path: Path) -> JournaledRig:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir()
    home.mkdir()
    return JournaledRig(workspace, home, [])


async def _command(pilot: Any, app: OspreyApp, line: str) -> None:
    await type_prompt(pilot, app, line)
    await app.workers.wait_for_complete()
    await pilot.pause()


def _status(app: OspreyApp) -> str:
    return str(app.query_one("#status").render())


async def test_help_lists_every_command_and_none_is_planned(rig: JournaledRig) -> None:
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await _command(pilot, app, "/help")
        shown = notices(app)
        assert "Not available yet" not in shown and "/compact [INSTRUCTIONS]" in shown
        for usage in ("/moa PROMPT", "/moa-config", "/run PATH [ARGS]", "/workflows", "/deep-research QUESTION"):
            assert usage in shown, usage
        await _command(pilot, app, "/moa")
        assert "not available yet" not in notices(app)
    assert [c.name for c in commands.matching("/de")] == ["debug", "deep-research"]


async def test_model_effort_and_provider_switches(rig: JournaledRig) -> None:
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await _command(pilot, app, "/model gpt-test-2")
        assert "gpt-test-2" in _status(app)
        await _command(pilot, app, "/effort extreme")
        assert "unknown level 'extreme'" in notices(app)
        await _command(pilot, app, "/effort high")
        assert "gpt-test-2 (high effort)" in _status(app)
        await _command(pilot, app, "/effort off")
        assert "effort" not in _status(app)
        switches = [e for e in rig.events if isinstance(e, ModelSwitch)]
        assert [(s.model, s.effort) for s in switches] == [("gpt-test-2", None), ("gpt-test-2", "high"), ("gpt-test-2", None)]
        await _command(pilot, app, "/provider anthropic")  # no ANTHROPIC_API_KEY here
        assert "/provider anthropic:" in notices(app) and "ANTHROPIC_API_KEY" in notices(app)
        assert app.session is not None and app.session.settings.provider == "openai"
        assert len([e for e in rig.events if isinstance(e, ModelSwitch)]) == 3
        await _command(pilot, app, "/provider nope")
        assert "give one of openai, anthropic" in notices(app)


async def test_anthropic_switch_with_its_key(rig: JournaledRig) -> None:
    rig.env["ANTHROPIC_API_KEY"] = "unused"
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await _command(pilot, app, "/provider anthropic")
        assert app.session is not None and app.session.settings.provider == "anthropic"
        assert "anthropic ·" in _status(app)


async def test_switches_and_compact_are_refused_while_a_task_runs(rig: JournaledRig) -> None:
    rig.scripts.append([hang])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "think forever")
        await until(pilot, lambda: app.session is not None and app.session.busy)
        for line in ("/model other", "/compact", "/effort low", "/sessions"):
            await type_prompt(pilot, app, line)
            await until(pilot, lambda line=line: f"{line}: a task is running" in notices(app))
        assert not [e for e in rig.events if isinstance(e, ModelSwitch)]
        await pilot.press("escape")
        await until(pilot, lambda: bool(rig.ends()))


def _models(*ids: str) -> list[ModelInfo]:
    return [ModelInfo(provider="openai", id=i, context_window=200_000) for i in ids]


async def test_model_picker_shows_the_cached_list_then_the_refreshed_one_and_switches(rig: JournaledRig) -> None:
    refreshed = asyncio.Event()

    async def catalogs(settings: Settings) -> AsyncIterator[Catalog]:
        first = Catalog(models=_models("gpt-cached-a", "gpt-cached-b"), source="models.dev", fetched_at=datetime(2026, 3, 1, 9, 0, tzinfo=UTC))
        yield first
        await refreshed.wait()
        yield first.model_copy(update={"stale": True, "problem": "models.dev did not answer"})

    app = rig.app()
    app.slash.catalogs = catalogs  # type: ignore[method-assign]
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "/model")
        await until(pilot, lambda: isinstance(app.screen, ModelPicker))
        picker = app.screen
        assert isinstance(picker, ModelPicker)
        options = picker.query_one(OptionList)
        await until(pilot, lambda: options.option_count == 2)
        assert "2 models" in str(picker.note.render())
        refreshed.set()
        await until(pilot, lambda: "offline or stale" in str(picker.note.render()))
        assert "models.dev did not answer" in str(picker.note.render())
        await pilot.press(*"ed-b")
        assert options.option_count == 1
        await pilot.press("enter")
        await until(pilot, lambda: any(isinstance(e, ModelSwitch) for e in rig.events))
        await app.workers.wait_for_complete()
        [switch] = [e for e in rig.events if isinstance(e, ModelSwitch)]
        assert switch.model == "gpt-cached-b" and "gpt-cached-b" in _status(app)
        await type_prompt(pilot, app, "/model")
        await until(pilot, lambda: isinstance(app.screen, ModelPicker))
        await pilot.press(*"not-listed-model", "enter")
        await until(pilot, lambda: len([e for e in rig.events if isinstance(e, ModelSwitch)]) == 2)
        assert rig.events[-1].model == "not-listed-model"  # type: ignore[union-attr]
        await type_prompt(pilot, app, "/model")
        await until(pilot, lambda: isinstance(app.screen, ModelPicker))
        await pilot.press("escape")
        await app.workers.wait_for_complete()
        assert not isinstance(app.screen, ModelPicker)
        assert len([e for e in rig.events if isinstance(e, ModelSwitch)]) == 2


async def test_compact_shows_the_summary(rig: JournaledRig) -> None:
    rig.scripts.append([text("first answer"), text("SUMMARY: the user asked one thing."), ProviderError("HTTP 401: bad key", status=401)])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "one thing")
        await until(pilot, lambda: bool(rig.ends()))
        await app.workers.wait_for_complete()
        await _command(pilot, app, "/compact keep it short")
        [compaction] = [e for e in rig.events if isinstance(e, Compaction)]
        assert compaction.summary.startswith("SUMMARY")
        assert "keep it short" in str(rig.providers[0].requests[-1].model_dump())
        [row] = app.query(FoldRow).filter(".compaction")
        assert "SUMMARY" in str(row.body.render())
        await _command(pilot, app, "/compact")  # the model cannot summarise
        assert "/compact: HTTP 401: bad key" in notices(app)
        assert len([e for e in rig.events if isinstance(e, Compaction)]) == 1


async def test_a_journaled_session_is_shown_and_continued(rig: JournaledRig) -> None:
    rig.scripts.append([calls(("bash", {"command": "echo hi"})), text("The answer is **hi**.")])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "say hi")
        await until(pilot, lambda: bool(rig.ends()))
        await app.workers.wait_for_complete()
    path = journal_path(rig.home)
    [row] = list_sessions(path)
    events = read_events(path, row.id)
    rig.scripts.append([text("second answer")])
    app = rig.app(Resume(row, events))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        assert [u.text for u in app.query(UserRow)] == ["say hi"]
        assert [a.markdown.source for a in app.query(AnswerRow)] == ["The answer is **hi**."]
        [tool] = app.query(ToolRow)
        assert tool.call.name == "bash" and "hi" in str(tool.output.render())
        await type_prompt(pilot, app, "and again")
        await until(pilot, lambda: len(rig.ends()) == 2)
        sent = rig.providers[-1].requests[0].model_dump_json()
        assert "say hi" in sent and "The answer is **hi**." in sent and "and again" in sent
        from osprey.tui.dialogs import SessionDialog

        await type_prompt(pilot, app, "/session")
        await until(pilot, lambda: isinstance(app.screen, SessionDialog))
        shown = str(app.screen.query_one("#info").render())
        assert f"session: {row.id}" in shown and "title: say hi" in shown and str(path) in shown
        await pilot.press("escape")
        await app.workers.wait_for_complete()
    assert rig.ids == [row.id, row.id]
    assert [r.id for r in list_sessions(path)] == [row.id]


async def test_sessions_tree_resumes_in_place_with_the_model_the_session_ran_with(rig: JournaledRig) -> None:
    rig.scripts += [[text("first")], [text("second")], []]
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await _command(pilot, app, "/model gpt-old")
        await type_prompt(pilot, app, "the first session")
        await until(pilot, lambda: len(rig.ends()) == 1)
        await app.workers.wait_for_complete()
        await _command(pilot, app, "/new")
        await started(pilot, app)
        await _command(pilot, app, "/model gpt-new")
        await _command(pilot, app, "/effort high")
        assert app.current_settings is not None and (app.current_settings.model, app.current_settings.effort) == ("gpt-new", "high")
        await type_prompt(pilot, app, "the second session")
        await until(pilot, lambda: len(rig.ends()) == 2)
        await app.workers.wait_for_complete()
        await type_prompt(pilot, app, "/sessions")
        await until(pilot, lambda: isinstance(app.screen, SessionsScreen))
        await pilot.press("down", "enter")  # the cursor starts on the newest; the one below is the first
        await until(pilot, lambda: len(rig.ids) == 3)
        await started(pilot, app)
        assert rig.ids[2] == rig.ids[0]
        assert [u.text for u in app.query(UserRow)] == ["the first session"]
        assert app.current_settings is not None and app.current_settings.model == "gpt-old"
        assert app.current_settings.effort is None and app.model_flags == {"provider": "openai", "model": "gpt-old"}


@pytest.fixture
def repo(rig: JournaledRig) -> JournaledRig:
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q"], cwd=rig.workspace, check=True)
    (rig.workspace / "a.txt").write_text("one\ntwo\n")
    subprocess.run([*git, "add", "a.txt"], cwd=rig.workspace, check=True)
    subprocess.run([*git, "commit", "-qm", "start"], cwd=rig.workspace, check=True)
    return rig


async def test_diff_and_debug(repo: JournaledRig) -> None:
    rig = repo
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await _command(pilot, app, "/diff")
        assert "no changes in the workspace" in notices(app)
        (rig.workspace / "a.txt").write_text("one\nTWO\n")
        await _command(pilot, app, "/diff")
        [row] = app.query(FoldRow).filter(".diff")
        body = row.body.render()
        assert "1 file changed" in str(row.title) and "+TWO" in str(body) and "-two" in str(body)
        (rig.workspace / "big.txt").write_text("".join(f"line {i} of a large change\n" for i in range(20_000)))
        # `git add -N` puts the new file in git diff: about 500 KB of it, over the 200 KB shown
        await asyncio.to_thread(subprocess.run, ["git", "add", "-N", "big.txt"], cwd=rig.workspace, check=True)
        await _command(pilot, app, "/diff")
        big = app.query(FoldRow).filter(".diff").last()
        shown = str(big.body.render())
        assert "2 files changed" in str(big.title) and "line 0 of a large change" in shown
        assert "[cut: " in shown and "run git diff for all of it" in shown and len(shown) < 260_000
        await _debug_raw_events(pilot, app)
        assert "raw events are shown" in notices(app)
        await _command(pilot, app, "/effort low")
        assert any("model_switch" in str(r.title) for r in app.query(FoldRow).filter(".debug"))
        await _debug_raw_events(pilot, app)
        assert "raw events are hidden" in notices(app)
        count = len(app.query(FoldRow).filter(".debug"))
        await _command(pilot, app, "/effort high")
        assert len(app.query(FoldRow).filter(".debug")) == count


async def _debug_raw_events(pilot: Any, app: OspreyApp) -> None:
    """Open /debug, flip its raw-events switch, close it."""
    from osprey.tui.dialogs import DebugDialog

    await type_prompt(pilot, app, "/debug")
    await until(pilot, lambda: isinstance(app.screen, DebugDialog))
    await pilot.pause()
    info = str(app.screen.query_one("#info").render())
    assert "session: sess-0001" in info and "terminal: TERM=" in info
    await pilot.click("#raw-events")
    await pilot.press("escape")
    await app.workers.wait_for_complete()
    await pilot.pause()


class BashRefused(Interceptor):
    """A hook that refuses bash once `refusing` is set."""

    name = "no-bash-here"

    def __init__(self) -> None:
        self.refusing = False
        self.judged: list[str] = []

    async def before_call(self, call: PendingCall) -> Verdict | None:
        self.judged.append(str(call.arguments.get("command", "")))
        if self.refusing and call.name == "bash":
            return Verdict.deny(self.name, "bash is switched off in this workspace")
        return None


async def test_diff_is_the_persons_call_judged_by_the_hooks_journaled_and_kept_out_of_the_conversation(repo: JournaledRig) -> None:
    rig = repo
    hook = BashRefused()
    rig.interceptors.append(hook)
    rig.scripts.append([text("nothing to add")])
    (rig.workspace / "a.txt").write_text("one\nTWO\n")
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await _command(pilot, app, "/diff")
        [row] = app.query(FoldRow).filter(".diff")
        assert "1 file changed" in str(row.title) and "+TWO" in str(row.body.render())
        assert not app.query(ToolRow)  # the person's call is the diff, not a model's tool row
        hook.refusing = True
        await _command(pilot, app, "/diff")
        assert "/diff: Error (denied): bash is switched off in this workspace" in notices(app)
        assert len(app.query(FoldRow).filter(".diff")) == 1 and not app.query(ToolRow)
        assert hook.judged == [DIFF_COMMAND, DIFF_COMMAND]
        await type_prompt(pilot, app, "anything else?")
        await until(pilot, lambda: bool(rig.ends()))
        await app.workers.wait_for_complete()
    assert DIFF_COMMAND not in rig.providers[0].requests[0].model_dump_json()  # not part of the conversation
    path = journal_path(rig.home)
    [session] = list_sessions(path)
    recorded = read_events(path, session.id)
    asked = [e for e in recorded if isinstance(e, ToolCallEvent | ToolResultEvent)]
    assert [(e.type, e.requested_by) for e in asked] == [("tool_call", "user"), ("tool_result", "user")] * 2
    assert all(e.arguments == {"command": DIFF_COMMAND, "timeout_ms": 30_000} for e in asked if isinstance(e, ToolCallEvent))
    first, second = [e for e in asked if isinstance(e, ToolResultEvent)]
    assert first.ok and "+TWO" in first.output
    assert not second.ok and second.error_category == "denied" and "bash is switched off" in second.output
    assert resume_point(recorded).messages == resume_point([e for e in recorded if e not in asked]).messages
    # Resumed, the journal shows the same: the diff and the refusal, and no tool row.
    app = rig.app(Resume(session, recorded))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        [row] = app.query(FoldRow).filter(".diff")
        assert "+TWO" in str(row.body.render())
        assert "/diff: Error (denied): bash is switched off in this workspace" in notices(app)
        assert not app.query(ToolRow)


STARTING_NOTES = ("warning: tool calls run on the host without approval", "resumed session ", "Osprey is ready: ")


def _said(app: OspreyApp) -> list[tuple[str, str]]:
    """The transcript, without the notes of a session's start and resume."""
    return [(e.role, e.text) for e in app.transcript.entries if not (e.role == "notice" and e.text.startswith(STARTING_NOTES))]


def _shown(app: OspreyApp) -> list[tuple[str, ...]]:
    """The conversation's rows as what each says, without the notes of a session's start and resume."""
    rows: list[tuple[str, ...]] = []
    for row in app.conversation.children:
        if isinstance(row, UserRow):
            rows.append(("user", row.text))
        elif isinstance(row, AnswerRow):
            rows.append(("answer", row.markdown.source))
        elif isinstance(row, ToolRow):
            rows.append(("tool", str(row.title), str(row.arguments.render()), str(row.output.render()), str(row.category.render())))
        elif isinstance(row, FoldRow):
            rows.append(("fold", " ".join(sorted(row.classes)), str(row.title), str(row.body.render())))
        elif isinstance(row, QuestionRow):
            rows.append(("question", row.event.question, str(row.event.answer)))
        elif isinstance(row, NoticeRow):
            said = str(row.render())
            if not said.startswith(STARTING_NOTES):
                rows.append(("note", " ".join(sorted(row.classes)), said))
        else:
            rows.append((type(row).__name__,))
    return rows


async def test_a_session_replayed_from_the_journal_shows_the_rows_it_showed_live(repo: JournaledRig) -> None:
    rig = repo
    todos = [{"content": "look at the code", "status": "completed"}, {"content": "change it", "status": "in_progress"}]
    rig.scripts.append([
        calls(("todo_write", {"todos": todos}), say="Planning first."),
        calls(("bash", {"command": "echo looked"}), ("read_file", {"path": "missing.txt"}), say="Looking around."),
        calls(("question", {"question": "Which line?"})),
        calls(("edit_file", {"path": "a.txt", "old_string": "two", "new_string": "TWO"})),
        calls(("task_status", {"status": "done", "summary": "changed line two"})),
        text("Changed it: **two** is now TWO."),
        text("SUMMARY: line two was changed."),
        text("Nothing more."),
    ])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "change line two")
        await until(pilot, lambda: isinstance(app.screen, QuestionScreen))
        await pilot.press(*"the second", "enter")
        await until(pilot, lambda: bool(rig.ends()))
        await app.workers.wait_for_complete()
        await _command(pilot, app, "/diff")
        await _command(pilot, app, "/compact")
        await type_prompt(pilot, app, "anything more?")
        await until(pilot, lambda: len(rig.ends()) == 2)
        await app.workers.wait_for_complete()
        await _command(pilot, app, "/model gpt-test-2")  # last: the switch leaves the scripted provider
        await pilot.pause()
        live = _shown(app)
        live_todo = str(app.query_one(TodoPanel).render())
        live_transcript = _said(app)
    kinds = {row[0] for row in live}
    assert {"user", "answer", "tool", "fold", "question", "note"} <= kinds
    assert any(row[0] == "fold" and "diff" in row[1] for row in live) and any(row[0] == "fold" and "compaction" in row[1] for row in live)
    assert any(row[0] == "note" and "now talking to" in row[2] for row in live)
    path = journal_path(rig.home)
    [session] = list_sessions(path)
    app = rig.app(Resume(session, read_events(path, session.id)))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await pilot.pause()
        assert _shown(app) == live
        assert str(app.query_one(TodoPanel).render()) == live_todo
        assert _said(app) == live_transcript


def test_an_unknown_session_is_an_error_before_the_screen_opens(tmp_path: Path) -> None:
    import sys

    osprey = str(Path(sys.executable).with_name("osprey"))
    env = {"PATH": "/usr/bin:/bin", "OSPREY_HOME": str(tmp_path), "OPENAI_API_KEY": "k"}
    for args in (["--resume", "nope"], ["--continue"], ["--resume", "x", "--continue"]):
        done = subprocess.run([osprey, "-C", str(tmp_path), *args], env=env, capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == (2 if len(args) == 3 else 1), done.stderr
        assert done.stderr.startswith("osprey: error: ")
    Journal(journal_path(tmp_path)).close()  # an empty journal: still no such session
    done = subprocess.run([osprey, "-C", str(tmp_path), "--resume", "nope"], env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 1 and "no session 'nope'" in done.stderr


async def test_a_catalog_that_fails_leaves_the_picker_usable_by_name(rig: JournaledRig) -> None:
    async def catalogs(settings: Settings) -> AsyncIterator[Catalog]:
        raise OSError("cache unreadable")
        yield  # an async generator

    app = rig.app()
    app.slash.catalogs = catalogs  # type: ignore[method-assign]
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "/model")
        await until(pilot, lambda: isinstance(app.screen, ModelPicker))
        picker = app.screen
        assert isinstance(picker, ModelPicker)
        await until(pilot, lambda: "could not be loaded (OSError: cache unreadable)" in str(picker.note.render()))
        await pilot.press(*"typed-model", "enter")
        await until(pilot, lambda: any(isinstance(e, ModelSwitch) for e in rig.events))
        assert "typed-model" in _status(app)


async def test_extensions_and_reload(rig: JournaledRig) -> None:
    tools = rig.home / "tools"
    tools.mkdir()
    (tools / "count.sh").write_text("#!/bin/sh\ncat\n")
    (tools / "count.sh").chmod(0o755)
    (tools / "word_count.toml").write_text('name = "word_count"\ndescription = "Counts."\ncommand = ["./count.sh"]\n')
    (tools / "broken.toml").write_text("name = 3\n")
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await _command(pilot, app, "/extensions")
        shown = notices(app)
        assert f"word_count: {tools / 'word_count.toml'} (user)" in shown
        assert "not loaded: broken (skipped)" in shown and "osprey extensions" in shown
        await _command(pilot, app, "/reload")
        assert "the extensions will be found again at the next turn boundary" in notices(app)
        await _command(pilot, app, "/extensions")
        assert "a reload is pending" in notices(app)
