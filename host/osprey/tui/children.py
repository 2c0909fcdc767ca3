"""The running child agents (subagents) of the session shown, and the panel that lists them: each
one's name, persona, turns and the tool it runs now, fed by the child events the presenter gets."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from textual.widgets import Static

from ..events import Event, SessionEnd, SessionStart, TaskEnd, ToolCallEvent, ToolResultEvent, UsageEvent, UserMessageEvent
from ..terminal_text import clean

MAX_SHOWN = 8  # lines of the panel; more children are counted
NAME_CHARS = 40


@dataclass
class RunningChild:
    agent_id: str
    persona: str
    turns: int = 0
    tool: str | None = None  # the call it runs now
    working: bool = False


class RunningChildren:
    """The child sessions whose events the presenter has seen, while they work."""

    def __init__(self) -> None:
        self.agents: dict[str, RunningChild] = {}
        self._listeners: list[Callable[[], None]] = []

    def listen(self, changed: Callable[[], None]) -> None:
        self._listeners.append(changed)

    def _changed(self) -> None:
        for listener in self._listeners:
            listener()

    def clear(self) -> None:
        if self.agents:
            self.agents.clear()
            self._changed()

    def update(self, event: Event) -> None:
        """Take one child event into account."""
        agent_id = event.agent_id
        if agent_id is None:
            return
        if isinstance(event, SessionStart):
            self.agents[agent_id] = RunningChild(agent_id, event.persona or "")
        agent = self.agents.get(agent_id)
        if agent is None:
            return
        match event:
            case UserMessageEvent():
                agent.working = True
            case ToolCallEvent():
                agent.tool = event.name
            case ToolResultEvent():
                agent.tool = None
            case UsageEvent():
                agent.turns += 1
            case TaskEnd():
                agent.working, agent.tool = False, None
            case SessionEnd():
                del self.agents[agent_id]
            case _:
                return
        self._changed()

    @property
    def running(self) -> list[RunningChild]:
        return [agent for agent in self.agents.values() if agent.working]

    def lines(self) -> list[str]:
        """The panel's lines: one a running child, at most MAX_SHOWN."""
        running = self.running
        lines = []
        for agent in running[:MAX_SHOWN]:
            name = clean(agent.persona or "agent")[:NAME_CHARS]
            doing = f" · running {clean(agent.tool)[:NAME_CHARS]}" if agent.tool else " · thinking"
            lines.append(f"↳ agent {name} ({agent.agent_id[:8]}) · {agent.turns} turn{'s' if agent.turns != 1 else ''}{doing}")
        if len(running) > MAX_SHOWN:
            lines.append(f"  … and {len(running) - MAX_SHOWN} more")
        return lines


class ChildrenPanel(Static):
    """The running children, one a line; hidden when none runs."""

    DEFAULT_CSS = """
    ChildrenPanel { height: auto; max-height: 10; color: $text-muted; padding: 0 1; }
    ChildrenPanel.-empty { display: none; }
    """

    def __init__(self, children: RunningChildren, *, id: str | None = None) -> None:  # noqa: A002 - textual's name
        super().__init__("", markup=False, id=id)
        self.children_model = children
        self.add_class("-empty")
        children.listen(self._show)

    def _show(self) -> None:
        lines = self.children_model.lines()
        self.set_class(not lines, "-empty")
        self.update("\n".join(lines))
