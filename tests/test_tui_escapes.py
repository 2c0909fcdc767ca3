"""Pilot tests: what reaches the TUI from a model, a tool, a file or a server is drawn without its
escape sequences and control characters (OSC 0/2 titles, OSC 52 clipboard writes, CSI 2J, their
8-bit C1 forms), and with no markup read into it."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import pytest
from session_harness import calls, text
from test_tui import TuiRig, started, type_prompt, until
from textual.widgets import Markdown, OptionList, Tree

from osprey.catalog import Catalog, ModelInfo
from osprey.events import AssistantText, Notice, Question, ToolCallEvent, ToolResultEvent
from osprey.sessions.journal import SessionRow
from osprey.tui.app import OspreyApp
from osprey.tui.question_screen import QuestionScreen
from osprey.tui.screens import ModelPicker, SessionsScreen
from osprey.tui.widgets import AnswerRow, FoldRow, NoticeRow, QuestionRow, ToolRow

BIG = (120, 60)  # every row of these conversations fits: the drawn screen holds them all
CLIPBOARD = base64.b64encode(b"pwned-clipboard").decode()
# Every kind, each with a payload that must not be drawn either ("pwned").
SEQUENCES = ("\x1b]0;pwned-osc0\x07", "\x1b]2;pwned-osc2\x1b\\", f"\x1b]52;c;{CLIPBOARD}\x07", "\x1b[2J\x1b[H",
             "\x9b2J", "\x9d0;pwned-c1\x9c", "\x9d52;c;cHduZWQ=\x07", "\x1bP+qpwned-dcs\x1b\\", "\x1b_pwned-apc\x1b\\", "\x07\x08\x7f")
HOSTILE = "hostile " + " mid ".join(SEQUENCES) + " end"
# What the terminal itself is sent: textual's own sequences are cursor moves and styles (CSI ... H/m).
TEXTUAL_OWN = re.compile(r"\x1b\[[0-9;:?]*[Hmlh]")


def drawn(app: OspreyApp) -> str:
    """What the app sends the terminal for its whole screen (the string its driver writes)."""
    update = app.screen._compositor.render_full_update()
    return update.render_segments(app.console)


def assert_no_controls(shown: str) -> None:
    """No control character but those of textual's own cursor moves and styles."""
    rest = TEXTUAL_OWN.sub("", shown)
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", rest), repr(re.findall(".{0,20}[\x00-\x08\x0b-\x1f\x7f-\x9f].{0,20}", rest)[:5])
    assert "\x1b]" not in shown and "\x1b[2J" not in shown and "\x1bP" not in shown and "\x1b_" not in shown


def assert_clean(shown: str) -> None:
    """No control character, and no payload of a sequence either."""
    assert_no_controls(shown)
    rest = TEXTUAL_OWN.sub("", shown)
    assert "pwned" not in rest and CLIPBOARD not in rest and "cHduZWQ" not in rest, rest


@pytest.fixture
def rig(tmp_path: Path) -> TuiRig:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir()
    home.mkdir()
    return TuiRig(workspace, home, [], policy="never")


async def test_an_answer_streamed_with_escape_sequences_is_drawn_without_them(rig: TuiRig) -> None:
    # Streamed in pieces of 4 characters: the sequences are cut between pieces.
    answer = f"# Title {SEQUENCES[0]}\n\nSome **bold** {HOSTILE}\n\n- item {SEQUENCES[2]}\n\n```\ncode {SEQUENCES[1]}\n```\n"
    rig.scripts.append([text(answer)])
    app = rig.app()
    async with app.run_test(size=BIG) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "say it")
        await until(pilot, lambda: bool(rig.ends()))
        await app.workers.wait_for_complete()
        await pilot.pause()
        [row] = app.query(AnswerRow)
        assert_clean(row.markdown.source)
        screen = drawn(app)
        assert_clean(screen)
        assert "hostile" in screen and " end" in screen and "code" in screen and "item" in screen
        assert_clean(app.transcript.to_markdown())  # what /copy and /export take


async def test_a_whole_answer_and_character_references_are_drawn_clean(rig: TuiRig) -> None:
    app = rig.app()
    async with app.run_test(size=BIG) as pilot:
        await started(pilot, app)
        # A replayed answer comes whole; Markdown's character references cannot bring back a control.
        app.presenter.present(AssistantText(turn=1, text=f"whole {HOSTILE} &#13;&#12;&#x202e;&#x9b;&#27; refs"))
        await until(pilot, lambda: bool(app.query(AnswerRow)))
        [row] = app.query(AnswerRow)
        await pilot.pause()
        blocks = "\n".join(str(block._content) for block in row.query("MarkdownBlock") if hasattr(block, "_content"))
        assert "\u202e" not in blocks and "\r" not in blocks and "\x0c" not in blocks, repr(blocks)
        assert_clean(drawn(app))
        assert "refs" in drawn(app)


