"""The /workflows view: the session's workflow runs with each one's agents and its latest log lines,
read again from the run objects twice a second while the view is open."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from ..numbers import grouped
from ..terminal_text import clean

REFRESH_SECONDS = 0.5
MAX_AGENTS_SHOWN = 40  # of one run; the rest are counted
MAX_LOG_SHOWN = 3  # of one run's osprey.log lines, the latest
MAX_LINE = 200  # characters of a label, an argument or a log line
MARKS = {"waiting": "·", "running": "…", "done": "✓", "failed": "✗", "cancelled": "■"}


def _short(text: Any) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= MAX_LINE else line[: MAX_LINE - 1] + "…"


def agent_line(agent: Any) -> str:
    """One agent (a `WorkflowAgent`): its label, status, turns and tokens, and how it ended."""
    status = str(agent.status)
    line = f"  {MARKS.get(status, '·')} {_short(agent.label)}: {status}"
    if status != "waiting":
        usage = agent.usage
        line += f" · {agent.turns} turns · {grouped(usage.input_tokens)} in, {grouped(usage.output_tokens)} out"
    if agent.outcome and agent.outcome != "Completed":
        line += f" · {agent.outcome}"
    if agent.error:
        line += f" · {_short(agent.error)}"
    return line


def run_lines(run: Any) -> list[str]:
    """One run (a `WorkflowRun`): its name, id, status and agents ended, then a line per agent, its
    latest log lines and its error."""
    agents = list(run.agents)
    done = sum(1 for agent in agents if agent.status not in ("running", "waiting"))
    lines = [f"{_short(run.name)} ({run.id}): {run.status} · {done} of {len(agents)} agents ended"]
    if run.args:
        lines.append(f"  args: {_short(run.args)}")
    lines += [agent_line(agent) for agent in agents[:MAX_AGENTS_SHOWN]]
    if len(agents) > MAX_AGENTS_SHOWN:
        lines.append(f"  … and {len(agents) - MAX_AGENTS_SHOWN} more agents")
    lines += [f"  log: {_short(line)}" for line in list(run.log)[-MAX_LOG_SHOWN:]]
    if run.error:
        lines.append(f"  error: {_short(run.error)}")
    return lines


def progress_text(runs: Sequence[Any]) -> str:
    """What the view shows for `runs`."""
    if not runs:
        return "No workflow has run in this session: /run PATH, /deep-research QUESTION or a workflow's /NAME starts one."
    lines: list[str] = []
    for run in runs:
        if lines:
            lines.append("")
        lines += run_lines(run)
    return clean("\n".join(lines))


class WorkflowsView(ModalScreen[None]):
    """The workflow runs `runs()` gives, refreshed while the view is open; Esc closes it."""

    DEFAULT_CSS = """
    WorkflowsView { align: center middle; }
    WorkflowsView > Vertical { width: 90%; max-width: 120; height: auto; max-height: 90%; border: round $accent; background: $surface; padding: 0 1; }
    WorkflowsView .heading { text-style: bold; }
    WorkflowsView #runs { height: auto; max-height: 30; }
    WorkflowsView .buttons { height: auto; margin-top: 1; }
    """
    BINDINGS = [Binding("escape", "close", "close")]

    def __init__(self, runs: Callable[[], Sequence[Any]]) -> None:
        super().__init__()
        self.runs = runs
        self.shown = progress_text(runs())

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Workflows", markup=False, classes="heading")
            with VerticalScroll(id="runs"):
                yield Static(self.shown, markup=False, id="progress")
            with Horizontal(classes="buttons"):
                yield Button("Close", id="close")

    def on_mount(self) -> None:
        self.query_one("#close", Button).focus()
        self.set_interval(REFRESH_SECONDS, self.refresh_runs)

    def refresh_runs(self) -> None:
        text = progress_text(self.runs())
        if text != self.shown:
            self.shown = text
            self.query_one("#progress", Static).update(text)

    @on(Button.Pressed, "#close")
    def action_close(self) -> None:
        self.dismiss(None)
