"""Text from outside (a model, a tool, a file, a server) made safe to draw on a terminal.

A terminal acts on what it is sent: an escape sequence in a model's answer or a command's output
could set the window title (OSC 0/2), write the clipboard (OSC 52), clear the screen (CSI 2J) or
move the cursor over what was shown. `clean` drops every such sequence, in its 7-bit (ESC ...)
and 8-bit (C1: CSI 0x9b, OSC 0x9d, ...) forms, then every control character left (lone ESCs,
bells, backspaces, carriage returns, C1), and the bidi overrides that make text read other than
it is stored. Newlines and tabs stay; a carriage return ends a line.

Both the headless renderer and the TUI draw outside text through `clean` (streamed text through
`StreamCleaner`), so what one shows the other shows. What a person approves or reads as it is (a
command, a path, an edit) goes through `escaped` instead: its control characters are written out,
since dropping a sequence there would hide part of what runs.
"""

from __future__ import annotations

import re

# Complete sequences, dropped whole: CSI (ESC [ or 0x9b; parameters, intermediates, final byte);
# the string sequences OSC, DCS, SOS, PM, APC (ESC ] P X ^ _, or 0x9d 0x90 0x98 0x9e 0x9f) up to
# BEL or ST (ESC \ or 0x9c); any other escape (charset designations, RIS, keypad modes, ...).
# A string's body stops at any ESC or C1 character, so every scan is linear in the text.
_SEQUENCE = re.compile(
    "(?:\x1b\\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]"
    "|(?:\x1b[\\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x80-\x9f]*(?:\x07|\x1b\\\\|\x9c)"
    "|\x1b[\x20-\x2f]*[\x30-\x7e]"
)
# What is left of a sequence cut short, and every other control character, goes too.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]+")
_CARRIAGE_RETURN = re.compile("\r\n?")
# The start of a sequence that has not ended yet (a stream's last piece may stop inside one).
_UNFINISHED = re.compile(
    "(?:\x1b\\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*"
    "|(?:\x1b[\\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x80-\x9f]*\x1b?"
    "|\x1b[\x20-\x2f]*"
    "|\r"
)
_STARTS = re.compile("[\x1b\x90\x98\x9b\x9d\x9e\x9f\r]")
MAX_HELD = 4096  # characters of an unfinished sequence held back at most; longer, it is cleaned as it is


def clean(text: str) -> str:
    """`text` without escape sequences or control characters (newlines and tabs kept)."""
    if text.isprintable():
        return text  # the common case: nothing to drop (newlines and tabs are not "printable")
    text = _SEQUENCE.sub("", text)
    text = _CARRIAGE_RETURN.sub("\n", text)
    return _CONTROL.sub("", text)


def split_unfinished(text: str) -> tuple[str, str]:
    """`text` cut before a sequence its end leaves unfinished (up to MAX_HELD characters of it):
    (what is complete, the unfinished tail); the tail is empty when nothing is unfinished."""
    start = max(0, len(text) - MAX_HELD)
    for found in _STARTS.finditer(text, start):
        if _UNFINISHED.fullmatch(text, found.start()):
            return text[:found.start()], text[found.start():]
    return text, ""


class StreamCleaner:
    """`clean` for text that arrives in pieces: a sequence cut between two pieces is held back
    until the piece that ends it, then dropped whole."""

    def __init__(self) -> None:
        self._held = ""

    def feed(self, piece: str) -> str:
        """The cleaned text `piece` completes (held text first)."""
        done, self._held = split_unfinished(self._held + piece)
        return clean(done)

    def end(self) -> str:
        """What was held back, cleaned: the stream has ended."""
        held, self._held = self._held, ""
        return clean(held)


_SHOWN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def escaped(text: str) -> str:
    """`text` with each control character written out (`\\x1b`, `\\u202e`), newlines and tabs kept:
    for what a person is shown to approve or to read as it is (a command, a path, an edit), where
    dropping a sequence would hide what runs."""
    if text.isprintable():
        return text
    return _SHOWN.sub(lambda found: f"\\x{ord(found[0]):02x}" if ord(found[0]) < 0x100 else f"\\u{ord(found[0]):04x}", text)
