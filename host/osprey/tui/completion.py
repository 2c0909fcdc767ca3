"""The slash-command menu: opens as `/` is typed, narrows with each key, and is walked with up and
down; Tab or Enter takes the highlighted command, Esc closes it, a click takes one."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from rich.text import Text
from textual.message import Message
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from ..terminal_text import clean
from . import commands
from .commands import Command


def needs_argument(command: Command) -> bool:
    """`/provider NAME` does; `/model [NAME]` and `/quit` do not."""
    _, _, rest = command.usage.partition(" ")
    return bool(rest) and not rest.startswith("[")


class CompletionMenu(OptionList):
    """The commands matching what the prompt holds; hidden when nothing matches."""

    DEFAULT_CSS = """
    CompletionMenu { height: auto; max-height: 10; display: none; border: none; padding: 0 1; }
    CompletionMenu.shown { display: block; }
    """
    can_focus = False

    class Chosen(Message):
        """A command was clicked."""

        def __init__(self, command: Command) -> None:
            super().__init__()
            self.command = command

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.found: list[Command] = []

    @property
    def shown(self) -> bool:
        return self.has_class("shown")

    def scope(self) -> tuple[Sequence[Command], Collection[str]]:
        """The session's workflow commands and the built-in commands it does not have (`SlashCommands.scope`)."""
        slash = getattr(self.app, "slash", None)
        return slash.scope() if slash is not None else ((), ())

    def complete(self, text: str) -> str | None:
        """`commands.complete` over the commands this session has."""
        extra, hidden = self.scope()
        return commands.complete(text, extra=extra, hidden=hidden)

    def show_for(self, text: str) -> None:
        """Show the commands matching `text`, keeping the highlight on the
        same command when it still matches."""
        extra, hidden = self.scope()
        found = commands.matching(text, extra=extra, hidden=hidden)
        if not found:
            self.hide()
            return
        current = self.current
        names = [c.name for c in found]
        if names != [c.name for c in self.found]:
            self.found = found
            width = max(len(c.usage) for c in found)
            # Plain text: `[PATH]`, `[all]` and `[NAME]` are argument hints, not markup.
            self.set_options([Option(Text(f"{c.usage.ljust(width)}  {clean(c.help)}"), id=c.name) for c in found])
            self.highlighted = names.index(current.name) if current is not None and current.name in names else 0
        typed = text[1:].lower()
        if typed in names:  # a name typed in full is the one Enter takes
            self.highlighted = names.index(typed)
        self.add_class("shown")

    def hide(self) -> None:
        self.remove_class("shown")

    def move(self, step: int) -> None:
        if self.found:
            at = self.highlighted if self.highlighted is not None else 0
            self.highlighted = (at + step) % len(self.found)

    @property
    def current(self) -> Command | None:
        """The highlighted command."""
        if not self.found or self.highlighted is None or not 0 <= self.highlighted < len(self.found):
            return None
        return self.found[self.highlighted]

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        chosen = next((c for c in self.found if c.name == event.option.id), None)
        if chosen is not None:
            self.post_message(self.Chosen(chosen))