async def test_a_link_in_an_answer_opens_only_when_it_is_http(rig: TuiRig, monkeypatch: pytest.MonkeyPatch) -> None:
    app = rig.app()
    opened: list[str] = []
    monkeypatch.setattr(app, "open_url", lambda url, **_: opened.append(url))
    async with app.run_test(size=BIG) as pilot:
        await started(pilot, app)
        app.presenter.present(AssistantText(turn=1, text="[links](https://example.test/)"))
        await until(pilot, lambda: bool(app.query(AnswerRow)))
        [row] = app.query(AnswerRow)
        for href in ("file:///etc/passwd", "x-scheme:run", "https://example.test/a%1b]0;t", "https://example.test/ok"):
            row.markdown.post_message(Markdown.LinkClicked(row.markdown, href))
        await pilot.pause()
        assert opened == ["https://example.test/ok"]


async def test_failed_tool_output_live_and_final_is_drawn_without_escape_sequences(rig: TuiRig) -> None:
    printed = "".join(s.replace("\\", "\\\\").replace("\x1b", "\\033").replace("\x07", "\\007") for s in SEQUENCES[:4])
    command = f"printf 'live {printed} still\\n'; sleep 0.3; printf 'more \\033]0;pwned-late\\007 done\\n'; exit 3"
    rig.scripts.append([calls(("bash", {"command": command})), text("finished")])
    app = rig.app()
    async with app.run_test(size=BIG) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "run it")
        await until(pilot, lambda: bool(app.query(ToolRow)) and "still" in str(app.query_one(ToolRow).output.render()))
        live = str(app.query_one(ToolRow).output.render())
        assert_clean(live)
        assert_no_controls(drawn(app))  # the command itself is shown as typed, payloads and all
        await until(pilot, lambda: bool(rig.ends()))
        [result] = [e for e in rig.events if isinstance(e, ToolResultEvent)]
        assert not result.ok and "\x1b]0;pwned" in result.output  # the model gets the output as it was
        row = app.query_one(ToolRow)
        assert row.has_class("failed")
        final = str(row.output.render())
        assert_clean(final)
        assert "live" in final and "still" in final and "more" in final and "done" in final
        assert_no_controls(drawn(app))


async def test_arguments_titles_and_results_of_other_tools_are_drawn_clean(rig: TuiRig) -> None:
    (rig.workspace / "notes.txt").write_text(f"file says {HOSTILE}\n")
    rig.scripts.append([calls(("read_file", {"path": "notes.txt"}), ("read_file", {"path": f"missing{SEQUENCES[0]}.txt"})), text("ok")])
    app = rig.app()
    async with app.run_test(size=BIG) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "read it")
        await until(pilot, lambda: bool(rig.ends()))
        rows = list(app.query(ToolRow))
        assert len(rows) == 2
        for row in rows:
            row.collapsed = False
        await pilot.pause()
        first, second = (str(r.output.render()) for r in rows)
        assert_clean(first)
        assert "file says hostile" in first
        assert_clean(second)
        # The path is an argument: its control characters are written out, not acted on or dropped.
        arguments = str(rows[1].arguments.render())
        assert "\\x1b]0;pwned-osc0\\x07" in arguments and "\x1b" not in arguments
        assert "\x1b" not in str(rows[1].title) and "\x07" not in str(rows[1].title)
        screen = drawn(app)
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", TEXTUAL_OWN.sub("", screen))
        assert "\x1b]" not in screen and "\x1b[2J" not in screen


async def test_markup_in_a_tool_call_is_shown_as_text(rig: TuiRig) -> None:
    command = "echo '[@click=app.quit]press[/] [reverse]x[/reverse]'"
    rig.scripts.append([calls(("bash", {"command": command})), text("ok")])
    app = rig.app()
    async with app.run_test(size=BIG) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "run it")
        await until(pilot, lambda: bool(rig.ends()))
        row = app.query_one(ToolRow)
        assert "[@click=app.quit]press[/]" in str(row.query_one("CollapsibleTitle").render())


