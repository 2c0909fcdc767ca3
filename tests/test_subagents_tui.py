"""Subagents in the TUI: a child's approval reaches the person labelled with the child's name, and
the panel of running children shows it (persona, turns, the tool it runs) until it ends; the
`/sessions` tree shows child sessions under their parent."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from session_harness import FAST_RETRY, calls, text
from test_tui import started, type_prompt, until

from osprey.config import load_settings
from osprey.events import Event, TaskEnd, ToolResultEvent
from osprey.messages import ModelRequest, ModelTurn
from osprey.session.core import Session, SessionOptions
from osprey.sessions.journal import SessionRow
from osprey.tui.app import OspreyApp
from osprey.tui.approval_screen import ApprovalScreen
from osprey.tui.children import ChildrenPanel, RunningChildren
from osprey.tui.driver import Hooks

SIZE = (110, 32)
SHELL = "---\nname: shell\nspawnable: true\ntools: [write_file]\n---\n\nWrite what you are asked to write.\n"


@dataclass
class RoutedProvider:
    """Answers the lead from one script and its children (their persona's prompt) from another,
    whatever order their requests come in."""

    lead: list[ModelTurn]
    child: list[ModelTurn]
    name: str = "fake"
    model: str = "fake-1"
    lead_may_end: asyncio.Event = field(default_factory=asyncio.Event)

    async def complete(self, request: ModelRequest, on_text: Any = None) -> ModelTurn:
        if "Write what you are asked to write." in (request.system or ""):
            return self.child.pop(0)
        if len(self.lead) == 1:
            await self.lead_may_end.wait()  # the lead's last answer waits for the test
        return self.lead.pop(0)


async def test_a_childs_approval_is_labelled_with_its_name_and_the_panel_shows_it(tmp_path: Path) -> None:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    (workspace / ".osprey" / "personas").mkdir(parents=True)
    (workspace / ".osprey" / "personas" / "shell.md").write_text(SHELL)
    home.mkdir()
    events: list[Event] = []
    provider = RoutedProvider(
        lead=[calls(("spawn_subagent", {"persona": "shell", "task": "Write out.txt."})), text("lead done")],
        child=[calls(("write_file", {"path": "out.txt", "content": "from the child\n"})), text("child done")])

    def factory(hooks: Hooks) -> Session:
        settings = load_settings(workspace, {}, {"OSPREY_HOME": str(home), "OPENAI_API_KEY": "unused"}, interactive=True)

        def emit(event: Event) -> None:
            events.append(event)
            hooks.emit(event)

        options = SessionOptions(settings=settings.model_copy(update={"retry": FAST_RETRY}), interactive=True)
        return Session(options, provider=provider, **{**hooks.kwargs(), "emit": emit})  # type: ignore[arg-type]

    app = OspreyApp(factory)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        panel = app.query_one(ChildrenPanel)
        assert not panel.display or panel.has_class("-empty")
        await type_prompt(pilot, app, "Delegate the writing.")
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen))
        title = str(app.screen.query_one("#title").render())
        assert title.startswith("agent shell: write_file needs approval"), title
        # Meanwhile the panel lists the child, at its call.
        shown = str(panel.render())
        assert "agent shell" in shown and "running write_file" in shown and "1 turn" in shown, shown
        await pilot.press("y")
        await until(pilot, lambda: any(isinstance(e, TaskEnd) and e.agent_id is not None for e in events))
        await pilot.pause()
        assert panel.has_class("-empty") and str(panel.render()) == ""
        provider.lead_may_end.set()
        await until(pilot, lambda: any(isinstance(e, TaskEnd) and e.agent_id is None for e in events))
    [written] = [e for e in events if isinstance(e, ToolResultEvent) and e.name == "write_file"]
    assert written.ok and written.agent_id is not None
    assert (workspace / "out.txt").read_text() == "from the child\n"


def test_the_running_children_model_follows_child_events() -> None:
    from osprey.events import SessionEnd, SessionStart, ToolCallEvent, UsageEvent, UserMessageEvent
    from osprey.messages import Usage

    children = RunningChildren()
    seen: list[int] = []
    children.listen(lambda: seen.append(len(children.running)))
    start = SessionStart(session_id="c1", provider="p", model="m", cwd="/", tool_service="local", tools=[], approval_policy="never",
                         max_turns=5, persona="reader\x1b[2J")
    for event in (start, UserMessageEvent(text="go"), UsageEvent(turn=1, usage=Usage(), total=Usage()),
                  ToolCallEvent(turn=1, id="x", name="read_file", arguments={})):
        event.agent_id, event.parent_id = "c1aaaaaaaaaa", "lead"
        children.update(event)
    [line] = children.lines()
    assert line.startswith("↳ agent reader") and line.endswith("(c1aaaaaa) · 1 turn · running read_file"), line
    assert "\x1b" not in line
    end = TaskEnd(session_id="c1", outcome="Completed", exit_status=0, turns=1, usage=Usage())
    end.agent_id = "c1aaaaaaaaaa"
    children.update(end)
    assert children.lines() == []
    finished = SessionEnd(session_id="c1", outcome="Completed", exit_status=0, turns=1, usage=Usage())
    finished.agent_id = "c1aaaaaaaaaa"
    children.update(finished)
    assert children.agents == {} and seen[-1] == 0
    lead = UserMessageEvent(text="not a child's")
    children.update(lead)
    assert children.agents == {}


async def test_the_sessions_tree_shows_children_under_their_parent() -> None:
    from textual.app import App
    from textual.widgets import Tree

    from osprey.tui.screens import SessionsScreen

    def row(id: str, title: str, parent: str | None = None, outcome: str | None = "Completed") -> SessionRow:  # noqa: A002
        return SessionRow(id=id, cwd="/w", workspace="/w", title=title, provider="p", model="m", created=1.0, updated=2.0,
                          outcome=outcome, parent_id=parent)

    rows = [row("lead00000001", "the lead"), row("child0000001", "a child", "lead00000001"),
            row("grand0000001", "a grandchild", "child0000001", None), row("other0000001", "another lead")]

    class Host(App[None]):
        def on_mount(self) -> None:
            self.push_screen(SessionsScreen(rows, "/w"))

    async with Host().run_test(size=SIZE) as pilot:
        await pilot.pause()
        tree = pilot.app.screen.query_one(Tree)
        [directory] = tree.root.children
        tops = [node.data.id for node in directory.children if node.data is not None]
        assert tops == ["lead00000001", "other0000001"]
        [child] = directory.children[0].children
        assert child.data is not None and child.data.id == "child0000001" and "Completed" in str(child.label)
        [grandchild] = child.children
        assert grandchild.data is not None and grandchild.data.id == "grand0000001" and "running" in str(grandchild.label)
