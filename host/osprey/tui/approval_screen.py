"""The approval prompt: the tool and its whole arguments; y allow once, a allow always, n deny."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from ..policy.approvals import ApprovalAnswer, ApprovalRequest
from ..terminal_text import escaped
from .transcript import format_arguments


def _covers(rule: str) -> str:
    """What the suggested rule covers (and, for a trailing `*`, what it does not)."""
    from ..policy.rules import Rule, RuleError, describe

    try:
        return describe(Rule.parse(rule))
    except RuleError as exc:
        return str(exc)


class ApprovalScreen(ModalScreen[ApprovalAnswer]):
    """Answers one `ApprovalRequest`. After `a` it asks for the scope; after `n`, for a reason."""

    DEFAULT_CSS = """
    ApprovalScreen { align: center middle; }
    ApprovalScreen > Vertical { width: 100%; margin: 0 2; max-height: 90%; height: auto; border: round $warning; background: $surface; padding: 0 1; }
    ApprovalScreen #arguments { height: auto; max-height: 16; border: round $panel; }
    ApprovalScreen Horizontal { height: auto; }
    ApprovalScreen Button { margin: 0 1 0 0; }
    ApprovalScreen .hidden { display: none; }
    """
    BINDINGS = [
        Binding("y", "allow_once", "allow once"),
        Binding("a", "allow_always", "allow always"),
        Binding("n", "deny", "deny"),
        Binding("p", "scope('project')", "this project", show=False),
        Binding("g", "scope('global')", "everywhere", show=False),
        Binding("escape", "escape", "deny", show=False),
    ]

    def __init__(self, request: ApprovalRequest) -> None:
        super().__init__()
        self.request = request
        self.stage = "choose"  # choose, scope, reason

    def compose(self) -> ComposeResult:
        r = self.request
        with Vertical():
            yield Label(Content.assemble((escaped(r.tool), "bold"), f" needs approval ({r.policy})"), id="title")
            if not r.rememberable:  # an interceptor's own question: say why it asks
                yield Static(escaped(r.reason), markup=False, id="asked_by")
            with VerticalScroll(id="arguments"):
                yield Static(format_arguments(r.arguments), markup=False)
            with Horizontal(id="choose"):
                yield Button("Allow once \\[y]", id="allow_once", variant="success")
                if r.rememberable:  # no saved rule answers an interceptor's own question
                    yield Button("Allow always \\[a]", id="allow_always", variant="primary")
                yield Button("Deny \\[n]", id="deny", variant="error")
            with Vertical(id="scope", classes="hidden"):
                yield Static(escaped(f"Always allow {r.suggested_rule}:"), markup=False)
                yield Static(escaped(_covers(r.suggested_rule)), markup=False, id="covers")
                with Horizontal():
                    yield Button("In this project \\[p]", id="scope_project", variant="primary")
                    yield Button("Everywhere \\[g]", id="scope_global")
            with Vertical(id="reason", classes="hidden"):
                yield Static("Why not? (the model sees this; Enter to deny, empty for no reason)")
                yield Input(placeholder="reason", id="reason_input", max_length=2000)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        actions = {
            "allow_once": self.action_allow_once, "allow_always": self.action_allow_always, "deny": self.action_deny,
            "scope_project": lambda: self.action_scope("project"), "scope_global": lambda: self.action_scope("global"),
        }
        action = actions.get(event.button.id or "")
        if action is not None:
            action()

    def action_allow_once(self) -> None:
        if self.stage == "choose":
            self.dismiss(ApprovalAnswer(decision="allow_once"))

    def action_allow_always(self) -> None:
        if self.stage == "choose" and self.request.rememberable:
            self.stage = "scope"
            self.query_one("#choose").add_class("hidden")
            self.query_one("#scope").remove_class("hidden")
            self.query_one("#scope_project", Button).focus()

    def action_scope(self, scope: str) -> None:
        if self.stage == "scope":
            self.dismiss(ApprovalAnswer(decision="allow_always", scope="global" if scope == "global" else "project"))

    def action_deny(self) -> None:
        if self.stage == "choose":
            self.stage = "reason"
            self.query_one("#choose").add_class("hidden")
            self.query_one("#reason").remove_class("hidden")
            self.query_one("#reason_input", Input).focus()

    def action_escape(self) -> None:
        if self.stage == "scope":  # back to the choice
            self.stage = "choose"
            self.query_one("#scope").add_class("hidden")
            self.query_one("#choose").remove_class("hidden")
        else:
            self.dismiss(ApprovalAnswer(decision="deny"))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(ApprovalAnswer(decision="deny", reason=event.value.strip()))
