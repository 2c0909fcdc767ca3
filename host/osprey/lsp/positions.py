"""Positions as the model gives them (1-based line numbers as `read_file` shows them, and a
1-based column in characters or a symbol on that line) and as LSP speaks them (0-based lines and
UTF-16 code units)."""

from __future__ import annotations

import re

from ..errors import ToolError


def lines_of(text: str) -> list[str]:
    """The lines of `text` as LSP counts them (split at \\n, \\r\\n and \\r), without their ends."""
    return re.split(r"\r\n|\r|\n", text)


def utf16_units(text: str) -> int:
    """How many UTF-16 code units `text` takes."""
    return len(text) + sum(1 for c in text if ord(c) > 0xFFFF)


def to_character(line_text: str, units: int) -> int:
    """The 0-based character index on `line_text` of a UTF-16 offset (clamped to the line)."""
    count = 0
    for index, c in enumerate(line_text):
        if count >= units:
            return index
        count += 2 if ord(c) > 0xFFFF else 1
    return len(line_text)


_WORDY = re.compile(r"^\w+$")


def position(lines: list[str], line: int, column: int | None, symbol: str | None, path: str) -> dict[str, int]:
    """The LSP position of 1-based `line` and either 1-based `column` (characters) or the first
    occurrence of `symbol` on that line (as a whole word when it is one)."""
    if not 1 <= line <= len(lines):
        raise ToolError("invalid_argument", f"{path} has {len(lines)} lines; line {line} is not one of them")
    text = lines[line - 1]
    if symbol:
        found = -1
        if _WORDY.match(symbol):
            match = re.search(rf"(?<!\w){re.escape(symbol)}(?!\w)", text)
            found = match.start() if match else -1
        if found < 0:
            found = text.find(symbol)
        if found < 0:
            shown = text.strip()[:200]
            raise ToolError("invalid_argument", f"{symbol!r} is not on line {line} of {path} (the line is: {shown!r}); "
                                                "give the line read_file shows it on")
        index = found
    elif column is not None:
        if column > len(text) + 1:
            raise ToolError("invalid_argument", f"line {line} of {path} has {len(text)} characters; column {column} is past its end")
        index = column - 1
    else:
        raise ToolError("invalid_argument", "give `symbol` (a name on the line) or `column` (1-based) with `line`")
    return {"line": line - 1, "character": utf16_units(text[:index])}
