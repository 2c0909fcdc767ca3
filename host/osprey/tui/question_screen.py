"""The model's question to the person: the question, a line to answer it; Enter sends, Esc closes
without an answer (the model is told so and decides itself)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static

from ..terminal_text import clean
from ..tools.control import MAX_ANSWER_CHARS


class QuestionScreen(ModalScreen[str | None]):
    """Answers one question: the typed text (Enter), or None (Esc)."""

    DEFAULT_CSS = """
    QuestionScreen { align: center middle; }
    QuestionScreen > Vertical { width: 100%; margin: 0 2; max-height: 90%; height: auto; border: round $accent; background: $surface; padding: 0 1; }
    QuestionScreen #question { height: auto; max-height: 16; }
    QuestionScreen #hint { color: $text-muted; }
    """
    BINDINGS = [Binding("escape", "close", "close without answering")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("[b]The model asks[/b]", id="title")
            with VerticalScroll(id="question"):
                yield Static(clean(self.question), markup=False)
            yield Input(placeholder="your answer", id="answer", max_length=MAX_ANSWER_CHARS)
            yield Static("Enter sends the answer · Esc closes without answering (the model then decides itself)", id="hint",
                         markup=False)

    def on_mount(self) -> None:
        self.query_one("#answer", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value)

    def action_close(self) -> None:
        self.dismiss(None)