async def test_notices_questions_edits_and_compaction_text_are_drawn_clean(rig: TuiRig) -> None:
    app = rig.app()
    async with app.run_test(size=BIG) as pilot:
        await started(pilot, app)
        presenter = app.presenter
        presenter.present(Notice(message=f"a hook said {HOSTILE}", level="warning"))
        presenter.note(f"/extensions: not loaded: x (invalid): {HOSTILE}")
        presenter.present(Question(turn=1, question=f"which? {HOSTILE}", answer=f"this {SEQUENCES[2]}"))
        presenter.present(ToolCallEvent(turn=1, id="e1", name="edit_file",
                                        arguments={"path": "a.py", "old_string": "x = 1\n", "new_string": f"x = 2 {SEQUENCES[0]}\n"}))
        presenter.present(ToolResultEvent(turn=1, id="e1", name="edit_file", ok=False, output=f"no match {HOSTILE}",
                                          error_category=f"bad{SEQUENCES[3]}"))
        from osprey.events import Compaction, TodoList

        presenter.present(Compaction(turn=1, messages_before=3, summary=f"summary {HOSTILE}", reason="auto"))
        presenter.present(TodoList(turn=1, items=[{"content": f"task {HOSTILE}", "status": "in_progress"}]))
        await pilot.pause()
        for row in app.query(FoldRow):
            row.collapsed = False
        await pilot.pause()
        for widget in [*app.query(NoticeRow), *app.query(QuestionRow), *app.query(FoldRow)]:
            for static in widget.query("Static"):
                assert_clean(str(static.render()))
        assert "\\x1b]0;pwned-osc0\\x07" in str(app.query_one(ToolRow).arguments.render())  # the edit, written out
        assert_clean(drawn(app).replace("\\x1b]0;pwned-osc0\\x07", ""))
        assert_clean(app.transcript.to_markdown().replace("\\x1b]0;pwned-osc0\\x07", ""))


async def test_the_question_screen_and_the_status_line_are_drawn_clean(rig: TuiRig) -> None:
    app = rig.app()
    async with app.run_test(size=BIG) as pilot:
        await started(pilot, app)
        from osprey.events import ModelSwitch

        app.presenter.present(ModelSwitch(provider="openai", model=f"gpt{SEQUENCES[0]}{SEQUENCES[4]}"))
        await pilot.pause()
        assert_clean(str(app.query_one("#status").render()))
        app.push_screen(QuestionScreen(f"the model asks {HOSTILE}"))
        await until(pilot, lambda: isinstance(app.screen, QuestionScreen))
        await pilot.pause()
        shown = drawn(app)
        assert "the model asks" in shown
        assert_clean(shown)


async def test_session_titles_and_model_names_are_shown_as_text(rig: TuiRig) -> None:
    row = SessionRow(id="abcdef123456", cwd=f"/tmp/dir{SEQUENCES[0]}", workspace="/tmp", created=1.0e9, updated=1.0e9,
                     title=f"[b]title[/b] {HOSTILE}", provider="openai", model="m", outcome="Completed")
    app = rig.app()
    async with app.run_test(size=BIG) as pilot:
        await started(pilot, app)
        app.push_screen(SessionsScreen([row], "/elsewhere"))
        await until(pilot, lambda: isinstance(app.screen, SessionsScreen) and bool(app.screen.query(Tree)))
        tree = app.screen.query_one(Tree)
        tree.root.expand_all()
        await pilot.pause()
        labels = [str(node.label) for node in [*tree.root.children, *tree.root.children[0].children]]
        assert any("[b]title[/b] hostile" in label for label in labels), labels  # markup shown as it is
        for label in labels:
            assert_clean(label)
        assert_clean(drawn(app))
        app.pop_screen()

        async def catalogs() -> Any:
            yield Catalog(models=[ModelInfo(provider="openai", id=f"model-[b]x[/b]{SEQUENCES[0]}", name=f"n{SEQUENCES[2]}")], source="builtin")

        app.push_screen(ModelPicker("openai", "none", catalogs))
        await until(pilot, lambda: isinstance(app.screen, ModelPicker) and any(o.option_count == 1 for o in app.screen.query(OptionList)))
        await pilot.pause()
        prompt = app.screen.query_one(OptionList).get_option_at_index(0).prompt
        assert "model-[b]x[/b]" in str(prompt)
        assert_clean(str(prompt))
        assert_clean(drawn(app))


async def test_the_approval_prompt_writes_out_the_control_characters_of_what_would_run(rig: TuiRig) -> None:
    from osprey.tui.approval_screen import ApprovalScreen

    rig.policy = None  # bash asks
    command = "echo hi\x1b]0;; touch hidden-by-a-title\x07 \x9b2J"
    rig.scripts.append([calls(("bash", {"command": command})), text("finished")])
    app = rig.app()
    async with app.run_test(size=BIG) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "run it")
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen) and bool(app.screen.query("#arguments Static")))
        await pilot.pause()
        shown = "\n".join(str(s.render()) for s in app.screen.query("#arguments Static"))
        # Dropping the title sequence would hide a command the shell runs: it is written out instead.
        assert "echo hi\\x1b]0;; touch hidden-by-a-title\\x07 \\x9b2J" in shown, shown
        assert_no_controls(drawn(app))
        await pilot.press("escape")
        await until(pilot, lambda: bool(rig.ends()))
    assert not (rig.workspace / "hidden-by-a-title").exists()
