"""The approval prompt: the tool and its whole arguments (an edit as a unified diff); y allow once,
a allow always (for a proposed rule the person may edit), n deny (with a reason)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from ..policy.approvals import ApprovalAnswer, ApprovalRequest
from ..terminal_text import clean, escaped
from .transcript import edit_diff, format_arguments


def covers(rule: str) -> tuple[bool, str]:
    """Whether `rule` is a valid rule, and what it covers (or what is wrong with it)."""
    from ..policy.rules import Rule, RuleError, describe

    try:
        return True, describe(Rule.parse(rule))
    except RuleError as exc:
        return False, str(exc)


def shown_arguments(request: ApprovalRequest) -> Text | str:
    """The call as the person judges it: an edit as the unified diff it makes (after its other
    arguments), anything else as its arguments, one `key: value` a line."""
    diff = edit_diff(request.tool, request.arguments)
    if diff is None:
        return format_arguments(request.arguments)
    from .widgets import diff_text

    rest = {k: v for k, v in request.arguments.items() if k not in ("old_string", "new_string", "replace_all")}
    return Text(format_arguments(rest) + "\n") + diff_text("\n".join(diff))


class ApprovalScreen(ModalScreen[ApprovalAnswer]):
    """Answers one `ApprovalRequest`. After `a` it shows the rule it would save (editable, with
    what it covers) and asks where to save it; after `n`, it asks for a reason."""

    DEFAULT_CSS = """
    ApprovalScreen { align: center middle; }
    ApprovalScreen > Vertical { width: 100%; margin: 0 2; max-height: 100%; height: auto; border: round $warning; background: $surface; padding: 0 1; }
    ApprovalScreen #arguments { height: auto; max-height: 40vh; border: round $panel; }
    ApprovalScreen #scope, ApprovalScreen #reason { height: auto; }
    ApprovalScreen #covers { color: $text-muted; max-height: 6; }
    ApprovalScreen #covers.invalid { color: $error; }
    ApprovalScreen Horizontal { height: auto; }
    ApprovalScreen Button { margin: 0 1 0 0; min-width: 0; }
    ApprovalScreen.-narrow Horizontal { layout: vertical; }
    ApprovalScreen.-narrow Button { width: 100%; margin: 0; }
    ApprovalScreen.-narrow > Vertical { margin: 0; }
    ApprovalScreen .hidden { display: none; }
    """
    # Below 64 columns the buttons stack, each on its own line, so none is cut short.
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (64, "-wide")]
    BINDINGS = [
        Binding("y", "allow_once", "allow once"),
        Binding("a", "allow_always", "allow always"),
        Binding("n", "deny", "deny"),
        Binding("p", "scope('project')", "this project", show=False),
        Binding("g", "scope('global')", "everywhere", show=False),
        Binding("e", "edit_rule", "edit the rule", show=False),
        Binding("escape", "escape", "deny", show=False),
    ]

    def __init__(self, request: ApprovalRequest) -> None:
        super().__init__()
        self.request = request
        self.stage = "choose"  # choose, scope, reason

    def compose(self) -> ComposeResult:
        r = self.request
        with Vertical():
            # A child session's request names the agent that asks (`session.children.ChildApprovalRequest`).
            agent = getattr(r, "agent", "")
            asker = ("agent ", (escaped(clean(agent)[:80]), "bold"), ": ") if agent else ()
            yield Label(Content.assemble(*asker, (escaped(r.tool), "bold"), f" needs approval ({r.policy})"), id="title")
            if not r.rememberable:  # an interceptor's own question: say why it asks
                yield Static(escaped(r.reason), markup=False, id="asked_by")
            with VerticalScroll(id="arguments"):
                yield Static(shown_arguments(r), markup=False)
            with Horizontal(id="choose"):
                yield Button("Allow once \\[y]", id="allow_once", variant="success", compact=True)
                if r.rememberable:  # no saved rule answers an interceptor's own question
                    yield Button("Allow always… \\[a]", id="allow_always", variant="primary", compact=True)
                yield Button("Deny \\[n]", id="deny", variant="error", compact=True)
            with Vertical(id="scope", classes="hidden"):
                yield Static("Always allow calls this rule covers (e edits it):", markup=False)
                yield Input(r.always_rule, id="rule_input", max_length=1024, select_on_focus=False)
                yield Static(escaped(covers(r.always_rule)[1]), markup=False, id="covers")
                with Horizontal():
                    yield Button("In this project \\[p]", id="scope_project", variant="primary", compact=True)
                    yield Button("Everywhere \\[g]", id="scope_global", compact=True)
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

    @property
    def rule(self) -> str:
        """The rule "allow always" saves: the proposed one, as the person left it."""
        return self.query_one("#rule_input", Input).value.strip()

    def action_allow_once(self) -> None:
        if self.stage == "choose":
            self.dismiss(ApprovalAnswer(decision="allow_once"))

    def action_allow_always(self) -> None:
        if self.stage == "choose" and self.request.rememberable:
            self.stage = "scope"
            self.query_one("#choose").add_class("hidden")
            self.query_one("#scope").remove_class("hidden")
            self.query_one("#scope_project", Button).focus()

    def action_edit_rule(self) -> None:
        if self.stage == "scope":
            self.query_one("#rule_input", Input).focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "rule_input":
            valid, text = covers(event.value.strip())
            shown = self.query_one("#covers", Static)
            shown.update(escaped(text))
            shown.set_class(not valid, "invalid")

    def action_scope(self, scope: str) -> None:
        if self.stage != "scope":
            return
        rule = self.rule
        if not covers(rule)[0]:  # said under the rule already; the person fixes it or goes back
            self.query_one("#rule_input", Input).focus()
            return
        self.dismiss(ApprovalAnswer(decision="allow_always", scope="global" if scope == "global" else "project", rule=rule))

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
            self.query_one("#allow_always", Button).focus()
        else:
            self.dismiss(ApprovalAnswer(decision="deny"))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "rule_input":
            self.action_scope("project")
        elif self.stage == "reason":
            self.dismiss(ApprovalAnswer(decision="deny", reason=event.value.strip()))
