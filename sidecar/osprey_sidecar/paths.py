"""Allowed roots: every path argument is resolved (symlinks too) and must stay inside them.

Paths travel as UTF-8 strings. A file name that is not valid UTF-8 is shown with
`\\xNN` escapes for its undecodable bytes, and such an escaped name is accepted
back as an argument, so a model can name every file it was shown.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from .errors import OUTSIDE_ROOT, INVALID_ARGUMENT, ToolFailure

_ESCAPE = re.compile(rb"\\x([0-9a-fA-F]{2})")


def to_wire(fs_path: str) -> str:
    """A filesystem path (surrogate-escaped str) as a valid UTF-8 string."""
    return os.fsencode(fs_path).decode("utf-8", "backslashreplace")


def from_wire(path: str, base: str = "") -> str:
    """The filesystem path a wire string names (relative to `base`), undoing `\\xNN` escapes when needed."""
    if "\\x" not in path or os.path.lexists(os.path.join(base, path)):
        return path
    raw = _ESCAPE.sub(lambda m: bytes([int(m.group(1), 16)]), path.encode("utf-8"))
    return os.fsdecode(raw)


class Roots:
    """The allowed roots; the first is the working directory."""

    def __init__(self, roots: Sequence[str]) -> None:
        if not roots:
            raise ValueError("at least one allowed root is required")
        self.roots = [os.path.realpath(r) for r in roots]
        self.cwd = self.roots[0]

    def root_of(self, real: str) -> str | None:
        """The allowed root containing the resolved path `real`, if any."""
        for root in self.roots:
            if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
                return root
        return None

    def resolve(self, path: str, *, default_cwd: bool = True) -> str:
        """Resolve `path` (relative to the working directory) and refuse it outside the roots."""
        if not path:
            if default_cwd:
                return self.cwd
            raise ToolFailure(INVALID_ARGUMENT, "a path is required")
        if "\x00" in path:
            raise ToolFailure(INVALID_ARGUMENT, "a path cannot contain a NUL character")
        fs = from_wire(path, self.cwd)
        joined = fs if os.path.isabs(fs) else os.path.join(self.cwd, fs)
        real = os.path.realpath(joined)
        if self.root_of(real) is None:
            allowed = ", ".join(to_wire(r) for r in self.roots)
            lexical = os.path.normpath(joined)
            how = "" if lexical == real else f" (it resolves to {to_wire(real)})"
            raise ToolFailure(
                OUTSIDE_ROOT,
                f"{path} is outside the allowed roots{how}; allowed: {allowed}. Use a path inside them.",
            )
        return real

    def show(self, real: str) -> str:
        """How a resolved path is shown: relative to the working directory when inside it."""
        if real == self.cwd:
            return "."
        prefix = self.cwd.rstrip(os.sep) + os.sep
        if real.startswith(prefix):
            return to_wire(real[len(prefix):])
        return to_wire(real)
