"""Passages of a kept output: overlapping windows of lines, ended at a blank line or an
indentation change where one is near; a JSON document is split at the items of its main
container instead. Every passage carries the line range it holds (1-based, of the kept output)."""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass

WINDOW_LINES = 30
STEP_LINES = 15
MAX_PASSAGE_CHARS = 4_000  # a longer line is split into pieces of this size
MAX_PASSAGES = 200_000
# A JSON document is split at its items only up to this size and this many items (beyond them it
# is split as text): decoding keeps each item's span, at about a second a megabyte here.
JSON_MAX_CHARS = 8 * 1024 * 1024
JSON_MAX_ITEMS = 50_000
JSON_GROUP_CHARS = 1_500
JSON_MAX_DEPTH = 4


@dataclass(frozen=True)
class Passage:
    first: int  # first line, 1-based
    last: int  # last line
    text: str


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _good_end(lines: list[str], j: int) -> bool:
    """Whether a window ending before line index `j` ends at a natural break."""
    if j >= len(lines):
        return True
    if not lines[j - 1].strip() or not lines[j].strip():
        return True
    return _indent(lines[j]) == 0 and _indent(lines[j - 1]) > 0


def line_passages(text: str) -> list[Passage]:
    """Windows of about WINDOW_LINES lines, each starting STEP_LINES after the previous one."""
    lines = text.split("\n")
    if lines and lines[-1] == "" and len(lines) > 1:
        lines.pop()
    out: list[Passage] = []
    start, n = 0, len(lines)
    while start < n and len(out) < MAX_PASSAGES:
        end = min(n, start + WINDOW_LINES)
        if end < n:
            for j in range(end, start + WINDOW_LINES * 2 // 3, -1):
                if _good_end(lines, j):
                    end = j
                    break
        chunk = lines[start:end]
        body = "\n".join(chunk)
        if len(body) <= MAX_PASSAGE_CHARS:
            out.append(Passage(start + 1, end, body))
        else:
            _long(out, chunk, start)
        if end >= n:
            break
        start = max(start + 1, min(end, start + STEP_LINES))
    return out


def _long(out: list[Passage], chunk: list[str], start: int) -> None:
    """A window too long to show whole: its lines grouped up to MAX_PASSAGE_CHARS, a longer line in pieces."""
    group: list[str] = []
    group_first = start
    size = 0
    for k, line in enumerate(chunk):
        number = start + k
        if len(line) > MAX_PASSAGE_CHARS:
            if group:
                out.append(Passage(group_first + 1, number, "\n".join(group)))
                group, size = [], 0
            for i in range(0, len(line), MAX_PASSAGE_CHARS):
                out.append(Passage(number + 1, number + 1, line[i:i + MAX_PASSAGE_CHARS]))
            group_first = number + 1
            continue
        if size + len(line) > MAX_PASSAGE_CHARS and group:
            out.append(Passage(group_first + 1, number, "\n".join(group)))
            group, size, group_first = [], 0, number
        group.append(line)
        size += len(line) + 1
    if group:
        out.append(Passage(group_first + 1, start + len(chunk), "\n".join(group)))


_WS = " \t\n\r"


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


Span = tuple[int, int, tuple[int, int]]  # start, end, (where the value starts, its item count: -1 when not a list or object)


def _items(text: str, start: int, decoder: json.JSONDecoder) -> tuple[list[Span], int]:
    """The spans (start, end, value) of the items of the array or object opening at `start`."""
    opening = text[start]
    closing = "]" if opening == "[" else "}"
    spans: list[Span] = []
    i = _skip(text, start + 1)
    if i < len(text) and text[i] == closing:
        return spans, i + 1
    while True:
        item_start = i
        if opening == "{":
            _, i = decoder.raw_decode(text, i)
            i = _skip(text, i)
            if text[i] != ":":
                raise ValueError("expected ':'")
            i = _skip(text, i + 1)
        value_start = i
        value, i = decoder.raw_decode(text, i)
        spans.append((item_start, i, (value_start, len(value) if isinstance(value, (list, dict)) else -1)))
        del value
        if len(spans) > JSON_MAX_ITEMS:
            raise ValueError("too many items")
        i = _skip(text, i)
        if i >= len(text):
            raise ValueError("unterminated")
        if text[i] == closing:
            return spans, i + 1
        if text[i] != ",":
            raise ValueError("expected ','")
        i = _skip(text, i + 1)


def json_passages(text: str) -> list[Passage] | None:
    """Passages at the items of the document's main container (descending into an item that holds
    most of the document), neighbouring small items grouped; None when `text` is not one JSON
    array or object."""
    i = _skip(text, 0)
    if i >= len(text) or text[i] not in "[{" or len(text) > JSON_MAX_CHARS:
        return None
    decoder = json.JSONDecoder()
    try:
        spans, end = _items(text, i, decoder)
        if _skip(text, end) != len(text):
            return None
        for _ in range(JSON_MAX_DEPTH):
            big = [s for s in spans if s[1] - s[0] > (len(text) // 2)]
            if not big:
                break
            value_start, count = big[0][2]
            if count < 2:
                break
            spans, _ = _items(text, value_start, decoder)
    except (ValueError, IndexError, RecursionError):
        return None
    if len(spans) < 2:
        return None
    starts = [0]
    pos = text.find("\n")
    while pos != -1:
        starts.append(pos + 1)
        pos = text.find("\n", pos + 1)

    def line_of(offset: int) -> int:
        return bisect.bisect_right(starts, offset)

    out: list[Passage] = []
    group_start = group_end = -1
    for s, e, _ in spans:
        if group_start >= 0 and e - group_start > JSON_GROUP_CHARS:
            out.append(Passage(line_of(group_start), line_of(max(group_start, group_end - 1)), text[group_start:group_end]))
            group_start = -1
        if group_start < 0:
            group_start = s
        group_end = e
        if len(out) >= MAX_PASSAGES:
            break
    if group_start >= 0:
        out.append(Passage(line_of(group_start), line_of(max(group_start, group_end - 1)), text[group_start:group_end]))
    # An item longer than a passage is shown cut; its whole text is still indexed.
    return out


def split(text: str) -> list[Passage]:
    """The passages of a kept output."""
    return json_passages(text) or line_passages(text)
